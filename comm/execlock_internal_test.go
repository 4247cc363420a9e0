package comm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/internal/membarrier"
)

// TestExecLock: one holder at a time, whichever kind; waitFree returns once
// the holder releases, or when its context ends.
func TestExecLock(t *testing.T) {
	var l execLock
	for _, kind := range []uint32{execHeld, execAlone} {
		if !l.tryLock(kind) {
			t.Fatalf("kind %d: a free lock was not taken", kind)
		}
		if l.tryLock(execHeld) || l.tryLock(execAlone) {
			t.Fatalf("kind %d: a held lock was taken again", kind)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if err := l.waitFree(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("kind %d: waitFree on a held lock returned %v", kind, err)
		}
		cancel()
		go func() {
			time.Sleep(5 * time.Millisecond)
			l.release(kind)
		}()
		if err := l.waitFree(context.Background()); err != nil {
			t.Fatalf("kind %d: waitFree: %v", kind, err)
		}
		if l.state.Load() != execFree {
			t.Fatalf("kind %d: waitFree returned with the lock held", kind)
		}
	}
}

// TestMissed: the worker, finding exec held, tries again at once only when
// a call running alone held it with something queued and the barrier shows
// it released; where the barrier fails it has the grace timer wake it.
func TestMissed(t *testing.T) {
	c, _ := stoppedWorker(t)
	q := &c.queue
	defer func() { barrier = membarrier.Private }()
	for _, tc := range []struct {
		name      string
		state     uint32
		queued    bool
		release   bool  // the barrier sees the holder release exec
		fail      error // the barrier's error
		want      bool
		wantGrace bool
	}{
		{name: "free, nothing queued", state: execFree},
		{name: "held by the worker or a helper", state: execHeld, queued: true, release: true},
		{name: "alone, nothing queued", state: execAlone, release: true},
		{name: "alone, queued, still held", state: execAlone, queued: true},
		{name: "alone, queued, released", state: execAlone, queued: true, release: true, want: true},
		{name: "alone, queued, barrier fails", state: execAlone, queued: true, release: true, fail: errors.New("refused"), wantGrace: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q.exec.state.Store(tc.state)
			defer q.exec.state.Store(execFree)
			q.graceFor = time.Hour
			defer func() {
				if q.grace.Stop() {
					q.graceArmed.Store(false)
				}
				q.graceFor = issueGrace
			}()
			if tc.queued {
				q.length.Store(1)
				defer q.length.Store(0)
			}
			called := false
			barrier = func() error {
				called = true
				if tc.release {
					q.exec.release(execAlone)
				}
				return tc.fail
			}
			if got := q.missed(); got != tc.want {
				t.Errorf("missed() = %v, want %v", got, tc.want)
			}
			if wantCall := tc.state == execAlone && tc.queued; called != wantCall {
				t.Errorf("barrier called: %v, want %v", called, wantCall)
			}
			if got := q.graceArmed.Load(); got != tc.wantGrace {
				t.Errorf("grace armed: %v, want %v", got, tc.wantGrace)
			}
		})
	}
}

// TestAloneBesideAsync: blocking calls that run alone on one goroutine and
// pairs of Async requests issued on another, waited for without running
// them (a wait with a context of its own leaves them to the worker, and a
// second request queued behind the first wakes the worker with no timer),
// all complete, and the collectives are numbered 1, 2, ... in the order
// they ran, whichever path ran them.
func TestAloneBesideAsync(t *testing.T) {
	comms, err := NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	c.obs.dir = t.TempDir()
	defer c.Close()
	const rounds = 2000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		x := []float32{1}
		for i := range rounds {
			if err := AllReduce(ctx, c, x, x, Sum); err != nil {
				t.Errorf("blocking call %d: %v", i, err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		// A context other than the requests' own: Wait then leaves
		// them to the worker (see Request.Wait).
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		y, z := []float32{1}, []float32{2}
		for i := range rounds / 2 {
			a := c.AllReduceAsync(ctx, Slice(y), Slice(y), Sum)
			b := c.AllReduceAsync(ctx, Slice(z), Slice(z), Sum)
			for _, r := range []*Request{a, b} {
				if err := r.Wait(wctx); err != nil {
					t.Errorf("Async pair %d: %v", i, err)
					return
				}
			}
		}
	}()
	wg.Wait()
	recs := c.FlightRecord()
	if len(recs) == 0 {
		t.Fatal("empty flight record")
	}
	last := recs[len(recs)-1].Seq
	if want := uint64(2 * rounds); last != want {
		t.Errorf("last sequence number %d, want %d", last, want)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq != recs[i-1].Seq+1 {
			t.Fatalf("record %d has sequence number %d after %d", i, recs[i].Seq, recs[i-1].Seq)
		}
	}
}

// blockingErrCtx is a context whose Err, the first time it is called,
// runs during, then reports cancellation: it lets
// a test act while a call that looks at its context holds exec.
type blockingErrCtx struct {
	context.Context
	once   sync.Once
	during func()
}

func (c *blockingErrCtx) Err() error {
	c.once.Do(c.during)
	return context.Canceled
}

// TestRefusedAloneWakesWorker: a blocking call that takes exec to run
// alone and then does not (its context ended, or the communicator is
// closing) releases it as every holder must, waking the worker for what
// was queued meanwhile. Here a request is issued while the call holds
// exec, and the worker, woken for it, finds exec held and sleeps again;
// released without that wake-up, the request would wait for the next
// call (for ever, were the communicator closing). Both ways of running
// alone are checked: without a request (takeAlone) and with one
// (runAlone).
func TestRefusedAloneWakesWorker(t *testing.T) {
	x := Slice(make([]float32, 2))
	for name, refused := range map[string]func(c *Communicator, ctx context.Context) bool{
		"takeAlone": func(c *Communicator, ctx context.Context) bool { return c.takeAlone(ctx, 8) },
		"runAlone":  func(c *Communicator, ctx context.Context) bool { return c.runAlone(c.postAllReduce(ctx, x, x, Sum)) },
	} {
		t.Run(name, func(t *testing.T) {
			comms, err := NewLocal(1)
			if err != nil {
				t.Fatal(err)
			}
			c := comms[0]
			q := &c.queue
			defer func() {
				q.kick() // a request left queued by a failure would hold Close
				c.Close()
			}()
			var r *Request
			ctx := &blockingErrCtx{Context: context.Background(), during: func() {
				r = c.BarrierAsync(context.Background())
				// The worker takes the wake-up (or its timer's), finds
				// exec held and goes back to sleep.
				deadline := time.Now().Add(2 * time.Second)
				for (len(q.wake) > 0 || q.graceArmed.Load() || q.lateArmed.Load()) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Microsecond)
				}
				time.Sleep(20 * time.Millisecond)
			}}
			if refused(c, ctx) {
				t.Fatal("ran alone with a cancelled context")
			}
			// Not r.Wait, which would run r itself.
			select {
			case <-r.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("the request issued while a refused call held exec still queued after 2s: the worker was not woken")
			}
			if err := r.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
