package comm

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/reference"
	"github.com/occl/occl/trace"
)

// TestDirectMeetsSchedule runs small AllReduces, AllToAlls, AllToAllVs,
// AllGathers, ReduceScatters and Broadcasts (from every root) where the odd ranks record a timeline, and so run the
// schedules, and the even ranks go directly (see directAllReduce): both
// must send the same messages in the same order for the operations to
// complete, and every rank's result must be the reference's. Sizes reach
// past directMessage, where every rank runs the schedule.
func TestDirectMeetsSchedule(t *testing.T) {
	for _, size := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			comms := halfDirect(t, size, 8)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() { errs[r] = directChecks(ctx, c) })
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// halfDirect returns size in-process communicators, closed when t ends,
// whose odd ranks record a timeline, and so run the schedules, while the
// even ones send messages of n bytes directly (a single rank has no
// connection to send through).
func halfDirect(t *testing.T, size, n int) []*Communicator {
	t.Helper()
	comms, err := NewLocal(size)
	if err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		t.Cleanup(func() { c.Close() })
		if r%2 == 1 {
			c.obs.tr, c.obs.dir = trace.NewRecorder(trace.Meta{}), t.TempDir()
		}
		if got, want := c.direct(n), r%2 == 0 && size > 1; got != want {
			t.Fatalf("rank %d: direct(%d) = %v, want %v", r, n, got, want)
		}
	}
	return comms
}

// directChecks runs AllReduce and ReduceScatter with every dtype and
// reduction, and AllToAll and AllGather with every dtype, in place and
// not, on sizes around directMessage, and compares each result with the
// reference.
func directChecks(ctx context.Context, c *Communicator) error {
	size, rank := c.Size(), c.Rank()
	for _, dt := range []DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64} {
		es := dt.Size()
		for _, n := range []int{1, 3, directMessage / es, directMessage/es + 1} {
			for _, inPlace := range []bool{false, true} {
				for _, op := range []Op{Sum, Prod, Max, Min, Avg} {
					in := reference.Input(dt, op, rank, 0, n)
					out := bytes.Repeat([]byte{0xA5}, len(in))
					if inPlace {
						out = in
					}
					if err := c.AllReduce(ctx, Raw(in, dt), Raw(out, dt), op); err != nil {
						return err
					}
					if want := reference.Reduced(dt, op, size, 0, n); !bytes.Equal(out, want) {
						return fmt.Errorf("AllReduce %s %s n=%d inplace=%v: got %x, want %x", dt, op, n, inPlace, out, want)
					}
				}
				in := reference.Input(dt, Sum, rank, 0, size*n)
				out := bytes.Repeat([]byte{0xA5}, len(in))
				if inPlace {
					out = in
				}
				if err := c.AllToAll(ctx, Raw(in, dt), Raw(out, dt)); err != nil {
					return err
				}
				var want []byte
				for j := range size {
					want = append(want, reference.Input(dt, Sum, j, rank*n, n)...)
				}
				if !bytes.Equal(out, want) {
					return fmt.Errorf("AllToAll %s n=%d inplace=%v: got %x, want %x", dt, n, inPlace, out, want)
				}
				if err := directAllToAllVCheck(ctx, c, dt, inPlace, func(i, j int) int { return n * ((i + 2*j) % 3) }); err != nil {
					return err
				}
				if err := directAllGatherCheck(ctx, c, dt, n, inPlace); err != nil {
					return err
				}
				for _, op := range []Op{Sum, Prod, Max, Min, Avg} {
					if err := directReduceScatterCheck(ctx, c, dt, op, n, inPlace); err != nil {
						return err
					}
				}
				for root := range size {
					if err := directBroadcastCheck(ctx, c, dt, n, root, inPlace); err != nil {
						return err
					}
				}
				if err := directGroupCheck(ctx, c, dt, n); err != nil {
					return err
				}
			}
		}
	}
	// Rank 0 receives blocks of more than a piece, which their senders
	// send in pieces, and sends small ones, which it could send directly:
	// it must not receive directly, as one message each.
	for _, inPlace := range []bool{false, true} {
		big := func(i, j int) int {
			if j == 0 && i != 0 {
				return algo.PairwisePiece + 1
			}
			return 1 + i
		}
		if err := directAllToAllVCheck(ctx, c, Uint8, inPlace, big); err != nil {
			return err
		}
	}
	return nil
}

// directAllToAllVCheck runs an AllToAllV in which rank i sends rank j
// count(i, j) elements of dt, its blocks in destination order with one
// element between them on the send side and two on the receive side, in
// place or not, and compares every block received with its sender's
// reference input and the elements between the blocks with what they were
// (in place, the input's).
func directAllToAllVCheck(ctx context.Context, c *Communicator, dt DType, inPlace bool, count func(i, j int) int) error {
	size, rank, es := c.Size(), c.Rank(), dt.Size()
	layout := func(gap int, count func(j int) int) (counts, displs []int, total int) {
		counts, displs = make([]int, size), make([]int, size)
		for j := range size {
			counts[j], displs[j] = count(j), total
			total += counts[j] + gap
		}
		return counts, displs, total
	}
	sc, sd, st := layout(1, func(j int) int { return count(rank, j) })
	rc, rd, rt := layout(2, func(i int) int { return count(i, rank) })
	in := bytes.Repeat([]byte{0x5A}, max(st, rt)*es)
	for j := range size {
		copy(in[sd[j]*es:], reference.Input(dt, Sum, rank, j*4096, sc[j]))
	}
	want := bytes.Repeat([]byte{0x5A}, rt*es)
	if inPlace {
		copy(want, in) // what no block lands on keeps the input
	}
	for i := range size {
		copy(want[rd[i]*es:], reference.Input(dt, Sum, i, rank*4096, rc[i]))
	}
	out := bytes.Repeat([]byte{0x5A}, len(in))
	if inPlace {
		out = in
	}
	if err := c.AllToAllV(ctx, Raw(in, dt), sc, sd, Raw(out, dt), rc, rd); err != nil {
		return err
	}
	if !bytes.Equal(out[:rt*es], want) {
		return fmt.Errorf("AllToAllV %s counts %v inplace=%v: got %x, want %x", dt, rc, inPlace, out[:rt*es], want)
	}
	return nil
}

// directAllGatherCheck runs an AllGather of n elements of dt per rank, in
// place (each rank's block of the output) or not, and compares the result
// with every rank's reference input.
func directAllGatherCheck(ctx context.Context, c *Communicator, dt DType, n int, inPlace bool) error {
	size, rank, es := c.Size(), c.Rank(), dt.Size()
	out := bytes.Repeat([]byte{0xA5}, size*n*es)
	in := reference.Input(dt, Sum, rank, 0, n)
	if inPlace {
		copy(out[rank*n*es:], in)
		in = out[rank*n*es : (rank+1)*n*es]
	}
	if err := c.AllGather(ctx, Raw(in, dt), Raw(out, dt)); err != nil {
		return err
	}
	var want []byte
	for j := range size {
		want = append(want, reference.Input(dt, Sum, j, 0, n)...)
	}
	if !bytes.Equal(out, want) {
		return fmt.Errorf("AllGather %s n=%d inplace=%v: got %x, want %x", dt, n, inPlace, out, want)
	}
	return nil
}

// directGroupCheck runs a group that sends n elements of dt to the next
// rank and to itself and receives from the previous rank and from itself
// (Group.runTaken where it is small and the rank goes directly), compares
// both receives with the senders' reference inputs, and checks the flight
// record's entry of the group: named Group, no sequence number, done, the
// bytes of its four buffers.
func directGroupCheck(ctx context.Context, c *Communicator, dt DType, n int) error {
	size, rank := c.Size(), c.Rank()
	next, prev := (rank+1)%size, (rank+size-1)%size
	in := reference.Input(dt, Sum, rank, 0, n)
	self := reference.Input(dt, Max, rank, 0, n)
	fromPrev := bytes.Repeat([]byte{0xA5}, len(in))
	fromSelf := bytes.Repeat([]byte{0xA5}, len(in))
	err := c.NewGroup().Recv(Raw(fromPrev, dt), prev).Send(Raw(self, dt), rank).
		Send(Raw(in, dt), next).Recv(Raw(fromSelf, dt), rank).Run(ctx)
	if err != nil {
		return fmt.Errorf("group %s n=%d: %w", dt, n, err)
	}
	if want := reference.Input(dt, Sum, prev, 0, n); !bytes.Equal(fromPrev, want) {
		return fmt.Errorf("group %s n=%d: from rank %d got %x, want %x", dt, n, prev, fromPrev, want)
	}
	if !bytes.Equal(fromSelf, self) {
		return fmt.Errorf("group %s n=%d: from itself got %x, want %x", dt, n, fromSelf, self)
	}
	recs := c.FlightRecord()
	last := recs[len(recs)-1]
	if last.Op != "Group" || last.Seq != 0 || last.State != OpDone || last.Bytes != int64(4*len(in)) || last.DType != dt.String() {
		return fmt.Errorf("group %s n=%d: flight record %+v, want a Group of %d bytes of %s, done, without a sequence number", dt, n, last, 4*len(in), dt)
	}
	return nil
}

// directBroadcastCheck runs a Broadcast of n elements of dt from root, in
// place on the root or not, and compares every rank's result with the
// root's reference input, and the root's send buffer with what it was.
func directBroadcastCheck(ctx context.Context, c *Communicator, dt DType, n, root int, inPlace bool) error {
	want := reference.Input(dt, Sum, root, 0, n)
	out := bytes.Repeat([]byte{0xA5}, len(want))
	send := Buffer{}
	if c.Rank() == root {
		in := bytes.Clone(want)
		if inPlace {
			out = in
		}
		send = Raw(in, dt)
	}
	if err := c.Broadcast(ctx, send, Raw(out, dt), root); err != nil {
		return err
	}
	if !bytes.Equal(out, want) {
		return fmt.Errorf("Broadcast %s n=%d root=%d inplace=%v: got %x, want %x", dt, n, root, inPlace, out, want)
	}
	if c.Rank() == root && !bytes.Equal(send.b, want) {
		return fmt.Errorf("Broadcast %s n=%d root=%d: the root's send buffer changed", dt, n, root)
	}
	return nil
}

// directReduceScatterCheck runs a ReduceScatter of n elements of dt per
// rank with op, in place (the output is the rank's block of the input) or
// not, and compares the result with the reference's reduction of that
// block, and an input that is not the output with what it was.
func directReduceScatterCheck(ctx context.Context, c *Communicator, dt DType, op Op, n int, inPlace bool) error {
	size, rank, es := c.Size(), c.Rank(), dt.Size()
	in := reference.Input(dt, op, rank, 0, size*n)
	orig := bytes.Clone(in)
	out := bytes.Repeat([]byte{0xA5}, n*es)
	if inPlace {
		out = in[rank*n*es : (rank+1)*n*es]
	}
	if err := c.ReduceScatter(ctx, Raw(in, dt), Raw(out, dt), op); err != nil {
		return err
	}
	if want := reference.Reduced(dt, op, size, rank*n, n); !bytes.Equal(out, want) {
		return fmt.Errorf("ReduceScatter %s %s n=%d inplace=%v: got %x, want %x", dt, op, n, inPlace, out, want)
	}
	if !inPlace && !bytes.Equal(in, orig) {
		return fmt.Errorf("ReduceScatter %s %s n=%d: the input changed", dt, op, n)
	}
	return nil
}

// TestDirectBounds checks which messages may go directly: none empty,
// none above directMessage or the smallest eager limit, none while a
// timeline is recorded.
func TestDirectBounds(t *testing.T) {
	for _, tc := range []struct {
		n, eager int
		traced   bool
		want     bool
	}{
		{8, 1 << 20, false, true},
		{directMessage, 1 << 20, false, true},
		{directMessage + 1, 1 << 20, false, false},
		{0, 1 << 20, false, false},
		{1024, 1024, false, true},
		{1025, 1024, false, false},
		{8, 0, false, false}, // no peers
		{8, 1 << 20, true, false},
	} {
		var c Communicator
		c.links.eager = tc.eager
		if tc.traced {
			c.obs.tr = trace.NewRecorder(trace.Meta{})
		}
		if got := c.direct(tc.n); got != tc.want {
			t.Errorf("direct(%d) with eager limit %d, traced %v = %v, want %v", tc.n, tc.eager, tc.traced, got, tc.want)
		}
	}
}

// TestDirectBarrier runs Barriers, blocking and not, where the odd ranks
// record a timeline, and so run the dissemination schedule, and the even
// ranks go directly (see directBarrier): both must send the same messages
// for the barriers to complete, and no rank may leave a barrier before
// every rank has entered it.
func TestDirectBarrier(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			comms := halfDirect(t, size, barrierProbe)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const rounds = 200
			var entered [rounds]atomic.Int32
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() {
					for i := range rounds {
						entered[i].Add(1)
						if i%2 == 0 {
							errs[r] = c.Barrier(ctx)
						} else {
							errs[r] = c.BarrierAsync(ctx).Wait(ctx)
						}
						if errs[r] != nil {
							return
						}
						if n := entered[i].Load(); n != int32(size) {
							errs[r] = fmt.Errorf("barrier %d: left it when %d of %d ranks had entered", i, n, size)
							return
						}
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
