package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/bounded"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
)

// The verdict of a rewire
//
// Every rank must leave a rewire with the same outcome: all on the target
// topology, or all on the previous one with the same *RewireError. Rank 0
// decides, because it is the rank that switches the fabric.
//
// Steps, while rank 0's switch runs:
//
//  1. every rank opens and checks its new links (see rewire.go) and each
//     rank other than 0 sends its outcome, a status, to rank 0;
//  2. rank 0 waits until its switch has returned (or has been abandoned
//     at its deadline, see startSwitch), then sends one verdict to every
//     other rank, directly: the switch's failure if it failed;
//     otherwise the failure of the lowest rank among those whose outcome
//     it holds, as soon as it holds one; otherwise success once every
//     outcome is in. Before a failure, unless the switch definitely did
//     not happen (it failed with ErrNotSwitched, or there was none), rank
//     0 restores the previous circuits, and the verdict says whether the
//     restore succeeded (RolledBack) and names a failed one in its reason;
//  3. a rank that gets a failure before its own links are ready stops
//     connecting and checking, and still sends its outcome, which rank 0
//     receives and discards, so that no message is left on a connection.
//
// Communication steps: 2 (statuses in, verdict out), of which only the
// verdict follows the switch when the links are ready before it returns,
// as they are when the switch is the slow part. Bytes on the wire: each
// rank other than 0 sends statusSize bytes to rank 0 and receives
// statusSize bytes from it; rank 0 receives and sends (size-1)*statusSize.
// Statuses and verdicts are wire messages (wire.RewireStatus,
// wire.RewireVerdict) padded to statusSize, each naming the digest of its
// sender's target.
//
// A peer that dies or sends something else fails the communicator, as in
// any operation; so do ranks given different targets, with ErrMismatch,
// when rank 0 sees a status, or a rank the verdict, of another target.
//
// The decisions are verdictRoot's and verdictMember's (rewire_state.go);
// decide and awaitVerdict below are their shells.

// outcome is what one rank's new links came to (plan, connect, verify),
// which it sends rank 0 as its status, or rank 0's verdict.
type outcome struct {
	ok       bool
	rank     int // where it failed
	step     string
	reason   string
	applied  bool // verdict: the switch happened
	rollback bool // verdict: rank 0 restored the previous circuits
}

// Sizes of a rewire's messages on the data connections, whose receivers
// expect frames of a known length: wire messages padded to these sizes
// (a status's or verdict's reason is cut to fit).
const (
	statusSize    = 512
	linkCheckSize = 16
)

// frame encodes s as a message of type t (wire.RewireStatus or
// wire.RewireVerdict) about the target of digest.
func (s outcome) frame(t wire.Type, digest uint64) []byte {
	m := wire.Msg{Type: t, Digest: digest, OK: s.ok, Rank: s.rank, Step: s.step, Text: s.reason,
		Applied: s.applied, RolledBack: s.rollback}
	return m.AppendFrame(nil, statusSize)
}

// parseOutcome decodes a frame of type t and returns the outcome it
// carries and the target digest it names.
func parseOutcome(b []byte, t wire.Type) (outcome, uint64, error) {
	m, err := wire.DecodeFrame(b)
	if err == nil && m.Type != t {
		err = fmt.Errorf("a message of type %d", m.Type)
	}
	if err != nil {
		return outcome{}, 0, err
	}
	return outcome{ok: m.OK, rank: m.Rank, step: m.Step, reason: m.Text, applied: m.Applied, rollback: m.RolledBack}, m.Digest, nil
}

// failedOutcome returns the outcome of step failing with err.
func failedOutcome(step string, err error) outcome {
	return outcome{step: step, reason: err.Error()}
}

// Step labels of the rewire's own messages.
const (
	stepStatus  = 2
	stepVerdict = 3
)

// switchRun is rank 0's switch, running beside its links.
type switchRun struct {
	done chan struct{}
	err  error // Apply's; the root's state machine reads it (agSwitched)
}

// startSwitch calls rw.Apply on its own goroutine, bounded by applyContext:
// done is closed when Apply has returned or, at the end of that context,
// when it is abandoned (bounded.Call) with an error whose outcome is
// unknown. When that context has ended already, Apply is not called, and
// the error wraps ErrNotSwitched.
func startSwitch(ctx context.Context, rw Rewire) *switchRun {
	s := &switchRun{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		actx, cancel := applyContext(ctx, rw.ApplyTimeout)
		defer cancel()
		if err := actx.Err(); err != nil {
			s.err = fmt.Errorf("%w: Rewire.Apply not called, no time was left (%w)", ErrNotSwitched, err)
			return
		}
		s.err = bounded.Err(actx, "the switch (Rewire.Apply)", rw.Apply)
	}()
	return s
}

// newLinks is what a rank's new links came to.
type newLinks struct {
	conns           map[int]transport.Conn
	outcome         outcome // plan, connect or verify
	err             error   // the cause, on this rank
	connect, verify time.Duration
}

func (l newLinks) close() {
	for _, conn := range l.conns {
		conn.Close()
	}
}

// peerStatus is a status received by rank 0.
type peerStatus struct {
	rank   int
	s      outcome
	digest uint64
	err    error
}

// decide is rank 0's side, the shell of a verdictRoot: it collects the
// statuses, sends the verdict and returns it with its own links (once they
// have stopped). digest is its target's; planErr is rank 0's own plan
// failure, decisive at once. An error fails the communicator; the caller
// still waits for the switch.
func (c *Communicator) decide(ctx context.Context, p *opPeers, rw Rewire, digest uint64, sw *switchRun, planErr error,
	links <-chan newLinks, stop func()) (newLinks, outcome, error) {
	statuses := make(chan peerStatus, c.size)
	for r := 1; r < c.size; r++ {
		go func() {
			buf := make([]byte, statusSize)
			ps := peerStatus{rank: r, err: p.Recv(ctx, r, stepStatus, buf)}
			if ps.err == nil {
				if ps.s, ps.digest, ps.err = parseOutcome(buf, wire.RewireStatus); ps.err != nil {
					ps.err = &PeerError{Peer: r, Reporter: c.rank, Kind: ErrPeerFailed, Reason: fmt.Sprintf("sent a malformed rewire status: %v", ps.err)}
				}
			}
			statuses <- ps
		}()
	}
	sm := newVerdictRoot(c.size, digest, sw != nil, rw.Rollback != nil, planErr)
	var switched <-chan struct{}
	if sw != nil {
		switched = sw.done
	}
	var own newLinks
	sent := make(chan error, 1)
	restored := make(chan error, 1)
	// The end of the operation's context (the communicator failed, or
	// the deadline passed) fails the agreement at once: a switch abandoned
	// because of it must not be taken for a failed switch whose verdict
	// the other ranks would then keep the communicator on.
	ended := ctx.Done()
	acts := sm.start()
	for {
		for _, a := range acts {
			switch a.Kind {
			case agStop:
				stop()
			case agSend:
				buf := a.Outcome.frame(wire.RewireVerdict, digest)
				go func() { sent <- c.sendAll(ctx, p, stepVerdict, buf) }()
			case agRestore:
				go func() { restored <- c.rollback(ctx, rw) }()
			case agDone:
				v := a.Outcome
				if a.Err == nil {
					// The verdict as the other ranks received it: a long
					// reason is cut to fit its frame, and every rank must
					// return the same error.
					if o, _, err := parseOutcome(v.frame(wire.RewireVerdict, digest), wire.RewireVerdict); err == nil {
						v = o
					}
				}
				return own, v, a.Err
			}
		}
		var ev agreeEvent
		select {
		case <-switched:
			switched = nil
			ev = agreeEvent{Kind: agSwitched, Err: sw.err}
		case own = <-links:
			links = nil
			ev = agreeEvent{Kind: agLinks, Outcome: own.outcome}
		case ps := <-statuses:
			ev = agreeEvent{Kind: agStatus, From: ps.rank, Outcome: ps.s, Digest: ps.digest, Err: ps.err}
		case err := <-sent:
			ev = agreeEvent{Kind: agSent, Err: err}
		case <-ended:
			ended = nil
			var err error = ctx.Err()
			if pe := c.failure.err(); pe != nil {
				err = pe
			}
			ev = agreeEvent{Kind: agFailed, Err: err}
		case err := <-restored:
			if err != nil {
				logx.For(c.log, logx.Rewire).Warn("occl: rewire: restoring the previous circuits failed", "err", err)
			}
			ev = agreeEvent{Kind: agRestored, Err: err}
		}
		acts = sm.step(ev)
	}
}

// sendAll sends buf to every rank but this one, at once, and returns the
// first error.
func (c *Communicator) sendAll(ctx context.Context, p *opPeers, step uint32, buf []byte) error {
	errs := make(chan error, c.size)
	for r := range c.size {
		if r != c.rank {
			go func() { errs <- p.Send(ctx, r, step, buf) }()
		}
	}
	var first error
	for range c.size - 1 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// awaitVerdict is the side of a rank other than 0, the shell of a
// verdictMember: it sends its links' status to rank 0 and returns rank 0's
// verdict with its links (once they have stopped). An error fails the
// communicator.
func (c *Communicator) awaitVerdict(ctx context.Context, p *opPeers, digest uint64, links <-chan newLinks, stop func()) (newLinks, outcome, error) {
	verdicts := make(chan agreeEvent, 1)
	go func() {
		buf := make([]byte, statusSize)
		ev := agreeEvent{Kind: agVerdict, Err: p.Recv(ctx, 0, stepVerdict, buf)}
		if ev.Err == nil {
			if ev.Outcome, ev.Digest, ev.Err = parseOutcome(buf, wire.RewireVerdict); ev.Err != nil {
				ev.Err = &PeerError{Peer: 0, Reporter: c.rank, Kind: ErrPeerFailed, Reason: fmt.Sprintf("sent a malformed rewire verdict: %v", ev.Err)}
			}
		}
		verdicts <- ev
	}()
	sm := newVerdictMember(c.rank, digest)
	var own newLinks
	sent := make(chan error, 1)
	var acts []agreeAction
	for {
		for _, a := range acts {
			switch a.Kind {
			case agStop:
				stop()
			case agSend:
				buf := a.Outcome.frame(wire.RewireStatus, digest)
				go func() { sent <- p.Send(ctx, 0, stepStatus, buf) }()
			case agDone:
				return own, a.Outcome, a.Err
			}
		}
		var ev agreeEvent
		select {
		case own = <-links:
			links = nil
			ev = agreeEvent{Kind: agLinks, Outcome: own.outcome}
		case ev = <-verdicts:
		case err := <-sent:
			ev = agreeEvent{Kind: agSent, Err: err}
		}
		acts = sm.step(ev)
	}
}
