package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// TestFabricStats: an AllReduce across two emulated hosts shows up in the
// communicator's fabric counters on the links it can cross: each host's
// HBD link and the packet network between NICs of different hosts, the
// latter carrying at least the whole vector each way (each host needs
// every element of the other's). Every byte the fabric sent is on one
// link. A communicator without emulation has no counters.
func TestFabricStats(t *testing.T) {
	top, err := topo.FromSpec("hosts=2x2,hbd=20GB/s,eps=5GB/s")
	if err != nil {
		t.Fatal(err)
	}
	comms, err := comm.NewLocal(4, comm.WithTopology(top), comm.WithEmulation(true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	before, ok := comms[0].FabricStats()
	if !ok {
		t.Fatal("no fabric counters on an emulated communicator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 1 << 15
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]float64, n)
			for i := range x {
				x[i] = float64(r)
			}
			if errs[r] = comm.AllReduce(ctx, c, x, x, comm.Sum); errs[r] == nil && x[n-1] != 6 {
				errs[r] = fmt.Errorf("AllReduce gave %v, want 6", x[n-1])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	after, _ := comms[3].FabricStats() // one fabric for the group
	d := after.Since(before)
	var sum, hbd, eps int64
	for l, b := range d.Links {
		sum += b
		switch {
		case l.Class == topo.HBD && l.A == l.B:
			hbd += b
		case l.Class == topo.EPS && l.A >= 0 && l.B >= 0 && top.NICs[l.A].Host != top.NICs[l.B].Host:
			eps += b
		default:
			t.Errorf("link %v carried %d bytes: not a link of this fabric's paths", l, b)
		}
	}
	if sum != d.Bytes || d.Bytes == 0 {
		t.Errorf("links carried %d bytes in all, the fabric sent %d", sum, d.Bytes)
	}
	if hbd == 0 || eps < 2*8*n {
		t.Errorf("HBD links carried %d bytes, the packet network %d (want at least %d): %v", hbd, eps, 2*8*n, d.Links)
	}

	plain, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plain {
		if st, ok := c.FabricStats(); ok || st.Links != nil {
			t.Errorf("rank %d without emulation has fabric counters %+v", c.Rank(), st)
		}
		c.Close()
	}
}
