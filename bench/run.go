package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/internal/reference"
)

// Config is what one benchmark measures.
type Config struct {
	Op     Op
	DType  algo.DType
	RedOp  algo.Op
	Root   int
	Iters  int  // timed iterations per size
	Warmup int  // untimed iterations before them
	Check  bool // verify one more run of each size against the reference
	// WarmupTime is the least time the warm-up of each size lasts (when
	// Warmup is not 0): if Warmup iterations take less, more follow in
	// batches, as many on every rank (agreed by one untimed AllReduce of
	// the count per batch, which every rank runs whatever its own
	// WarmupTime), until every rank's has passed. A process that was idle until
	// then (as after the bootstrap) runs its first milliseconds slower:
	// 5500 8 B AllReduces at 2 processes after 500 of warm-up took 0.30-0.67
	// us each, 0.27 after 20 ms of busy CPU, where Open MPI's processes come
	// warm from its own start-up, which polls.
	WarmupTime time.Duration
	// Issue is how a size's iterations are issued and waited for.
	Issue Issue
	// Demand shapes AllToAllV (nil: uniform).
	Demand *Demand
	// Latency times every operation of a timed run, each by one clock
	// reading after it, and reports their distribution (Result.Latency).
	// Only where each operation is waited for before the next is issued
	// (Issue Blocking or AsyncWait).
	Latency bool
	// HugePages puts the send and receive buffers (from
	// hugemem.SharedMin) in memory of hugemem.Alloc, as a program does
	// whose tensors come from occl's allocator (the C ABI's occlMemAlloc,
	// Python's occl.torch.empty): shared memory that a peer on the host
	// maps and copies blocks out of with memcpy instead of
	// process_vm_readv, advised for transparent huge pages from 2 MiB.
	HugePages bool
}

// Issue is how the benchmark issues operations and waits for them.
type Issue int

const (
	// Batch issues a size's iterations with the Async calls, then waits
	// for the last (as nccl-tests' -z 0 does).
	Batch Issue = iota
	// Blocking runs each operation with the blocking call before issuing
	// the next (as nccl-tests' -z 1 does, and as a training loop that
	// waits for each operation does).
	Blocking
	// AsyncWait issues each operation with its Async call and waits for
	// its request before issuing the next: what a caller of the C ABI's
	// Async calls and occlWait does, torch.distributed's backend among
	// them. Against Blocking it shows what the hand-off of an issued
	// operation costs.
	AsyncWait
)

// Result is the measurement of one size, out-of-place and in-place. Times
// are the maximum over ranks of each rank's average time per operation.
type Result struct {
	Impl      string  `json:"impl"`
	Op        Op      `json:"op"`
	NP        int     `json:"np"`
	Bytes     int     `json:"bytes"`
	Count     int     `json:"count"`
	DType     string  `json:"dtype"`
	RedOp     string  `json:"redop"`
	Root      int     `json:"root"`
	Algo      string  `json:"algo"`
	Transport string  `json:"transport"`
	TimeUS    float64 `json:"time_us"`
	AlgBW     float64 `json:"algbw_GBps"`
	BusBW     float64 `json:"busbw_GBps"`
	Wrong     int64   `json:"wrong"`
	// In-place measurement; InPlaceTimeUS is 0 where the operation has no
	// in-place form.
	InPlaceTimeUS float64 `json:"inplace_time_us"`
	InPlaceAlgBW  float64 `json:"inplace_algbw_GBps"`
	InPlaceBusBW  float64 `json:"inplace_busbw_GBps"`
	InPlaceWrong  int64   `json:"inplace_wrong"`
	// Latency and InPlaceLatency are the per-operation distributions of
	// Config.Latency.
	Latency        *Latency `json:"latency,omitempty"`
	InPlaceLatency *Latency `json:"inplace_latency,omitempty"`
	// PredictedUS is the cost model's time for Algo, 0 when the
	// communicator has no topology or the model does not cover the
	// operation.
	PredictedUS float64 `json:"predicted_us,omitempty"`
	// Skew names the demand of a skewed AllToAllV.
	Skew string `json:"skew,omitempty"`
}

// Runner benchmarks one operation on one communicator. Buffers are
// allocated once for the largest size and reused.
type Runner struct {
	c      *comm.Communicator
	cfg    Config
	es     int
	sbuf   []byte
	rbuf   []byte
	expect []byte
	reqs   []*comm.Request
	// times receives the iteration times of a timed run under
	// Config.Latency (nil otherwise).
	times []time.Duration
	// huge are the buffers of Config.HugePages, freed by Close.
	huge [][]byte
	// AllToAllV: the element matrix of the current size and this rank's
	// counts and displacements.
	v vLayout
}

// vLayout is the AllToAllV layout of one size: counts[s][d] elements from
// rank s to rank d, packed in destination order on the sender and in
// source order on the receiver.
type vLayout struct {
	counts         [][]int
	sc, sd, rc, rd []int
	send, recv     int // elements of this rank's buffers
}

func newVLayout(counts [][]int, rank int) vLayout {
	n := len(counts)
	v := vLayout{counts: counts, sc: make([]int, n), sd: make([]int, n), rc: make([]int, n), rd: make([]int, n)}
	for j := 0; j < n; j++ {
		v.sc[j], v.sd[j] = counts[rank][j], v.send
		v.send += v.sc[j]
		v.rc[j], v.rd[j] = counts[j][rank], v.recv
		v.recv += v.rc[j]
	}
	return v
}

// sendOffset is where rank s's block for rank d starts in s's buffer.
func (v vLayout) sendOffset(s, d int) int {
	off := 0
	for j := 0; j < d; j++ {
		off += v.counts[s][j]
	}
	return off
}

// NewRunner prepares a runner for sizes up to maxBytes.
func NewRunner(c *comm.Communicator, cfg Config, maxBytes int) (*Runner, error) {
	if !cfg.DType.Valid() || !cfg.RedOp.Valid() {
		return nil, fmt.Errorf("bench: bad dtype %v or reduction %v", cfg.DType, cfg.RedOp)
	}
	if cfg.Op.Rooted() && (cfg.Root < 0 || cfg.Root >= c.Size()) {
		return nil, fmt.Errorf("bench: root %d out of range for %d ranks", cfg.Root, c.Size())
	}
	if cfg.Iters < 1 || cfg.Warmup < 0 {
		return nil, fmt.Errorf("bench: %d iterations, %d warmup", cfg.Iters, cfg.Warmup)
	}
	if cfg.Latency && cfg.Issue == Batch {
		return nil, fmt.Errorf("bench: per-operation latency needs each operation waited for before the next (blocking calls, or Async calls each waited for)")
	}
	es := cfg.DType.Size()
	if cfg.Op == AllToAllV && cfg.Demand == nil {
		d, err := ParseDemand("uniform", c.Size())
		if err != nil {
			return nil, err
		}
		cfg.Demand = d
	}
	if cfg.Demand != nil && len(cfg.Demand.Weights) != c.Size() {
		return nil, fmt.Errorf("bench: demand for %d ranks on %d", len(cfg.Demand.Weights), c.Size())
	}
	l := cfg.Op.Layout(maxBytes, es, c.Size())
	send, recv := l.SendCount, l.RecvCount
	if cfg.Op == AllToAllV {
		v := newVLayout(cfg.Demand.Counts(l.Count/c.Size()), c.Rank())
		send, recv = v.send, v.recv
	}
	r := &Runner{
		c: c, cfg: cfg, es: es,
		expect: make([]byte, max(send, recv)*es),
	}
	if cfg.Issue == Batch {
		// Only a batch keeps its requests (see loop).
		r.reqs = make([]*comm.Request, 0, max(cfg.Iters, cfg.Warmup))
	}
	if cfg.Latency {
		r.times = make([]time.Duration, cfg.Iters)
	}
	var err error
	if r.sbuf, err = r.buffer(send * es); err == nil {
		r.rbuf, err = r.buffer(recv * es)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// buffer returns a send or receive buffer of n bytes: from the heap, or
// with Config.HugePages from hugemem from hugemem.SharedMin bytes up,
// freed by Close.
func (r *Runner) buffer(n int) ([]byte, error) {
	if !r.cfg.HugePages || n < hugemem.SharedMin {
		return make([]byte, n), nil
	}
	b, err := hugemem.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r.huge = append(r.huge, b)
	return b, nil
}

// Close releases the runner's buffers (those of Config.HugePages; the
// others are the garbage collector's), once every operation on them has
// completed. The runner is not used after it.
func (r *Runner) Close() error {
	var first error
	for _, b := range r.huge {
		if err := hugemem.Free(b); err != nil && first == nil {
			first = err
		}
	}
	r.huge, r.sbuf, r.rbuf = nil, nil, nil
	return first
}

// HasInPlace reports whether the operation has an in-place form.
func (op Op) HasInPlace() bool {
	return op != SendRecv && op != AllToAllV && op != Barrier
}

// Run measures one size of the sweep.
func (r *Runner) Run(ctx context.Context, size int) (Result, error) {
	c, cfg := r.c, r.cfg
	n := c.Size()
	l := cfg.Op.Layout(size, r.es, n)
	a := c.Algorithm(cfg.Op.Collective(), l.Bytes)
	res := Result{
		Impl: "occl", Op: cfg.Op, NP: n, Bytes: l.Bytes, Count: l.Count,
		DType: cfg.DType.String(), RedOp: cfg.RedOp.String(), Root: -1,
		Algo: a.String(), Transport: c.TransportName(),
	}
	if cfg.Op == AllToAllV {
		per := l.Count / n
		r.v = newVLayout(cfg.Demand.Counts(per), c.Rank())
		bytes := cfg.Demand.Bytes(per, r.es)
		a = c.AllToAllAlgorithm(bytes)
		res.Algo = a.String()
		if t, ok := c.PredictAllToAllV(a, bytes); ok {
			res.PredictedUS = t * 1e6
		}
		if cfg.Demand.Name != "uniform" {
			res.Skew = cfg.Demand.Name
		}
	} else if t, ok := c.Predict(cfg.Op.Collective(), a, l.Bytes); ok {
		res.PredictedUS = t * 1e6
	}
	if !cfg.Op.Reduces() {
		res.RedOp = "none"
	}
	if cfg.Op.Rooted() {
		res.Root = cfg.Root
	}
	var err error
	res.TimeUS, res.Wrong, res.Latency, err = r.measure(ctx, l, false)
	if err != nil {
		return res, err
	}
	res.AlgBW, res.BusBW = r.bandwidth(l, res.TimeUS)
	if cfg.Op.HasInPlace() {
		res.InPlaceTimeUS, res.InPlaceWrong, res.InPlaceLatency, err = r.measure(ctx, l, true)
		if err != nil {
			return res, err
		}
		res.InPlaceAlgBW, res.InPlaceBusBW = r.bandwidth(l, res.InPlaceTimeUS)
	}
	return res, nil
}

func (r *Runner) bandwidth(l Layout, us float64) (alg, bus float64) {
	if us <= 0 {
		return 0, 0
	}
	alg = float64(l.Bytes) / (us * 1e-6) / 1e9
	return alg, alg * r.cfg.Op.BusFactor(r.c.Size())
}

// measure times one variant and, if asked, checks one more run. It returns
// the maximum over ranks of the average time in microseconds, the total
// number of wrong elements over ranks (-1 when not checked) and, under
// Config.Latency, the distribution of the operations' times (each figure
// the largest of the ranks'; nil otherwise).
func (r *Runner) measure(ctx context.Context, l Layout, inPlace bool) (float64, int64, *Latency, error) {
	send, recv := r.buffers(l, inPlace)
	r.fill(l, send)
	if err := r.warmUp(ctx, send, recv); err != nil {
		return 0, 0, nil, err
	}
	if err := r.c.Barrier(ctx); err != nil {
		return 0, 0, nil, err
	}
	start := time.Now()
	if err := r.loop(ctx, send, recv, r.cfg.Iters, r.times); err != nil {
		return 0, 0, nil, err
	}
	avg := float64(time.Since(start).Nanoseconds()) / 1e3 / float64(r.cfg.Iters)
	wrong := int64(-1)
	if r.cfg.Check {
		r.fill(l, send)
		if err := r.loop(ctx, send, recv, 1, nil); err != nil {
			return 0, 0, nil, err
		}
		wrong = r.verify(l, recv)
	}
	// The largest of every rank: the mean, then the latency's figures.
	agg := []float64{avg, 0, 0, 0}
	var lat *Latency
	if r.times != nil {
		d := latencyOf(r.times)
		agg[1], agg[2], agg[3] = d.P50US, d.P99US, d.MaxUS
	} else {
		agg = agg[:1]
	}
	if err := comm.AllReduce(ctx, r.c, agg, agg, comm.Max); err != nil {
		return 0, 0, nil, err
	}
	if r.times != nil {
		lat = &Latency{P50US: agg[1], P99US: agg[2], MaxUS: agg[3]}
	}
	if r.cfg.Check {
		w := []int64{wrong}
		if err := comm.AllReduce(ctx, r.c, w, w, comm.Sum); err != nil {
			return 0, 0, nil, err
		}
		wrong = w[0]
	}
	return agg[0], wrong, lat, nil
}

// warmUp runs Warmup iterations and then, while any rank's warm-up has
// lasted less than its WarmupTime, as many more as that rank's time left
// needs at the pace of its last batch: the same number on every rank, the
// largest any rank asks for, agreed by one untimed AllReduce per batch
// (which every rank runs whatever its own WarmupTime). The pace is
// measured again after every batch, so first iterations slower than the
// rest (a cold cache, a process that was idle) cannot end the warm-up
// early.
func (r *Runner) warmUp(ctx context.Context, send, recv []byte) error {
	start := time.Now()
	if err := r.loop(ctx, send, recv, r.cfg.Warmup, nil); err != nil {
		return err
	}
	if r.cfg.Warmup == 0 {
		return nil
	}
	batch, batchTook := r.cfg.Warmup, time.Since(start)
	more := []int64{0}
	for {
		more[0] = 0
		if left := r.cfg.WarmupTime - time.Since(start); left > 0 {
			each := max(batchTook/time.Duration(batch), time.Nanosecond)
			more[0] = int64(left/each) + 1
		}
		if err := comm.AllReduce(ctx, r.c, more, more, comm.Max); err != nil {
			return err
		}
		if more[0] == 0 {
			return nil
		}
		batchStart := time.Now()
		// In pieces no larger than a timed run, whose requests the Batch
		// issue keeps.
		for left := int(more[0]); left > 0; {
			n := min(left, max(r.cfg.Iters, r.cfg.Warmup))
			if err := r.loop(ctx, send, recv, n, nil); err != nil {
				return err
			}
			left -= n
		}
		batch, batchTook = int(more[0]), time.Since(batchStart)
	}
}

// loop runs iters operations by Config.Issue: each waited for before the
// next (Blocking, AsyncWait), or all issued back to back and the last one
// waited for, as nccl-tests synchronises its stream once per batch
// (operations on a communicator complete in issue order, so the others
// are done by then). Where each is waited for, a non-nil times receives
// their times, by one clock reading after each.
func (r *Runner) loop(ctx context.Context, send, recv []byte, iters int, times []time.Duration) error {
	switch r.cfg.Issue {
	case Blocking, AsyncWait:
		// time.Since reads the monotonic clock alone: 31-35 ns on the
		// machine of docs/performance.md, as MPI_Wtime's 36-37 in
		// mpi_bench, against 57-62 for time.Now, which reads the wall
		// clock too.
		var base time.Time
		var last time.Duration
		if times != nil {
			base = time.Now()
		}
		for i := 0; i < iters; i++ {
			if err := r.once(ctx, send, recv); err != nil {
				return err
			}
			if times != nil {
				now := time.Since(base)
				times[i], last = now-last, now
			}
		}
		return nil
	}
	r.reqs = r.reqs[:0]
	for i := 0; i < iters; i++ {
		r.reqs = append(r.reqs, r.issue(ctx, send, recv))
	}
	if len(r.reqs) == 0 {
		return nil
	}
	if err := r.reqs[len(r.reqs)-1].Wait(ctx); err != nil {
		return err
	}
	for _, q := range r.reqs {
		if done, err := q.Test(); !done || err != nil {
			if err == nil {
				err = fmt.Errorf("bench: operation not complete after a later one")
			}
			return err
		}
	}
	for i, q := range r.reqs {
		q.Release() // the next batch reuses them
		r.reqs[i] = nil
	}
	return nil
}

// once runs one operation and waits for it, by Config.Issue: a blocking
// call, or an Async call and its Wait.
func (r *Runner) once(ctx context.Context, send, recv []byte) error {
	if r.cfg.Issue == Blocking {
		return r.call(ctx, send, recv)
	}
	q := r.issue(ctx, send, recv)
	if err := q.Wait(ctx); err != nil {
		return err
	}
	q.Release() // as the C ABI's wait does: the next call reuses it
	return nil
}

// buffers returns the send and receive memory for one variant.
func (r *Runner) buffers(l Layout, inPlace bool) (send, recv []byte) {
	es, rank, root := r.es, r.c.Rank(), r.cfg.Root
	if r.cfg.Op == AllToAllV {
		return r.sbuf[:r.v.send*es], r.rbuf[:r.v.recv*es]
	}
	send, recv = r.sbuf[:l.SendCount*es], r.rbuf[:l.RecvCount*es]
	if !inPlace {
		return send, recv
	}
	switch r.cfg.Op {
	case AllReduce, Reduce, Broadcast, AllToAll:
		recv = send
	case AllGather:
		send = recv[rank*l.SendCount*es : (rank+1)*l.SendCount*es]
	case Gather:
		if rank == root {
			send = recv[root*l.SendCount*es : (root+1)*l.SendCount*es]
		}
	case ReduceScatter:
		recv = send[rank*l.RecvCount*es : (rank+1)*l.RecvCount*es]
	case Scatter:
		if rank == root {
			recv = send[root*l.RecvCount*es : (root+1)*l.RecvCount*es]
		}
	}
	return send, recv
}

func (r *Runner) issue(ctx context.Context, send, recv []byte) *comm.Request {
	c, cfg := r.c, r.cfg
	s, d := comm.Raw(send, cfg.DType), comm.Raw(recv, cfg.DType)
	switch cfg.Op {
	case AllReduce:
		return c.AllReduceAsync(ctx, s, d, cfg.RedOp)
	case Reduce:
		return c.ReduceAsync(ctx, s, d, cfg.RedOp, cfg.Root)
	case Broadcast:
		return c.BroadcastAsync(ctx, s, d, cfg.Root)
	case AllGather:
		return c.AllGatherAsync(ctx, s, d)
	case ReduceScatter:
		return c.ReduceScatterAsync(ctx, s, d, cfg.RedOp)
	case AllToAll:
		return c.AllToAllAsync(ctx, s, d)
	case AllToAllV:
		v := r.v
		return c.AllToAllVAsync(ctx, s, v.sc, v.sd, d, v.rc, v.rd)
	case Gather:
		return c.GatherAsync(ctx, s, d, cfg.Root)
	case Scatter:
		return c.ScatterAsync(ctx, s, d, cfg.Root)
	case SendRecv:
		n, rank := c.Size(), c.Rank()
		return c.NewGroup().Send(s, (rank+1)%n).Recv(d, (rank+n-1)%n).Start(ctx)
	}
	return c.BarrierAsync(ctx)
}

// call runs one operation with the blocking form of the API, as a training
// loop that waits for each operation calls it.
func (r *Runner) call(ctx context.Context, send, recv []byte) error {
	c, cfg := r.c, r.cfg
	s, d := comm.Raw(send, cfg.DType), comm.Raw(recv, cfg.DType)
	switch cfg.Op {
	case AllReduce:
		return c.AllReduce(ctx, s, d, cfg.RedOp)
	case Reduce:
		return c.Reduce(ctx, s, d, cfg.RedOp, cfg.Root)
	case Broadcast:
		return c.Broadcast(ctx, s, d, cfg.Root)
	case AllGather:
		return c.AllGather(ctx, s, d)
	case ReduceScatter:
		return c.ReduceScatter(ctx, s, d, cfg.RedOp)
	case AllToAll:
		return c.AllToAll(ctx, s, d)
	case AllToAllV:
		v := r.v
		return c.AllToAllV(ctx, s, v.sc, v.sd, d, v.rc, v.rd)
	case Gather:
		return c.Gather(ctx, s, d, cfg.Root)
	case Scatter:
		return c.Scatter(ctx, s, d, cfg.Root)
	case SendRecv:
		n, rank := c.Size(), c.Rank()
		return c.NewGroup().Send(s, (rank+1)%n).Recv(d, (rank+n-1)%n).Run(ctx)
	}
	return c.Barrier(ctx)
}

// fill writes this rank's reference input into the send buffer.
func (r *Runner) fill(l Layout, send []byte) {
	cfg, rank := r.cfg, r.c.Rank()
	switch cfg.Op {
	case AllReduce, Reduce, ReduceScatter:
		reference.FillInput(send, cfg.DType, cfg.RedOp, rank, 0)
	case AllGather, Gather:
		reference.FillInput(send, cfg.DType, algo.Sum, rank, rank*l.SendCount)
	case Broadcast, Scatter:
		if rank == cfg.Root {
			reference.FillInput(send, cfg.DType, algo.Sum, rank, 0)
		}
	case AllToAll, AllToAllV, SendRecv:
		reference.FillInput(send, cfg.DType, algo.Sum, rank, 0)
	}
}

// verify counts the wrong elements of this rank's output.
func (r *Runner) verify(l Layout, recv []byte) int64 {
	cfg, es, n, rank := r.cfg, r.es, r.c.Size(), r.c.Rank()
	exp := r.expect[:len(recv)]
	switch cfg.Op {
	case AllReduce:
		reference.FillReduced(exp, cfg.DType, cfg.RedOp, n, 0)
	case Reduce:
		if rank != cfg.Root {
			return 0
		}
		reference.FillReduced(exp, cfg.DType, cfg.RedOp, n, 0)
	case ReduceScatter:
		reference.FillReduced(exp, cfg.DType, cfg.RedOp, n, rank*l.RecvCount)
	case Broadcast:
		reference.FillInput(exp, cfg.DType, algo.Sum, cfg.Root, 0)
	case Scatter:
		reference.FillInput(exp, cfg.DType, algo.Sum, cfg.Root, rank*l.RecvCount)
	case AllGather, Gather:
		if cfg.Op == Gather && rank != cfg.Root {
			return 0
		}
		for j := 0; j < n; j++ {
			blk := l.SendCount * es
			reference.FillInput(exp[j*blk:(j+1)*blk], cfg.DType, algo.Sum, j, j*l.SendCount)
		}
	case AllToAll:
		per := l.RecvCount / n
		for j := 0; j < n; j++ {
			reference.FillInput(exp[j*per*es:(j+1)*per*es], cfg.DType, algo.Sum, j, rank*per)
		}
	case AllToAllV:
		v := r.v
		for j := 0; j < n; j++ {
			reference.FillInput(exp[v.rd[j]*es:(v.rd[j]+v.rc[j])*es], cfg.DType, algo.Sum, j, v.sendOffset(j, rank))
		}
	case SendRecv:
		reference.FillInput(exp, cfg.DType, algo.Sum, (rank+n-1)%n, 0)
	default:
		return 0
	}
	var wrong int64
	for i := 0; i+es <= len(recv); i += es {
		if !bytes.Equal(recv[i:i+es], exp[i:i+es]) {
			wrong++
		}
	}
	return wrong
}
