package comm_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/transport/tcp"
)

// TestAbortIgnoresSilentClient: a client that connects to a rank's data
// listener and never authenticates must not delay Abort, which does not
// wait for anything.
func TestAbortIgnoresSilentClient(t *testing.T) {
	comms := initTCP(t, comm.UniqueID{}, 2)
	defer comms[1].Close()
	silent, err := net.Dial("tcp", comm.DataListenAddr(comms[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(100 * time.Millisecond) // let the listener take the socket
	done := make(chan struct{})
	go func() { comms[0].Abort(); close(done) }()
	select {
	case <-done:
	case <-time.After(tcp.HandshakeTimeout / 2):
		t.Fatalf("Abort still waiting after %v with a silent client on the data listener", tcp.HandshakeTimeout/2)
	}
}

// initTCP bootstraps n ranks over TCP on 127.0.0.1 in this process, with id
// (a fresh one if id is zero).
func initTCP(t *testing.T, id comm.UniqueID, n int) []*comm.Communicator {
	t.Helper()
	if id.Addr == "" {
		var err error
		if id, err = comm.NewUniqueIDAt("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*comm.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = comm.Init(ctx, id, r, n, comm.WithTransport(comm.TransportTCP))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms
}

// TestJobNonce: every rank of a communicator has rank 0's job nonce, and
// two jobs with the same rendezvous id and secret (so the same
// communicator id) have different ones.
func TestJobNonce(t *testing.T) {
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var nonces [][16]byte
	for job := range 2 {
		comms := initTCP(t, id, 3)
		for _, c := range comms {
			if c.JobNonce() != comms[0].JobNonce() || c.JobNonce() == ([16]byte{}) {
				t.Fatalf("job %d: rank %d nonce %x, rank 0 %x", job, c.Rank(), c.JobNonce(), comms[0].JobNonce())
			}
		}
		nonces = append(nonces, comms[0].JobNonce())
		closeAll(comms)
	}
	if nonces[0] == nonces[1] {
		t.Fatalf("two jobs share the nonce %x", nonces[0])
	}
	a, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	if a[0].JobNonce() != a[1].JobNonce() || a[0].JobNonce() == b[0].JobNonce() {
		t.Fatalf("in-process nonces %x %x, another group %x", a[0].JobNonce(), a[1].JobNonce(), b[0].JobNonce())
	}
	for _, c := range append(a, b...) {
		c.Close()
	}
}
