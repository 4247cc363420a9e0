package comm_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestLinksBootstrapAndRewire checks that bootstrap and rewire take their
// links from the same table: with two emulated hosts of two ranks, ranks
// of a host are joined by shared memory (unless TCP is forced) and hosts
// by TCP, every link under the emulation layer, and the links a rewire
// opens between hosts are chosen and wrapped the same way.
func TestLinksBootstrapAndRewire(t *testing.T) {
	const spec = "hosts=2x2,nics=host,ocs_ports=2,hbd=4GB/s,eps=1GB/s,ocs=1GB/s"
	for _, tc := range []struct {
		transport string
		want      string
	}{
		{comm.TransportAuto, "emu(shm)+emu(tcp)"},
		{comm.TransportTCP, "emu(tcp)"},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			id, err := comm.NewUniqueIDAt("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cs, errs := initAll(t, id, 4, comm.WithTopology(mustTopo(t, spec)), comm.WithEmulation(true),
				comm.WithTransport(tc.transport), comm.WithListenHost("127.0.0.1"))
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, c := range cs {
				if got := c.TransportName(); got != tc.want {
					t.Errorf("rank %d after Init: transport %q, want %q", r, got, tc.want)
				}
			}
			target := mustTopo(t, spec+",circuits=0-1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var links atomic.Int32
			errs = make([]error, len(cs))
			for r, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					times, err := c.Rewire(ctx, comm.Rewire{Target: target})
					links.Add(int32(times.Links))
					x := []float32{float32(r + 1)}
					if err == nil {
						err = c.AllReduce(ctx, comm.Slice(x), comm.Slice(x), comm.Sum)
					}
					if err == nil && x[0] != 10 {
						err = fmt.Errorf("allreduce after the rewire gave %v, want 10", x[0])
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			if links.Load() == 0 {
				t.Fatal("the rewire replaced no link")
			}
			for r, c := range cs {
				if got := c.TransportName(); got != tc.want {
					t.Errorf("rank %d after the rewire: transport %q, want %q", r, got, tc.want)
				}
			}
		})
	}
}
