package comm_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// TestInitWithFabricRanks builds, with Init among its members only, the
// group of fabric ranks 1, 2 and 3 of a 4-rank fabric: it reports the fabric
// ranks, sees its part of the fabric-wide topology, and reduces correctly.
func TestInitWithFabricRanks(t *testing.T) {
	fabric, err := topo.FromSpec("hosts=2x2")
	if err != nil {
		t.Fatal(err)
	}
	id, err := comm.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	members := []int{1, 2, 3}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for r := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := comm.Init(ctx, id, r, len(members), comm.WithTopology(fabric), comm.WithFabricRanks(members))
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			if got := c.FabricRanks(); !slices.Equal(got, members) {
				t.Errorf("rank %d: FabricRanks %v, want %v", r, got, members)
			}
			if n := len(c.Topology().Ranks); n != len(members) {
				t.Errorf("rank %d: topology of %d ranks, want %d", r, n, len(members))
			}
			buf := []float64{float64(members[r])}
			errs[r] = comm.AllReduce(ctx, c, buf, buf, comm.Sum)
			if errs[r] == nil && buf[0] != 6 {
				t.Errorf("rank %d: sum %v, want 6", r, buf[0])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestInitWithFabricRanksInvalid rejects fabric ranks that do not fit the
// communicator or the topology, before any communication.
func TestInitWithFabricRanksInvalid(t *testing.T) {
	fabric, err := topo.FromSpec("hosts=2x2")
	if err != nil {
		t.Fatal(err)
	}
	id, err := comm.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	for _, ranks := range [][]int{{0}, {0, 0}, {0, 4}, {-1, 1}} {
		_, err := comm.Init(context.Background(), id, 0, 2, comm.WithTopology(fabric), comm.WithFabricRanks(ranks))
		if err == nil {
			t.Errorf("fabric ranks %v: Init succeeded", ranks)
		}
	}
}
