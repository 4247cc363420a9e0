package transport

import (
	"context"
	"errors"
)

// Transports that are set up over an established connection (shm and rdma
// over a pair's TCP connection) exchange their setup messages on it, then
// keep it open and watch it: it carries nothing more, so its failure means
// the peer's process is gone.

// SetupHeader labels message step of a transport's setup exchange: a
// KindVerify frame of communicator comm and epoch, Seq naming the
// transport, Root the sender's rank and Count the version of the
// transport's setup protocol, so that a peer speaking another transport or
// version is refused.
func SetupHeader(comm uint64, epoch uint32, seq uint64, step uint32, from int, version uint64) Header {
	return Header{Kind: KindVerify, Comm: comm, Epoch: epoch, Seq: seq, Step: step, Root: uint32(from), Count: version}
}

// Watch waits on ctl, a connection that carries nothing after setup, for
// the frame want that is never sent, and returns why the wait ended: ctl's
// error (the peer closed it, or its process died), or an error saying a
// frame arrived. Closing ctl ends it.
func Watch(ctl Conn, want Header) error {
	if err := ctl.Recv(context.Background(), want, nil); err != nil {
		return err
	}
	return errors.New("unexpected message on the watched connection")
}
