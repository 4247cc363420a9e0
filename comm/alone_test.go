package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/occl/occl/comm"
)

// smallForm is a small collective on rank r of size ranks: call runs it,
// blocking or as an Async request waited for, and returns its result as
// text; want is the result a reference gives.
type smallForm struct {
	name string
	call func(ctx context.Context, c *comm.Communicator, async bool) (string, error)
	want func(r, size int) string
}

// runForm waits for req if async, else returns the blocking call's error.
func runForm(ctx context.Context, async bool, blocking func() error, req func() *comm.Request) error {
	if async {
		return req().Wait(ctx)
	}
	return blocking()
}

// smallForms are the collectives whose small blocking calls run alone.
var smallForms = []smallForm{
	{"AllReduce", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		in, out := comm.Slice([]float64{float64(c.Rank()), float64(10 * c.Rank())}), make([]float64, 2)
		err := runForm(ctx, async, func() error { return c.AllReduce(ctx, in, comm.Slice(out), comm.Sum) },
			func() *comm.Request { return c.AllReduceAsync(ctx, in, comm.Slice(out), comm.Sum) })
		return fmt.Sprint(out), err
	}, func(_, size int) string {
		s := size * (size - 1) / 2
		return fmt.Sprint([]float64{float64(s), float64(10 * s)})
	}},
	{"AllToAll", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		in, out := make([]int32, c.Size()), make([]int32, c.Size())
		for j := range in {
			in[j] = int32(100*c.Rank() + j) // block j goes to rank j
		}
		err := runForm(ctx, async, func() error { return c.AllToAll(ctx, comm.Slice(in), comm.Slice(out)) },
			func() *comm.Request { return c.AllToAllAsync(ctx, comm.Slice(in), comm.Slice(out)) })
		return fmt.Sprint(out), err
	}, func(r, size int) string {
		want := make([]int32, size)
		for k := range want {
			want[k] = int32(100*k + r)
		}
		return fmt.Sprint(want)
	}},
	{"AllToAllV", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		// Rank r sends j+1 elements to rank j, at displacements that
		// leave a gap; it receives r+1 from every rank.
		size := c.Size()
		sc, sd, rc, rd := make([]int, size), make([]int, size), make([]int, size), make([]int, size)
		in := make([]int32, size*(size+1))
		for j := range size {
			sc[j], sd[j] = j+1, j*(size+1)
			for k := range sc[j] {
				in[sd[j]+k] = int32(100*c.Rank() + 10*j + k)
			}
			rc[j], rd[j] = c.Rank()+1, j*(c.Rank()+1)
		}
		out := make([]int32, size*(c.Rank()+1))
		err := runForm(ctx, async, func() error {
			return c.AllToAllV(ctx, comm.Slice(in), sc, sd, comm.Slice(out), rc, rd)
		}, func() *comm.Request {
			return c.AllToAllVAsync(ctx, comm.Slice(in), sc, sd, comm.Slice(out), rc, rd)
		})
		return fmt.Sprint(out), err
	}, func(r, size int) string {
		var want []int32
		for k := range size {
			for e := range r + 1 {
				want = append(want, int32(100*k+10*r+e))
			}
		}
		return fmt.Sprint(want)
	}},
	{"AllGather", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		in, out := comm.Slice([]int64{int64(7 * c.Rank())}), make([]int64, c.Size())
		err := runForm(ctx, async, func() error { return c.AllGather(ctx, in, comm.Slice(out)) },
			func() *comm.Request { return c.AllGatherAsync(ctx, in, comm.Slice(out)) })
		return fmt.Sprint(out), err
	}, func(_, size int) string {
		want := make([]int64, size)
		for k := range want {
			want[k] = int64(7 * k)
		}
		return fmt.Sprint(want)
	}},
	{"ReduceScatter", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		in, out := make([]float32, c.Size()), make([]float32, 1)
		for j := range in {
			in[j] = float32(c.Rank() + j) // block j goes to rank j
		}
		err := runForm(ctx, async, func() error { return c.ReduceScatter(ctx, comm.Slice(in), comm.Slice(out), comm.Max) },
			func() *comm.Request { return c.ReduceScatterAsync(ctx, comm.Slice(in), comm.Slice(out), comm.Max) })
		return fmt.Sprint(out), err
	}, func(r, size int) string { return fmt.Sprint([]float32{float32(size - 1 + r)}) }},
	{"Broadcast", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		in, out := comm.Slice([]uint8{uint8(c.Rank()), 9}), make([]uint8, 2)
		err := runForm(ctx, async, func() error { return c.Broadcast(ctx, in, comm.Slice(out), 1) },
			func() *comm.Request { return c.BroadcastAsync(ctx, in, comm.Slice(out), 1) })
		return fmt.Sprint(out), err
	}, func(int, int) string { return fmt.Sprint([]uint8{1, 9}) }},
	{"Barrier", func(ctx context.Context, c *comm.Communicator, async bool) (string, error) {
		err := runForm(ctx, async, func() error { return c.Barrier(ctx) },
			func() *comm.Request { return c.BarrierAsync(ctx) })
		return "", err
	}, func(int, int) string { return "" }},
}

// TestSmallBlockingCallsRecordAsRequests runs every collective whose small
// blocking calls run alone, without a request, blocking and then as an
// Async request waited for, on 2, 3 and 4 ranks: each form gives what a
// reference computes, and the flight record holds the same entry for both
// forms but their sequence numbers and times. Then the odd ranks run the
// Async form and the even ones the blocking one, which meet.
func TestSmallBlockingCallsRecordAsRequests(t *testing.T) {
	for _, size := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
				for _, f := range smallForms {
					for _, async := range []bool{false, true} {
						got, err := f.call(ctx, c, async)
						if err != nil {
							return fmt.Errorf("%s async=%v: %w", f.name, async, err)
						}
						if want := f.want(c.Rank(), size); got != want {
							return fmt.Errorf("%s async=%v: got %s, want %s", f.name, async, got, want)
						}
					}
				}
				rec := c.FlightRecord()
				if len(rec) != 2*len(smallForms) {
					return fmt.Errorf("flight record has %d entries, want %d: %+v", len(rec), 2*len(smallForms), rec)
				}
				for i, f := range smallForms {
					blocking, async := rec[2*i], rec[2*i+1]
					if blocking.Seq != uint64(2*i+1) || async.Seq != uint64(2*i+2) || blocking.Op != f.name {
						return fmt.Errorf("%s: records %+v and %+v, want sequence numbers %d and %d", f.name, blocking, async, 2*i+1, 2*i+2)
					}
					if blocking.Start.IsZero() || blocking.End.Before(blocking.Start) {
						return fmt.Errorf("%s: started %v, ended %v", f.name, blocking.Start, blocking.End)
					}
					blocking.Seq, blocking.Start, blocking.End = async.Seq, async.Start, async.End
					if blocking != async {
						return fmt.Errorf("%s: blocking call recorded as %+v, its Async form as %+v", f.name, blocking, async)
					}
				}
				// The forms mixed, odd ranks Async: every frame's header
				// is checked against the receiver's own.
				for _, f := range smallForms {
					async := c.Rank()%2 == 1
					got, err := f.call(ctx, c, async)
					if err != nil {
						return fmt.Errorf("%s mixed, async=%v: %w", f.name, async, err)
					}
					if want := f.want(c.Rank(), size); got != want {
						return fmt.Errorf("%s mixed, async=%v: got %s, want %s", f.name, async, got, want)
					}
				}
				return nil
			}))
		})
	}
}

// TestSmallBlockingCallWaitsForQueued issues an AllReduce and, before
// waiting for it, a small blocking AllReduce of another size: the
// blocking one runs after the queued one (the flight record has them in
// that order), and both give their sums.
func TestSmallBlockingCallWaitsForQueued(t *testing.T) {
	requireOK(t, runLocal(t, 2, func(ctx context.Context, c *comm.Communicator) error {
		r := float32(c.Rank())
		a, b := []float32{1 + r}, []float32{10 + r, 20 + r}
		outA, outB := make([]float32, 1), make([]float32, 2)
		req := c.AllReduceAsync(ctx, comm.Slice(a), comm.Slice(outA), comm.Sum)
		if err := comm.AllReduce(ctx, c, b, outB, comm.Sum); err != nil {
			return err
		}
		if err := req.Wait(ctx); err != nil {
			return err
		}
		if outA[0] != 3 || outB[0] != 21 || outB[1] != 41 {
			return fmt.Errorf("sums %v and %v, want [3] and [21 41]", outA, outB)
		}
		rec := c.FlightRecord()
		if len(rec) != 2 || rec[0].Seq != 1 || rec[0].Bytes != 4 || rec[1].Seq != 2 || rec[1].Bytes != 8 {
			return fmt.Errorf("flight record %+v, want the queued call (4 bytes) first", rec)
		}
		return nil
	}))
}
