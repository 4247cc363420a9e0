package comm_test

// Checks of every collective against the reference in ref_test.go. Each
// check runs on one rank and returns an error describing the first wrong
// element; the same checks run in-process (NewLocal) and in worker
// processes over TCP.

import (
	"bytes"
	"context"
	"fmt"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/reference"
)

// matrix selects what a conformance run covers.
type matrix struct {
	sizes  []int
	dtypes []comm.DType
	ops    []comm.Op
	async  bool // also run every check through the Async form
}

func allDTypes() []comm.DType {
	return []comm.DType{comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64,
		comm.Float16, comm.BFloat16, comm.Float32, comm.Float64}
}

func allOps() []comm.Op { return []comm.Op{comm.Sum, comm.Prod, comm.Max, comm.Min, comm.Avg} }

func compare(what string, dt comm.DType, got, want []byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	if bytes.Equal(got, want) {
		return nil
	}
	es := dt.Size()
	for i := 0; i < len(got); i += es {
		if !bytes.Equal(got[i:i+es], want[i:i+es]) {
			return fmt.Errorf("%s: element %d of %d is %x, want %x", what, i/es, len(got)/es, got[i:i+es], want[i:i+es])
		}
	}
	return nil
}

func garbage(n int) []byte { return bytes.Repeat([]byte{0xA5}, n) }

// call runs a blocking form, or the Async form followed by Wait.
func call(ctx context.Context, async bool, blocking func() error, start func() *comm.Request) error {
	if !async {
		return blocking()
	}
	r := start()
	if err := r.Wait(ctx); err != nil {
		return err
	}
	if done, err := r.Test(); !done || err != nil {
		return fmt.Errorf("Test after Wait = %v, %v", done, err)
	}
	return nil
}

type checker struct {
	ctx   context.Context
	c     *comm.Communicator
	async bool
}

func (k checker) allReduce(dt comm.DType, op comm.Op, n int, inPlace bool) error {
	c := k.c
	in := reference.Input(dt, op, c.Rank(), 0, n)
	out := garbage(len(in))
	if inPlace {
		out = in
	}
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.AllReduce(k.ctx, s, r, op) },
		func() *comm.Request { return c.AllReduceAsync(k.ctx, s, r, op) }); err != nil {
		return err
	}
	return compare(fmt.Sprintf("AllReduce %s %s n=%d inplace=%v", dt, op, n, inPlace), dt, out, reference.Reduced(dt, op, c.Size(), 0, n))
}

func (k checker) reduce(dt comm.DType, op comm.Op, n, root int, inPlace bool) error {
	c := k.c
	in := reference.Input(dt, op, c.Rank(), 0, n)
	var out []byte
	if c.Rank() == root {
		out = garbage(len(in))
		if inPlace {
			out = in
		}
	}
	keep := append([]byte(nil), in...)
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.Reduce(k.ctx, s, r, op, root) },
		func() *comm.Request { return c.ReduceAsync(k.ctx, s, r, op, root) }); err != nil {
		return err
	}
	what := fmt.Sprintf("Reduce %s %s n=%d root=%d inplace=%v", dt, op, n, root, inPlace)
	if c.Rank() != root {
		return compare(what+" (input must be unchanged)", dt, in, keep)
	}
	return compare(what, dt, out, reference.Reduced(dt, op, c.Size(), 0, n))
}

func (k checker) broadcast(dt comm.DType, n, root int, inPlace bool) error {
	c := k.c
	var in []byte
	out := garbage(n * dt.Size())
	if c.Rank() == root {
		in = reference.Input(dt, comm.Sum, root, 0, n)
		if inPlace {
			out = in
		}
	}
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.Broadcast(k.ctx, s, r, root) },
		func() *comm.Request { return c.BroadcastAsync(k.ctx, s, r, root) }); err != nil {
		return err
	}
	return compare(fmt.Sprintf("Broadcast %s n=%d root=%d inplace=%v", dt, n, root, inPlace), dt, out, reference.Input(dt, comm.Sum, root, 0, n))
}

func (k checker) allGather(dt comm.DType, n int, inPlace bool) error {
	c := k.c
	es, size, rank := dt.Size(), c.Size(), c.Rank()
	out := garbage(size * n * es)
	in := reference.Input(dt, comm.Sum, rank, rank*n, n)
	if inPlace {
		copy(out[rank*n*es:], in)
		in = out[rank*n*es : (rank+1)*n*es]
	}
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.AllGather(k.ctx, s, r) },
		func() *comm.Request { return c.AllGatherAsync(k.ctx, s, r) }); err != nil {
		return err
	}
	var want []byte
	for j := 0; j < size; j++ {
		want = append(want, reference.Input(dt, comm.Sum, j, j*n, n)...)
	}
	return compare(fmt.Sprintf("AllGather %s n=%d inplace=%v", dt, n, inPlace), dt, out, want)
}

func (k checker) reduceScatter(dt comm.DType, op comm.Op, n int, inPlace bool) error {
	c := k.c
	es, size, rank := dt.Size(), c.Size(), c.Rank()
	in := reference.Input(dt, op, rank, 0, size*n)
	out := garbage(n * es)
	if inPlace {
		out = in[rank*n*es : (rank+1)*n*es]
	}
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.ReduceScatter(k.ctx, s, r, op) },
		func() *comm.Request { return c.ReduceScatterAsync(k.ctx, s, r, op) }); err != nil {
		return err
	}
	return compare(fmt.Sprintf("ReduceScatter %s %s n=%d inplace=%v", dt, op, n, inPlace), dt, out, reference.Reduced(dt, op, size, rank*n, n))
}

func (k checker) allToAll(dt comm.DType, n int, inPlace bool) error {
	c := k.c
	size, rank := c.Size(), c.Rank()
	in := reference.Input(dt, comm.Sum, rank, 0, size*n)
	out := garbage(len(in))
	if inPlace {
		out = in
	}
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.AllToAll(k.ctx, s, r) },
		func() *comm.Request { return c.AllToAllAsync(k.ctx, s, r) }); err != nil {
		return err
	}
	var want []byte
	for j := 0; j < size; j++ {
		want = append(want, reference.Input(dt, comm.Sum, j, rank*n, n)...)
	}
	return compare(fmt.Sprintf("AllToAll %s n=%d inplace=%v", dt, n, inPlace), dt, out, want)
}

// vCount is how many elements rank src sends to rank dst in AllToAllV
// checks of scale n; about a quarter of the pairs send nothing.
func vCount(src, dst, n int) int { return (src + 2*dst + n) % 4 * (n/3 + 1) }

func (k checker) allToAllV(dt comm.DType, n int) error {
	return k.allToAllVCounts(dt, fmt.Sprintf("n=%d", n), func(src, dst int) int { return vCount(src, dst, n) })
}

// allToAllVCounts checks an AllToAllV in which rank src sends count(src,
// dst) elements to rank dst.
func (k checker) allToAllVCounts(dt comm.DType, name string, count func(src, dst int) int) error {
	c := k.c
	es, size, rank := dt.Size(), c.Size(), c.Rank()
	sc, sd, rc, rd := make([]int, size), make([]int, size), make([]int, size), make([]int, size)
	// Blocks are laid out in reverse peer order with one-element gaps, so
	// displacements really matter.
	off := 1
	for j := size - 1; j >= 0; j-- {
		sc[j], sd[j] = count(rank, j), off
		off += sc[j] + 1
	}
	send := make([]byte, off*es)
	for j := 0; j < size; j++ {
		copy(send[sd[j]*es:], reference.Input(dt, comm.Sum, rank, j*1_000_003, sc[j]))
	}
	off = 2
	for j := 0; j < size; j++ {
		rc[j], rd[j] = count(j, rank), off
		off += rc[j] + 1
	}
	recv := garbage(off * es)
	want := garbage(off * es)
	for j := 0; j < size; j++ {
		copy(want[rd[j]*es:], reference.Input(dt, comm.Sum, j, rank*1_000_003, rc[j]))
	}
	s, r := comm.Raw(send, dt), comm.Raw(recv, dt)
	if err := call(k.ctx, k.async, func() error { return c.AllToAllV(k.ctx, s, sc, sd, r, rc, rd) },
		func() *comm.Request { return c.AllToAllVAsync(k.ctx, s, sc, sd, r, rc, rd) }); err != nil {
		return err
	}
	return compare(fmt.Sprintf("AllToAllV %s %s", dt, name), dt, recv, want)
}

func (k checker) gather(dt comm.DType, n, root int) error {
	c := k.c
	size, rank := c.Size(), c.Rank()
	in := reference.Input(dt, comm.Sum, rank, rank*n, n)
	var out []byte
	if rank == root {
		out = garbage(size * n * dt.Size())
	}
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.Gather(k.ctx, s, r, root) },
		func() *comm.Request { return c.GatherAsync(k.ctx, s, r, root) }); err != nil {
		return err
	}
	if rank != root {
		return nil
	}
	var want []byte
	for j := 0; j < size; j++ {
		want = append(want, reference.Input(dt, comm.Sum, j, j*n, n)...)
	}
	return compare(fmt.Sprintf("Gather %s n=%d root=%d", dt, n, root), dt, out, want)
}

func (k checker) scatter(dt comm.DType, n, root int) error {
	c := k.c
	size, rank := c.Size(), c.Rank()
	var in []byte
	if rank == root {
		in = reference.Input(dt, comm.Sum, root, 0, size*n)
	}
	out := garbage(n * dt.Size())
	s, r := comm.Raw(in, dt), comm.Raw(out, dt)
	if err := call(k.ctx, k.async, func() error { return c.Scatter(k.ctx, s, r, root) },
		func() *comm.Request { return c.ScatterAsync(k.ctx, s, r, root) }); err != nil {
		return err
	}
	return compare(fmt.Sprintf("Scatter %s n=%d root=%d", dt, n, root), dt, out, reference.Input(dt, comm.Sum, root, rank*n, n))
}

// sendRecv runs a ring exchange in both directions plus a message to self,
// all in one group, then a plain Send/Recv pair between ranks 0 and 1.
func (k checker) sendRecv(dt comm.DType, n int) error {
	c := k.c
	size, rank := c.Size(), c.Rank()
	right, left := (rank+1)%size, (rank+size-1)%size
	toR := reference.Input(dt, comm.Sum, rank, 0, n)
	toL := reference.Input(dt, comm.Sum, rank, 7777, n+1)
	self := reference.Input(dt, comm.Sum, rank, 555, n)
	fromL, fromR, fromSelf := garbage(len(toR)), garbage(len(toL)), garbage(len(self))
	g := c.NewGroup().
		Recv(comm.Raw(fromL, dt), left).
		Send(comm.Raw(toR, dt), right).
		Recv(comm.Raw(fromR, dt), right).
		Send(comm.Raw(toL, dt), left).
		Send(comm.Raw(self, dt), rank).
		Recv(comm.Raw(fromSelf, dt), rank)
	var err error
	if k.async {
		err = g.Start(k.ctx).Wait(k.ctx)
	} else {
		err = g.Run(k.ctx)
	}
	if err != nil {
		return err
	}
	what := fmt.Sprintf("SendRecv %s n=%d", dt, n)
	if size == 1 {
		// left == right == self: the messages pair up in order.
		return compare(what+" self", dt, fromSelf, self)
	}
	if err := compare(what+" from left", dt, fromL, reference.Input(dt, comm.Sum, left, 0, n)); err != nil {
		return err
	}
	if err := compare(what+" from right", dt, fromR, reference.Input(dt, comm.Sum, right, 7777, n+1)); err != nil {
		return err
	}
	if err := compare(what+" self", dt, fromSelf, self); err != nil {
		return err
	}
	if size >= 2 && rank < 2 {
		buf := reference.Input(dt, comm.Sum, rank, 99, n)
		if rank == 0 {
			return c.Send(k.ctx, comm.Raw(buf, dt), 1)
		}
		got := garbage(len(buf))
		if err := c.Recv(k.ctx, comm.Raw(got, dt), 0); err != nil {
			return err
		}
		return compare(what+" plain", dt, got, reference.Input(dt, comm.Sum, 0, 99, n))
	}
	return nil
}

// split checks Split: even and odd ranks form two groups ranked in reverse
// order, and the last rank of a communicator of more than two opts out.
func (k checker) split() error {
	c := k.c
	size, rank := c.Size(), c.Rank()
	color := rank % 2
	if size > 2 && rank == size-1 {
		color = comm.NoColor
	}
	sub, err := c.Split(k.ctx, color, -rank)
	if err != nil {
		return err
	}
	if color == comm.NoColor {
		if sub != nil {
			return fmt.Errorf("Split with NoColor returned a communicator")
		}
		return c.Barrier(k.ctx)
	}
	defer sub.Close()
	var members []int
	for r := size - 1; r >= 0; r-- {
		if r%2 == color && !(size > 2 && r == size-1) {
			members = append(members, r)
		}
	}
	if sub.Size() != len(members) || members[sub.Rank()] != rank {
		return fmt.Errorf("Split: rank %d got sub rank %d of %d, want index in %v", rank, sub.Rank(), sub.Size(), members)
	}
	// AllReduce over the sub-communicator: sum of the members' ranks.
	x := []int64{int64(rank), 1}
	if err := comm.AllReduce(k.ctx, sub, x, x, comm.Sum); err != nil {
		return err
	}
	var want int64
	for _, m := range members {
		want += int64(m)
	}
	if x[0] != want || x[1] != int64(len(members)) {
		return fmt.Errorf("Split: AllReduce over %v gave %v, want [%d %d]", members, x, want, len(members))
	}
	// The parent is still usable, and ordered after the split.
	return c.Barrier(k.ctx)
}

// conformance runs the whole matrix on one rank.
func conformance(ctx context.Context, c *comm.Communicator, m matrix) error {
	variants := []bool{false}
	if m.async {
		variants = append(variants, true)
	}
	for _, async := range variants {
		k := checker{ctx: ctx, c: c, async: async}
		for _, n := range m.sizes {
			root := n % c.Size()
			for _, dt := range m.dtypes {
				for _, op := range m.ops {
					for _, inPlace := range []bool{false, true} {
						if err := k.allReduce(dt, op, n, inPlace); err != nil {
							return err
						}
						if err := k.reduce(dt, op, n, root, inPlace); err != nil {
							return err
						}
						if err := k.reduceScatter(dt, op, n, inPlace); err != nil {
							return err
						}
					}
				}
				for _, inPlace := range []bool{false, true} {
					if err := k.broadcast(dt, n, root, inPlace); err != nil {
						return err
					}
					if err := k.allGather(dt, n, inPlace); err != nil {
						return err
					}
					if err := k.allToAll(dt, n, inPlace); err != nil {
						return err
					}
				}
				if err := k.allToAllV(dt, n); err != nil {
					return err
				}
				if err := k.gather(dt, n, root); err != nil {
					return err
				}
				if err := k.scatter(dt, n, root); err != nil {
					return err
				}
				if err := k.sendRecv(dt, n); err != nil {
					return err
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := k.split(); err != nil {
			return err
		}
	}
	return nil
}

// large runs the collectives at sizes of at least 16 MiB.
func large(ctx context.Context, c *comm.Communicator) error {
	k := checker{ctx: ctx, c: c}
	const n = 4<<20 + 3 // float32 elements: just over 16 MiB
	if err := k.allReduce(comm.Float32, comm.Sum, n, false); err != nil {
		return err
	}
	if err := k.allReduce(comm.BFloat16, comm.Max, 8<<20+1, true); err != nil {
		return err
	}
	if err := k.broadcast(comm.Int32, n, c.Size()-1, false); err != nil {
		return err
	}
	if err := k.reduce(comm.Float64, comm.Sum, 2<<20+5, 0, false); err != nil {
		return err
	}
	per := (16 << 20) / 4 / c.Size()
	if err := k.allGather(comm.Float32, per+1, false); err != nil {
		return err
	}
	if err := k.reduceScatter(comm.Float32, comm.Avg, per+1, false); err != nil {
		return err
	}
	// At 2 ranks on shared memory, blocks of 8 MiB: through the rings,
	// whole, where single copies do not pay and the last-level cache is
	// at most 32 MiB (shm.Config.WholeRingThreshold), else lent.
	if err := k.allToAll(comm.Uint8, (16<<20)/c.Size()+1, false); err != nil {
		return err
	}
	// Blocks above TCP's eager limit, within a piece: between two ranks
	// over TCP, both ways at once on one goroutine (transport.Duplex).
	if err := k.allToAll(comm.Uint8, 300<<10+1, false); err != nil {
		return err
	}
	// In place, with blocks that shared memory would lend out of place.
	if err := k.allToAll(comm.Uint8, 1<<20+1, true); err != nil {
		return err
	}
	// Blocks of 0 to 160 KiB: on shared memory some lent and some
	// through the rings in one exchange when the ranks outnumber the
	// cores (lent from 32 KiB, taken whole), all lent when they do not and
	// OCCL_SHM_CMA=lend or the machine's rates say so (from 16 KiB).
	if err := k.allToAllV(comm.Float32, 40000); err != nil {
		return err
	}
	if err := k.allToAllV(comm.Float32, (16<<20)/4/c.Size()); err != nil {
		return err
	}
	// Messages past the eager limit: shared memory lends them (a group's
	// sends go first, two of them to the same peer at 2 ranks, and it
	// waits for their copies last), TCP sends them from one goroutine
	// per peer.
	if err := k.sendRecv(comm.Float32, 1<<20+3); err != nil {
		return err
	}
	// Messages that a group's sends offer on shared memory (from 32 KiB,
	// from 64 KiB where the ranks outnumber the cores): each copied by
	// its receiver while offered, or taken back into the ring.
	if err := k.sendRecv(comm.Float32, (256<<10)/4); err != nil {
		return err
	}
	// Rank 0 sends one element to every rank and receives just over
	// 1 MiB from every other: its sends are small enough to go directly,
	// but blocks that shared memory lends and TCP sends in pieces come to
	// it.
	if err := k.allToAllVCounts(comm.Float32, "small-out", func(src, dst int) int {
		if dst == 0 && src != 0 {
			return (1<<20)/4 + 1
		}
		return 1
	}); err != nil {
		return err
	}
	// Skewed: rank 0 sends 2 MiB to rank 1 only, every other rank 2 MiB
	// to every rank. On shared memory rank 0 lends its one block while a
	// rank with a peer it does not lend to (another host, over TCP) sends
	// in pieces: each receives the other's block whole or in pieces as
	// its sender sends it.
	return k.allToAllVCounts(comm.Float32, "skewed", func(src, dst int) int {
		if src == 0 && dst != 1 {
			return 0
		}
		return (2 << 20) / 4
	})
}
