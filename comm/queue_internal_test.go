package comm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// TestBlockingCallWakesNoWorker: a blocking call runs its operation on the
// caller's goroutine and wakes no worker; neither does an Async call
// waited for at once; one not waited for wakes it after its grace. The
// worker is stopped first, so that nobody takes the wake-up token a push
// would leave: a blocking call must complete on its own and leave none.
func TestBlockingCallWakesNoWorker(t *testing.T) {
	c, ctx := stoppedWorker(t)
	x := []float32{1, 2, 3}
	for i := range 3 {
		if err := AllReduce(ctx, c, x, x, Sum); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if n := len(c.queue.wake); n != 0 {
			t.Fatalf("call %d: a blocking call left %d wake-ups for the worker", i, n)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.NewGroup().Send(Slice(x), 0).Recv(Slice(make([]float32, 3)), 0).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(c.queue.wake); n != 0 {
		t.Fatalf("a blocking barrier or group left %d wake-ups for the worker", n)
	}
	// Waited for at once: run by its caller, and the grace's end finds
	// nothing queued. The grace is lengthened for this, so that a slow
	// machine (the race detector) cannot let it pass between the call
	// and its wait.
	c.queue.graceFor = time.Second
	if err := c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.queue.graceFor = issueGrace
	if c.queue.graceArmed.Load() {
		t.Fatal("an Async call waited for at once left its grace's wake-up pending")
	}
	time.Sleep(10 * issueGrace)
	if n := len(c.queue.wake); n != 0 {
		t.Fatalf("an Async call waited for at once left %d wake-ups for the worker", n)
	}
	// A grace long enough that a slow machine cannot let it pass between
	// the call and the look below (20 us did, once, under CI's load).
	c.queue.graceFor = 100 * time.Millisecond
	r := c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum)
	c.queue.graceFor = issueGrace
	// Errors, not fatal, from here: the request must be waited for before
	// Close, which waits for it.
	if n := len(c.queue.wake); n != 0 {
		t.Errorf("an Async call woke the worker at once (%d wake-ups), before its grace", n)
	}
	// Nobody waits for it: the worker is woken once the grace is over.
	for end := time.Now().Add(5 * time.Second); len(c.queue.wake) == 0 && time.Now().Before(end); {
		time.Sleep(issueGrace)
	}
	if n := len(c.queue.wake); n != 1 {
		t.Errorf("%d wake-ups for the worker after the Async call's grace, want 1", n)
	}
	// Without a worker it runs when its caller waits for it.
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if x[0] != 1 || x[2] != 3 {
		t.Fatalf("AllReduce of one rank changed its buffer: %v", x)
	}
}

// stoppedWorker returns a communicator of one rank whose worker is
// stopped, so that nobody takes the wake-up token a push would leave, and
// a context for the test's calls; both end with the test.
func stoppedWorker(t *testing.T) (*Communicator, context.Context) {
	t.Helper()
	comms, err := NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	t.Cleanup(func() { c.Close() })
	c.queue.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

// TestConcurrentBlockingCalls: goroutines making blocking calls on one
// communicator, each running its own operation when it is at the head of
// the queue and leaving it to the worker otherwise, never strand an
// operation in the queue (a lost wake-up would hang until the deadline),
// and mix with Async calls.
func TestConcurrentBlockingCalls(t *testing.T) {
	comms, err := NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const goroutines, calls = 4, 2000
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []int64{int64(g), 1}
			for i := range calls {
				var err error
				if (g+i)%5 == 0 {
					err = c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum).Wait(ctx)
				} else {
					err = AllReduce(ctx, c, x, x, Sum)
				}
				if err != nil {
					errs <- err
					return
				}
				if x[0] != int64(g) || x[1] != 1 {
					errs <- &OpError{Rank: 0, Op: "AllReduce", Err: ErrInvalidArgument}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestAllToAllWaits: an all-to-all's waits give the core away by its
// largest block on shared memory, by its buffer elsewhere; larger blocks
// on shared memory that lends them wait for the peers' copies.
func TestAllToAllWaits(t *testing.T) {
	for _, tc := range []struct {
		bytes, block int
		shm, lends   bool
		want         waits
	}{
		{shortOp, shortOp, false, false, waitShort}, {shortOp + 1, shortOp, false, false, waitAlone}, {64 << 20, 1, false, false, waitAlone},
		{shortOpShm, shortOpShm, true, false, waitShort}, {4 << 20, shortBlockShm, true, false, waitShort}, {4 << 20, shortBlockShm + 1, true, false, waitAlone},
		{shortOpShm, shortOpShm + 1, true, false, waitShort},
		{4 << 20, shortBlockShm, true, true, waitShort}, {4 << 20, shortBlockShm + 1, true, true, waitCopy},
		{64 << 20, 16 << 20, false, true, waitAlone}, {shortOpShm, shortOpShm + 1, true, true, waitShort},
	} {
		if got := allToAllWaits(tc.bytes, tc.shm, tc.lends, tc.block, nil, nil); got != tc.want {
			t.Errorf("all-to-all of %d bytes, blocks of %d (all shm: %v, lent: %v): waits %d, want %d", tc.bytes, tc.block, tc.shm, tc.lends, got, tc.want)
		}
		lens := []int{1, tc.block, 0}
		if got := allToAllWaits(tc.bytes, tc.shm, tc.lends, -1, lens, lens[:1]); got != tc.want {
			t.Errorf("all-to-all of %d bytes, largest block %d (all shm: %v, lent: %v): waits %d, want %d", tc.bytes, tc.block, tc.shm, tc.lends, got, tc.want)
		}
	}
	if got := largestBlock(-1, []int{3, 9, 0}, []int{8, 1, 2}); got != 9 {
		t.Errorf("largest block of an AllToAllV: %d, want 9", got)
	}
	if got := largestBlock(5, nil, nil); got != 5 {
		t.Errorf("largest block of an AllToAll: %d, want 5", got)
	}
}

// TestScheduleWaits: a Broadcast whose chunks are lent (all-shm
// connections that all lend them, above the eager limit or from
// algo.LendFirst times the smallest message lent, a root with several
// children or crowded ranks, where it is more than one chunk) waits as a
// lent all-to-all's copies above shortOpShm; every other schedule, and a
// Broadcast not lent, as opWaits says.
func TestScheduleWaits(t *testing.T) {
	const size, eager, lendMin = 4, 256 << 10, 64 << 10
	for _, tc := range []struct {
		op       algo.Collective
		bytes    int
		shm      bool
		lendMin  int
		chunk    int
		want     waits
		describe string
	}{
		{algo.OpBroadcast, 64 << 20, true, lendMin, DefaultChunkSize, waitCopy, "chunks of the default size"},
		{algo.OpBroadcast, 512 << 10, true, lendMin, DefaultChunkSize, waitCopy, "one chunk"},
		{algo.OpBroadcast, shortOpShm, true, lendMin, shortOpShm, waitShort, "one short chunk"},
		{algo.OpBroadcast, 100 << 10, true, lendMin, 0, waitShort, "inline"},
		{algo.OpBroadcast, 1 << 20, true, 1 << 20, 0, waitAlone, "below the minimum"},
		{algo.OpBroadcast, 64 << 20, true, 0, 0, waitAlone, "some connection lends nothing"},
		{algo.OpBroadcast, 64 << 20, false, lendMin, 0, waitAlone, "not all shared memory"},
		{algo.OpAllGather, 4 << 20, true, lendMin, 0, waitAlone, "the ring's waits"},
		{algo.OpReduceScatter, 64 << 20, true, lendMin, 0, waitAlone, "nothing lent"},
		{algo.OpAllReduce, 64 << 20, true, lendMin, 0, waitAlone, "nothing lent"},
	} {
		c := &Communicator{}
		c.size = size
		c.cfg.chunk = DefaultChunkSize
		c.links.shm, c.links.eager, c.links.lendMin = tc.shm, eager, tc.lendMin
		if got := c.lentChunk(tc.bytes); tc.op == algo.OpBroadcast && got != tc.chunk {
			t.Errorf("%s of %d bytes (%s): lent chunks of %d bytes, want %d", tc.op, tc.bytes, tc.describe, got, tc.chunk)
		}
		if got := c.scheduleWaits(tc.op, tc.bytes); got != tc.want {
			t.Errorf("%s of %d bytes (%s): waits %d, want %d", tc.op, tc.bytes, tc.describe, got, tc.want)
		}
	}
	c := &Communicator{}
	c.size = size
	c.cfg.chunk = 4 << 20
	c.links.shm, c.links.eager, c.links.lendMin = true, eager, lendMin
	if got := c.scheduleWaits(algo.OpBroadcast, 64<<20); got != waitCopy {
		t.Errorf("Broadcast of 64 MiB in chunks of 4 MiB: waits %d, want the copy waits (%d)", got, waitCopy)
	}
	// Between 2 ranks with a core each the root lends its one child
	// nothing; crowded, it does.
	c.size = 2
	if got := c.lentChunk(64 << 20); got != 0 {
		t.Errorf("Broadcast of 64 MiB between 2 ranks with a core each: lent chunks of %d bytes, want none", got)
	}
	c.cfg.oversubscribed = true
	if got := c.lentChunk(64 << 20); got != 4<<20 {
		t.Errorf("Broadcast of 64 MiB between 2 crowded ranks: lent chunks of %d bytes, want %d", got, 4<<20)
	}
	// Crowded, a broadcast of one chunk goes through the rings.
	c.size = size
	if got, w := c.lentChunk(4<<20), c.scheduleWaits(algo.OpBroadcast, 4<<20); got != 0 || w != waitAlone {
		t.Errorf("Broadcast of one chunk of 4 MiB among 4 crowded ranks: lent chunks of %d bytes, waits %d; want none lent, waits %d", got, w, waitAlone)
	}
	if got := c.lentChunk(4<<20 + 1); got != 4<<20 {
		t.Errorf("Broadcast of two chunks among 4 crowded ranks: lent chunks of %d bytes, want %d", got, 4<<20)
	}
}

// TestScheduleContext: a schedule runs under a twin of the shared
// default-timeout context that tells polling transports not to yield, and
// for a small operation to give the core away; a caller's own context (it
// has a deadline) is passed through unchanged.
func TestScheduleContext(t *testing.T) {
	var o opContext
	defer o.release()
	ctx := o.get(context.Background(), time.Minute, now())
	for _, tc := range []struct {
		bytes int
		shm   bool
		core  bool
	}{
		{8, false, true}, {shortOp, false, true}, {shortOp + 1, false, false}, {64 << 20, false, false},
		{shortOp + 1, true, true}, {shortOpShm, true, true}, {shortOpShm + 1, true, false},
	} {
		s := o.schedule(ctx, opWaits(tc.bytes, tc.shm))
		if transport.Yields(s) {
			t.Errorf("%d bytes: schedule context of the shared context yields", tc.bytes)
		}
		if got := transport.CoreYields(s); got != tc.core || transport.CopyWaits(s) {
			t.Errorf("%d bytes (all shm: %v): schedule context gives the core away: %v, want %v (copy wait %v)", tc.bytes, tc.shm, got, tc.core, transport.CopyWaits(s))
		}
		if dl, _ := s.Deadline(); !dl.Equal(o.deadline.time()) {
			t.Errorf("%d bytes: schedule context deadline %v, want the shared one %v", tc.bytes, dl, o.deadline)
		}
	}
	if s := o.schedule(ctx, waitCopy); !transport.CopyWaits(s) || transport.CoreYields(s) || transport.Yields(s) {
		t.Errorf("copy-wait twin: copy wait %v, core yield %v, yields %v (want true, false, false)", transport.CopyWaits(s), transport.CoreYields(s), transport.Yields(s))
	} else if dl, _ := s.Deadline(); !dl.Equal(o.deadline.time()) {
		t.Errorf("copy-wait twin deadline %v, want the shared one %v", dl, o.deadline)
	}
	// A caller's own context: twins with its deadline and cancellation,
	// made once for a run of operations with the same context.
	own, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ownDL, _ := own.Deadline()
	var first [2]context.Context
	for i := range 3 {
		for j, tc := range []struct {
			bytes int
			core  bool
		}{{8, true}, {64 << 20, false}} {
			s := o.schedule(o.get(own, time.Minute, now()), opWaits(tc.bytes, false))
			if transport.Yields(s) || transport.CoreYields(s) != tc.core {
				t.Errorf("%d bytes, caller's context: yields %v, gives the core away %v (want false, %v)", tc.bytes, transport.Yields(s), transport.CoreYields(s), tc.core)
			}
			if dl, _ := s.Deadline(); !dl.Equal(ownDL) || s.Done() != own.Done() {
				t.Errorf("%d bytes: the twin of the caller's context has deadline %v, want %v, or another Done", tc.bytes, dl, ownDL)
			}
			if i == 0 {
				first[j] = s
			} else if s != first[j] {
				t.Errorf("call %d, %d bytes: the caller's twin was made again for the same context", i, tc.bytes)
			}
		}
	}
	other, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	if dl, _ := o.schedule(o.get(other, time.Minute, now()), waitShort).Deadline(); !dl.Equal(func() time.Time { d, _ := other.Deadline(); return d }()) {
		t.Error("a new caller context kept the twins of the previous one")
	}
	// A context type that cannot be compared gets twins every time.
	odd := uncomparableCtx{Context: own, tags: []string{"x"}}
	if s := o.schedule(odd, waitShort); transport.Yields(s) || s.Done() != own.Done() {
		t.Error("uncomparable caller context")
	}
	if s := o.schedule(uncomparableCtx{Context: own, tags: []string{"y"}}, waitShort); transport.Yields(s) {
		t.Error("second uncomparable caller context")
	}
}

// uncomparableCtx is a context whose dynamic type cannot be compared with
// ==, as a user's struct carrying a slice may be.
type uncomparableCtx struct {
	context.Context
	tags []string
}

// TestAsyncRunsUnwaited: an operation issued with an Async call runs
// without its caller waiting, testing or selecting on anything but Done:
// the worker is woken for it once the issue's grace is over.
func TestAsyncRunsUnwaited(t *testing.T) {
	comms, err := NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		defer c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	xs := [][]float32{{1, 2}, {10, 20}}
	reqs := make([]*Request, 2)
	for r, c := range comms {
		reqs[r] = c.AllReduceAsync(ctx, Slice(xs[r]), Slice(xs[r]), Sum)
	}
	for r, req := range reqs {
		select {
		case <-req.Done():
		case <-ctx.Done():
			t.Fatalf("rank %d: the unwaited AllReduce did not complete", r)
		}
		if err := req.Wait(ctx); err != nil || xs[r][0] != 11 || xs[r][1] != 22 {
			t.Fatalf("rank %d: %v, %v; want [11 22]", r, err, xs[r])
		}
	}
}

// TestOverlapRequest: the schedules of a request run under a context whose
// waits see whether the request's caller computes meanwhile
// (Request.Overlap), said before it starts or while it runs, with their
// twin's other settings; the requests after one that did, and a blocking
// call without a request, do not. Under the shared default-timeout context
// and under a caller's own.
func TestOverlapRequest(t *testing.T) {
	c, ctx := stoppedWorker(t)
	for _, base := range []context.Context{ctx, context.Background()} {
		// probe runs a request marked before it starts (before) or
		// while it runs (during), and returns whether its schedule's
		// context overlapped at its start and at its end.
		probe := func(before, during bool) (start, end bool) {
			var r *Request
			r = c.issue(c.postCall(base, "Probe", transport.Header{}, func(ctx context.Context, p *opPeers) error {
				s := c.worker.op.schedule(ctx, waitShort)
				if transport.Yields(s) || !transport.CoreYields(s) {
					t.Errorf("the schedule's context yields %v, gives the core away %v (want false, true)", transport.Yields(s), transport.CoreYields(s))
				}
				start = transport.OverlapOf(s).Overlapping()
				if during {
					r.Overlap()
				}
				end = transport.OverlapOf(s).Overlapping()
				return nil
			}))
			if before {
				r.Overlap()
			}
			if err := r.Wait(base); err != nil {
				t.Fatal(err)
			}
			r.Release()
			return start, end
		}
		for i, tc := range []struct{ before, during bool }{{false, false}, {true, false}, {false, false}, {false, true}, {true, false}, {false, false}} {
			start, end := probe(tc.before, tc.during)
			if start != tc.before || end != (tc.before || tc.during) {
				t.Errorf("request %d (deadline %v, marked before %v, during %v): overlapped at its start %v, at its end %v", i, base != context.Background(), tc.before, tc.during, start, end)
			}
		}
		// A blocking call without a request (see takeAlone) after a
		// request that overlapped, not released yet.
		r := c.issue(c.postCall(base, "Probe", transport.Header{}, func(context.Context, *opPeers) error { return nil }))
		r.Overlap()
		if err := r.Wait(base); err != nil {
			t.Fatal(err)
		}
		defer r.Release()
		if !c.queue.exec.tryLock(c.queue.alone) {
			t.Fatal("exec is held")
		}
		var s context.Context
		if err := c.runTaken(base, "Probe", algo.OpAllReduce, Float32, Sum, 0, 1, func(ctx context.Context, p *opPeers) error {
			s = c.worker.op.schedule(ctx, waitShort)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if transport.OverlapOf(s).Overlapping() {
			t.Errorf("deadline %v: a blocking call after a request that overlapped runs under an overlap context", base != context.Background())
		}
	}
}

// TestGraceStoppedWhileCallerRuns: an Async call's caller that waits at
// once and runs the request itself stops the worker's wake-up before the
// operation starts, not after it: an operation longer than the grace
// would otherwise have the timer fire while it runs and wake a thread
// for an empty queue (every large call from torch.distributed, which
// issues each operation and then waits for it).
func TestGraceStoppedWhileCallerRuns(t *testing.T) {
	c, ctx := stoppedWorker(t)
	// Long enough that the race detector cannot let it pass between the
	// call and its wait.
	c.queue.graceFor = time.Second
	defer func() { c.queue.graceFor = issueGrace }()
	var armed, ran bool
	r := c.issue(c.postCall(ctx, "Probe", transport.Header{}, func(context.Context, *opPeers) error {
		ran = true
		armed = c.queue.graceArmed.Load()
		return nil
	}))
	if !c.queue.graceArmed.Load() {
		t.Fatal("an Async call queued alone armed no wake-up for the worker")
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("the operation did not run")
	}
	if armed {
		t.Fatal("the worker's wake-up was still armed while the caller ran the operation")
	}
	if n := len(c.queue.wake); n != 0 {
		t.Fatalf("%d wake-ups for the worker after its caller ran the operation", n)
	}
}

// TestPromptCallerGetsLateWakeUp: a caller that waited for promptCalls
// Async requests in a row within promptWait has its next one wait for
// lateGrace, not issueGrace, before the worker is woken (no timer armed
// per call); a wait later than promptWait ends the streak, and the next
// request gets issueGrace again.
func TestPromptCallerGetsLateWakeUp(t *testing.T) {
	c, ctx := stoppedWorker(t)
	q := &c.queue
	// Long enough that a slow machine (the race detector) cannot let
	// either pass between a call and its wait; a prompt wait within
	// 10 ms (a call and its wait were once more than promptWait apart
	// there), still shorter than the late wake-up of 30 ms below.
	q.graceFor, q.lateFor, q.promptFor = time.Second, time.Second, 10*time.Millisecond
	x := []float32{1, 2, 3}
	prompt := func() {
		t.Helper()
		for i := range promptCalls {
			if err := c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum).Wait(ctx); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if n := q.prompt.Load(); n != promptCalls {
			t.Fatalf("%d prompt calls counted, want %d", n, promptCalls)
		}
	}
	prompt()
	q.lateFor = 30 * time.Millisecond
	r := c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum)
	if q.graceArmed.Load() || !q.lateArmed.Load() {
		t.Errorf("a prompt caller's request: grace armed %v, late armed %v; want the late wake-up only",
			q.graceArmed.Load(), q.lateArmed.Load())
	}
	// Not waited for: the worker is woken once the late wake-up fires.
	for end := time.Now().Add(5 * time.Second); len(q.wake) == 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := len(q.wake); n != 1 {
		t.Errorf("%d wake-ups for the worker after the late wake-up, want 1", n)
	}
	<-q.wake
	// Waited for after promptWait (the late wake-up has come and gone):
	// the streak ends.
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := q.prompt.Load(); n != 0 {
		t.Errorf("a wait after the late wake-up left %d prompt calls counted", n)
	}
	r = c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum)
	if !q.graceArmed.Load() || q.lateArmed.Load() {
		t.Errorf("after the streak's end: grace armed %v, late armed %v; want the grace only",
			q.graceArmed.Load(), q.lateArmed.Load())
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The streak builds again; a rewire keeps the grace all the same.
	prompt()
	r = c.issue(c.post(ctx, "Rewire", collHeader(algo.OpRewire, 0, 0, 0, 0), func(context.Context, *opPeers, *opArgs) error { return nil }, opArgs{}))
	if !q.graceArmed.Load() {
		t.Error("a prompt caller's rewire did not arm the grace")
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
