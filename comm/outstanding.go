package comm

import (
	"sync"
	"sync/atomic"
)

// outstanding counts the requests issued and not finished, for the waits
// of Close and Shrink (opQueue.idle). Unlike a sync.WaitGroup it may be
// added to while someone waits for it to reach zero: a call issued on
// another goroutine while the communicator closes or shrinks is counted
// (and then refused or run), never a misuse that panics.
//
// A request's start and end cost one atomic add each; the end takes the
// lock only when it brings the count to zero while someone waits.
type outstanding struct {
	n       atomic.Int64
	waiting atomic.Bool
	mu      sync.Mutex
	zero    chan struct{} // closed when n reaches zero; nil when nobody waits
}

// add counts a request issued.
func (o *outstanding) add() { o.n.Add(1) }

// done counts a request finished.
func (o *outstanding) done() {
	// Sequentially consistent, as every sync/atomic operation: either
	// this load sees a waiter's flag, or the waiter's load of n sees this
	// decrement (and does not wait).
	if o.n.Add(-1) != 0 || !o.waiting.Load() {
		return
	}
	o.mu.Lock()
	if o.zero != nil && o.n.Load() == 0 {
		close(o.zero)
		o.zero = nil
		o.waiting.Store(false)
	}
	o.mu.Unlock()
}

// none returns a channel closed once no request is outstanding (already
// closed if none is now).
func (o *outstanding) none() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waiting.Store(true)
	if o.n.Load() == 0 {
		if o.zero == nil {
			o.waiting.Store(false)
		}
		return closed
	}
	if o.zero == nil {
		o.zero = make(chan struct{})
	}
	return o.zero
}
