package comm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// routedLayouts are fabrics on which all-to-alls take a topology-aware
// route, with the schedule the cost model should choose for a uniform
// exchange.
var routedLayouts = []struct {
	spec string
	np   int
	want algo.Algorithm
}{
	{"hosts=4x2,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s,circuits=0-1/0-1/2-3/2-3", 8, algo.AlgoDelegated},
	{"hosts=3x3,ocs_ports=2,eps=1GB/s,circuits=0-1/1-2/0-2", 9, algo.AlgoDelegated},
	{"hosts=4x2,rail_only=1", 8, algo.AlgoRailForward},
	{"hosts=2x3,rail_only=1", 6, algo.AlgoRailForward},
	{"hosts=6x1,grid=3x2", 6, algo.AlgoXY},
	{"hosts=4x2,grid=2x2", 8, algo.AlgoXY},
}

// allToAllChecks runs AllToAll and AllToAllV (uneven counts with zeros)
// over several sizes and dtypes, and checks which schedule ran.
func allToAllChecks(ctx context.Context, c *comm.Communicator, want algo.Algorithm) error {
	if got := c.Algorithm(algo.OpAllToAll, 1<<20*c.Size()); got != want {
		return fmt.Errorf("all-to-all schedule %s, want %s", got, want)
	}
	for _, async := range []bool{false, true} {
		k := checker{ctx: ctx, c: c, async: async}
		for _, n := range []int{0, 1, 13, 1031} {
			for _, dt := range []comm.DType{comm.Float32, comm.Uint8, comm.Float64} {
				for _, inPlace := range []bool{false, true} {
					if err := k.allToAll(dt, n, inPlace); err != nil {
						return err
					}
				}
				if err := k.allToAllV(dt, n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// TestRoutedAllToAll runs every topology-aware all-to-all in one process,
// chosen by the cost model and forced, with and without the emulated
// fabric shaping the links.
func TestRoutedAllToAll(t *testing.T) {
	for _, l := range routedLayouts {
		for _, emulate := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/emulate=%v", l.spec, emulate), func(t *testing.T) {
				top, err := topo.FromSpec(l.spec)
				if err != nil {
					t.Fatal(err)
				}
				requireOK(t, runLocal(t, l.np, func(ctx context.Context, c *comm.Communicator) error {
					return allToAllChecks(ctx, c, l.want)
				}, comm.WithTopology(top), comm.WithEmulation(emulate)))
				// Forced: the pairwise exchange on a fabric that has a
				// path between every pair.
				if top.RailOnly || top.GridOnly {
					return
				}
				requireOK(t, runLocal(t, l.np, func(ctx context.Context, c *comm.Communicator) error {
					return allToAllChecks(ctx, c, algo.AlgoPairwise)
				}, comm.WithTopology(top), comm.WithAlgorithm(algo.AlgoPairwise)))
			})
		}
	}
}

// TestProcessRoutedAllToAll runs the topology-aware all-to-alls across
// real processes on virtual hosts.
func TestProcessRoutedAllToAll(t *testing.T) {
	skipUnderRace(t, "TestRoutedAllToAll (every routed all-to-all, in one process)")
	for i, l := range routedLayouts {
		if testing.Short() && i%2 == 1 {
			continue
		}
		t.Run(l.spec, func(t *testing.T) {
			job(t, "alltoall", l.np, "OCCL_TOPO="+l.spec, "OCCL_TEST_A2A="+l.want.String())
		})
	}
}

// alltoallWorker is the "alltoall" scenario of a worker process.
func alltoallWorker(ctx context.Context, c *comm.Communicator) error {
	want, err := algo.ParseAlgorithm(os.Getenv("OCCL_TEST_A2A"))
	if err != nil {
		return err
	}
	return allToAllChecks(ctx, c, want)
}

// TestRoutedAllToAllVMismatch gives one pair disagreeing counts on a
// fabric with circuits: every rank, not only the one receiving, reports
// it, and the communicator keeps working.
func TestRoutedAllToAllVMismatch(t *testing.T) {
	top, err := topo.FromSpec(routedLayouts[0].spec)
	if err != nil {
		t.Fatal(err)
	}
	requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
		n := c.Size()
		counts, displs := make([]int, n), make([]int, n)
		for j := range counts {
			counts[j], displs[j] = 4, 5*j
		}
		send := make([]float32, 5*n)
		recv := make([]float32, 5*n)
		sc := append([]int(nil), counts...)
		if c.Rank() == 0 {
			sc[1] = 5 // rank 1 expects 4
		}
		err := comm.AllToAllV(ctx, c, send, sc, displs, recv, counts, displs)
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "rank 0 sends 20 bytes to rank 1, which expects 16") {
			return fmt.Errorf("mismatched counts: %v", err)
		}
		return c.Barrier(ctx)
	}, comm.WithTopology(top)))
}
