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
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*comm.Communicator, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = comm.Init(ctx, id, r, 2, comm.WithTransport(comm.TransportTCP))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
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
