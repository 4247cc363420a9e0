package transport

import "context"

// Exchange sends one frame on c and receives one, concurrently, so that
// neither side depends on the connection buffering the other's message
// (both ends of a pair may call it at once). If either fails the other is
// cancelled; the first error is returned. A connection that is Duplex
// exchanges messages within its DuplexMax on the calling goroutine.
func Exchange(ctx context.Context, c Conn, sh Header, send []byte, rh Header, recv []byte) error {
	if d, ok := c.(Duplex); ok && max(len(send), len(recv)) <= d.DuplexMax() {
		return d.SendRecv(ctx, sh, send, rh, recv)
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		err := c.Send(ictx, sh, send)
		if err != nil {
			cancel()
		}
		sent <- err
	}()
	err := c.Recv(ictx, rh, recv)
	// The receive failed because the failed send cancelled it: the send's
	// error is the cause, whatever error the transport made of the
	// cancellation.
	sendFirst := err != nil && ictx.Err() != nil && ctx.Err() == nil
	if err != nil {
		cancel()
	}
	if serr := <-sent; serr != nil && (err == nil || sendFirst) {
		return serr
	}
	return err
}
