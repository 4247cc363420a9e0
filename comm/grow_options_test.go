package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/commtest"
)

// parentWorks checks that comms, the communicator a failed Grow was called
// on, has not failed and still runs collectives on every rank.
func parentWorks(t *testing.T, ctx context.Context, comms []*comm.Communicator) {
	t.Helper()
	for r, c := range comms {
		if err := c.Err(); err != nil {
			t.Fatalf("rank %d: communicator failed: %v", r, err)
		}
	}
	commtest.OnEach(t, comms, func(_ int, c *comm.Communicator) error {
		x := []int64{int64(c.Rank()) + 1}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if want := int64(len(comms) * (len(comms) + 1) / 2); x[0] != want {
			return fmt.Errorf("AllReduce gave %d, want %d", x[0], want)
		}
		return c.Barrier(ctx)
	})
}

// badGrowOptions are options that NewLocal and Init reject, each with its
// name.
var badGrowOptions = []struct {
	name string
	opt  comm.Option
}{
	{"timeout 0", comm.WithTimeout(0)},
	{"negative timeout", comm.WithTimeout(-time.Second)},
	{"chunk 0", comm.WithChunkSize(0)},
	{"streams 0", comm.WithStreams(0)},
	{"heartbeat 0", comm.WithHeartbeat(0, time.Second)},
	{"heartbeat timeout not longer", comm.WithHeartbeat(time.Second, time.Second)},
	{"unknown transport", comm.WithTransport("pigeon")},
	{"emulation without topology", comm.WithEmulation(true)},
	{"negative stall timeout", comm.WithStallTimeout(-time.Second)},
	{"negative spin", comm.WithSpin(-time.Microsecond)},
	{"negative single-copy threshold", comm.WithSingleCopy(-1)},
}

// TestGrowLocalInvalidOptions: GrowLocal with options that NewLocal
// rejects fails at once with ErrInvalidArgument on the ranks that pass
// them, before anything is made, and the parent communicator keeps
// working; as for any invalid argument, the failed call does not count as
// the rank's part of the collective, so calling GrowLocal again with
// valid options grows the communicator, also when only one rank passed
// bad options while the other waited in its GrowLocal.
func TestGrowLocalInvalidOptions(t *testing.T) {
	type row struct {
		name string
		opt  comm.Option
		bad  []bool // by rank: passes opt
	}
	var rows []row
	for _, o := range badGrowOptions {
		rows = append(rows, row{o.name, o.opt, []bool{true, true}})
	}
	rows = append(rows, row{"timeout 0 on rank 1 alone", comm.WithTimeout(0), []bool{false, true}})
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := comm.NewLocal(2, tc.opt); !errors.Is(err, comm.ErrInvalidArgument) {
				t.Fatalf("NewLocal: %v, want ErrInvalidArgument", err)
			}
			old := commtest.Local(t, 2)
			grown := make([]*comm.Communicator, 3)
			defer closeAll(grown)
			commtest.OnEach(t, old, func(r int, c *comm.Communicator) error {
				if tc.bad[r] {
					start := time.Now()
					g, joiners, err := c.GrowLocal(ctx, 1, tc.opt)
					if err == nil {
						g.Abort()
						for _, j := range joiners {
							j.Abort()
						}
						return errors.New("GrowLocal with the bad option succeeded")
					}
					if !errors.Is(err, comm.ErrInvalidArgument) {
						return fmt.Errorf("GrowLocal with the bad option: %v, want ErrInvalidArgument", err)
					}
					if d := time.Since(start); d > 5*time.Second {
						return fmt.Errorf("GrowLocal with the bad option took %v to fail", d)
					}
				}
				g, joiners, err := c.GrowLocal(ctx, 1)
				if err != nil {
					return fmt.Errorf("GrowLocal with valid options: %w", err)
				}
				grown[r] = g
				for _, j := range joiners {
					grown[j.Rank()] = j
				}
				return nil
			})
			commtest.OnEach(t, grown, func(_ int, c *comm.Communicator) error { return c.Barrier(ctx) })
			parentWorks(t, ctx, old)
		})
	}
}

// TestGrowInvalidOptions: Grow over TCP with options that Init rejects
// fails at once with ErrInvalidArgument on the ranks that pass them (a
// heartbeat interval of 0 used to crash the process once the grown
// communicator started), rank 0 does not serve the rendezvous for it, and
// the members can grow again with valid options: the joiner waiting for
// the rendezvous joins that grow.
func TestGrowInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  comm.Option
		bad  []bool // by rank: passes opt
	}{
		{"heartbeat 0", comm.WithHeartbeat(0, time.Second), []bool{true, true}},
		{"timeout 0 on rank 1 alone", comm.WithTimeout(0), []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			old := tcpGroup(t, ctx, 2)
			id, err := comm.NewUniqueIDAt("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			grown := make([]*comm.Communicator, 3)
			var joinErr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				grown[2], joinErr = comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP))
			}()
			errs := commtest.Each(old, func(r int, c *comm.Communicator) error {
				if tc.bad[r] {
					start := time.Now()
					gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
					g, err := c.Grow(gctx, id, 1, tc.opt)
					gcancel()
					if err == nil {
						g.Abort()
						return errors.New("Grow with the bad option succeeded")
					}
					if !errors.Is(err, comm.ErrInvalidArgument) {
						return fmt.Errorf("Grow with the bad option: %v, want ErrInvalidArgument", err)
					}
					if d := time.Since(start); d > 5*time.Second {
						return fmt.Errorf("Grow with the bad option took %v to fail", d)
					}
				}
				g, err := c.Grow(ctx, id, 1)
				if err != nil {
					return fmt.Errorf("Grow with valid options: %w", err)
				}
				grown[r] = g
				return nil
			})
			for r, err := range errs {
				if err != nil {
					cancel() // the joiner stops waiting
					wg.Wait()
					closeAll(grown)
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			wg.Wait()
			defer closeAll(grown)
			if joinErr != nil {
				t.Fatalf("joiner: %v", joinErr)
			}
			commtest.OnEach(t, grown, func(_ int, c *comm.Communicator) error { return c.Barrier(ctx) })
			parentWorks(t, ctx, old)
		})
	}
}

// TestGrowTooManyJoiners: a number of joiners below 1, or one that takes
// the grown communicator past wire.MaxRanks (also one so large that the
// sum of the sizes overflows an int, which used to pass the check and
// abort the communicator on every rank with an internal error), fails
// with ErrInvalidArgument and leaves the communicator working.
func TestGrowTooManyJoiners(t *testing.T) {
	const maxInt = int(^uint(0) >> 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	local := commtest.Local(t, 2)
	tcp := tcpGroup(t, ctx, 1)
	// Joiner counts for a communicator of size ranks.
	joiners := func(size int) []int {
		return []int{0, -1, -maxInt - 1, wire.MaxRanks - size + 1, maxInt - size + 1, maxInt}
	}
	for _, n := range joiners(local[0].Size()) {
		if _, _, err := local[0].GrowLocal(ctx, n); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("GrowLocal of 2 ranks by %d: %v, want ErrInvalidArgument", n, err)
		}
	}
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range joiners(tcp[0].Size()) {
		if _, err := tcp[0].Grow(ctx, id, n); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("Grow of 1 rank by %d: %v, want ErrInvalidArgument", n, err)
		}
	}
	parentWorks(t, ctx, local)
	parentWorks(t, ctx, tcp)
}
