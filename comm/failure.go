package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
)

// failure is a communicator's failure state: healthy until set, then
// failed for good with the first *PeerError set. Any goroutine may call its
// methods. set runs the action given to newFailure once, with the first
// error, before any set returns, so that a caller of set knows the action
// has run.
type failure struct {
	once     sync.Once
	pe       atomic.Pointer[PeerError]
	ch       chan struct{}
	onFail   func(pe *PeerError)
	beforeIt func(pe *PeerError)
}

// newFailure returns a healthy failure state that runs before, then
// records the failure, then runs onFail, when it fails. before runs while
// the communicator still looks healthy to every operation, so what it does
// (writing the flight record) is done before any operation can return the
// failure.
func newFailure(before, onFail func(pe *PeerError)) *failure {
	return &failure{ch: make(chan struct{}), onFail: onFail, beforeIt: before}
}

// err returns the failure, or nil while the communicator is healthy.
func (f *failure) err() *PeerError { return f.pe.Load() }

// done returns a channel closed once the communicator has failed.
func (f *failure) done() <-chan struct{} { return f.ch }

// set records pe as the failure unless one is recorded already (the first
// one wins) and runs the failure action with it.
func (f *failure) set(pe *PeerError) {
	f.once.Do(func() {
		if f.beforeIt != nil {
			f.beforeIt(pe)
		}
		f.pe.Store(pe)
		close(f.ch)
		f.onFail(pe)
	})
}

// fail records the communicator's failure (the first one wins), closes its
// connections so that blocked operations return, and makes every later
// operation fail with the same error.
func (c *Communicator) fail(pe *PeerError) { c.failure.set(pe) }

// onFail is the failure action: it logs the failure, closes the
// connections and writes the timeline, if one is recorded.
func (c *Communicator) onFail(pe *PeerError) {
	logx.For(c.log, logx.Coll).Warn("occl: communicator failed", "err", pe)
	c.links.closeCurrent()
	c.writeTrace()
}

// Lost-link grace: how long a rank that lost a connection waits for the
// control plane to say which rank actually failed before it blames the peer
// at the other end of the link.
const lostGrace = 2 * time.Second

// classify turns the error of failed operation o into the communicator's
// failure, shares it with every rank and returns it.
func (c *Communicator) classify(ctx context.Context, o opName, err error, elapsed time.Duration) *PeerError {
	if pe := c.failure.err(); pe != nil {
		return pe
	}
	var le *linkError
	peer := -1
	if errors.As(err, &le) {
		peer = le.peer
	}
	var me *transport.MismatchError
	var fe *transport.FrameError
	var pe *PeerError
	known, isPeerErr := err.(*PeerError)
	switch {
	case isPeerErr:
		// The operation itself found who failed (a rewire's agreement).
		pe = known
	case errors.As(err, &me):
		pe = &PeerError{Peer: -1, Reporter: c.rank, Kind: ErrMismatch, Reason: describeMismatch(c.rank, peer, me)}
	case errors.As(err, &fe):
		pe = &PeerError{Peer: peer, Reporter: c.rank, Kind: ErrPeerFailed, Reason: fmt.Sprintf("sent a %v", fe)}
	case errors.Is(err, context.DeadlineExceeded):
		what := "while"
		if peer >= 0 {
			what = fmt.Sprintf("waiting for rank %d in", peer)
		}
		pe = &PeerError{Peer: -1, Reporter: c.rank, Kind: ErrTimeout,
			Reason: fmt.Sprintf("rank %d timed out after %v %s %s (seq %d)", c.rank, elapsed.Round(time.Millisecond), what, o.name, o.seq)}
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// The caller's context was cancelled. A cancellation with the
		// caller's context alive is a schedule stopping its other halves
		// after a failure, and is classified below by the link it names.
		pe = &PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted,
			Reason: fmt.Sprintf("cancelled %s (seq %d) while it was running", o.name, o.seq)}
	case peer >= 0:
		// A broken link. The rank at the other end may have died, or may
		// have closed its connections because it learnt of a failure we
		// have not heard of yet: ask the control plane and wait briefly
		// for its verdict before blaming the peer.
		c.ctrl.lost(peer, err)
		t := time.NewTimer(lostGrace)
		defer t.Stop()
		select {
		case <-c.failure.done():
			return c.failure.err()
		case <-t.C:
		}
		pe = &PeerError{Peer: peer, Reporter: c.rank, Kind: ErrPeerFailed, Reason: err.Error()}
	default:
		pe = &PeerError{Peer: -1, Reporter: c.rank, Kind: ErrPeerFailed, Reason: err.Error()}
	}
	c.ctrl.report(pe)
	c.fail(pe)
	return c.failure.err()
}

// linkError is an I/O error on the connection to one peer.
type linkError struct {
	peer int
	dir  string
	step uint32
	err  error
}

func (e *linkError) Error() string {
	prep := "from"
	if e.dir == "send" {
		prep = "to"
	}
	return fmt.Sprintf("%s step %d %s rank %d: %v", e.dir, e.step, prep, e.peer, e.err)
}

func (e *linkError) Unwrap() error { return e.err }

// describeMismatch explains a frame that did not match what this rank
// expected from peer.
func describeMismatch(rank, peer int, me *transport.MismatchError) string {
	g, w := &me.Got, &me.Want
	who := "a peer"
	if peer >= 0 {
		who = fmt.Sprintf("rank %d", peer)
	}
	switch {
	case g.Kind == transport.KindCollective && w.Kind == transport.KindCollective && g.Seq == w.Seq && g.Epoch == w.Epoch:
		if got, want := describeOp(g), describeOp(w); got != want {
			return fmt.Sprintf("at seq %d %s called %s but rank %d called %s", w.Seq, who, got, rank, want)
		}
		if g.Step == w.Step && g.Len == w.Len {
			break // a field the description leaves out: the header's own words below
		}
		// The same call on both ranks, cut into different messages.
		why := ""
		if op := algo.Collective(w.Op); op == algo.OpAllToAll || op == algo.OpAllToAllV {
			why = " (a block whose size the two ranks disagree on, or the operation in place on one of them only)"
		}
		return fmt.Sprintf("at seq %d in %s %s sent step %d of %d bytes where rank %d expected step %d of %d bytes%s",
			w.Seq, describeOp(w), who, g.Step, g.Len, rank, w.Step, w.Len, why)
	case g.Kind == transport.KindP2P && w.Kind == transport.KindP2P:
		return fmt.Sprintf("%s sent %s but rank %d expected to receive %s", who, describeOp(g), rank, describeOp(w))
	}
	return fmt.Sprintf("rank %d received from %s: %v", rank, who, me)
}

func describeOp(h *transport.Header) string {
	if h.Kind == transport.KindP2P {
		return fmt.Sprintf("%d %s elements (message %d)", h.Count, algo.DType(h.DType), h.Seq)
	}
	return describeFingerprint(fingerprint(h))
}
