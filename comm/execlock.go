package comm

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/occl/occl/internal/membarrier"
	"github.com/occl/occl/internal/plain"
)

// execLock is the queue's exec, held by whoever runs requests: the worker,
// a caller running the request it is about to block on (help), or a
// blocking call running its request alone (runAlone). Taking it is one
// compare-and-swap. Releasing it is a store: an atomic one (a locked
// instruction, and so a full barrier) for the worker and the helpers, and
// a plain one for a blocking call that ran alone, where this process can
// issue private barriers (membarrier.PrivateReady). That release ends
// every blocking call, just after the operation's last stores into the
// shared rings; a locked instruction there waits for those stores to
// leave the core.
//
// Whoever releases exec then looks at the queue and wakes the worker if
// anything is queued: a push that found exec held (the worker, woken,
// failed to take it) is left to the holder. After a plain release that
// look can be served before the store is seen, so the holder may see an
// empty queue while the worker, woken by the push, still saw exec held.
// The worker therefore, when it finds exec held by a call running alone
// and something queued, issues a private barrier and looks at exec again
// (see opQueue.missed): the holder's release was either seen by that
// look, and the worker takes exec, or comes after the barrier, and then
// the holder's look sees the push and wakes it. The worker pays the
// barrier only when its wake-up meets a blocking call running alone,
// which takes two goroutines issuing on one communicator at once. The
// barrier interrupts every core running a thread of the process, the
// holder's included, so the helpers keep the atomic release: a caller
// that issues several Async requests before waiting runs the first while
// the others are queued and the worker is woken for them (issue), and
// with a plain release would take that interrupt on each of them.
type execLock struct {
	state atomic.Uint32
}

// execLock states.
const (
	execFree  uint32 = iota
	execHeld         // released with an atomic store
	execAlone        // held by a call running alone, released with a plain store
)

// tryLock takes the lock as kind (execHeld or execAlone) if it is free,
// and reports whether it did.
func (l *execLock) tryLock(kind uint32) bool {
	return l.state.Load() == execFree && l.state.CompareAndSwap(execFree, kind)
}

// unlock releases the lock with an atomic store.
func (l *execLock) unlock() { l.state.Store(execFree) }

// release releases a lock taken as kind: taken as execAlone, with a plain
// store.
func (l *execLock) release(kind uint32) {
	if kind == execAlone {
		plain.Store32(&l.state, execFree)
	} else {
		l.unlock()
	}
}

// waitFree waits until the lock is free, polling (it is held for at most
// an operation, and only shutdown waits for it), or until ctx ends.
func (l *execLock) waitFree(ctx context.Context) error {
	for d := time.Microsecond; l.state.Load() != execFree; d = min(2*d, time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(d)
	}
	return nil
}

// barrier is the worker's private barrier (see opQueue.missed),
// membarrier.Private; tests replace it.
var barrier = membarrier.Private

// aloneKind is the kind runAlone takes exec as: execAlone where this
// process can issue private barriers, which the worker needs to see a
// plain release, else execHeld.
func aloneKind() uint32 {
	if membarrier.PrivateReady() {
		return execAlone
	}
	return execHeld
}
