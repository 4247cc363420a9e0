package comm

import (
	"errors"
	"fmt"
)

// The agreement on a rewire's outcome (see rewire_verdict.go) is made by
// two pure state machines, one on rank 0 (verdictRoot, which collects the
// statuses and decides) and one on every other rank (verdictMember, which
// sends its status and takes the verdict). Each takes one event at a time
// and returns the actions that follow; neither does I/O, reads a clock or
// starts a goroutine. decide and awaitVerdict (rewire_verdict.go) are their
// shells: they receive and send the messages, stop this rank's links and
// wait for the switch.

// agreeEventKind says what happened.
type agreeEventKind uint8

const (
	// agLinks: this rank's new links are ready, or failed: Outcome.
	agLinks agreeEventKind = iota + 1
	// agSwitched: rank 0's switch returned Err (nil: the fabric switched).
	agSwitched
	// agStatus: rank From's status, carrying its Outcome, arrived (rank
	// 0), or Err if it could not be received; Digest is the target it was
	// given.
	agStatus
	// agVerdict: rank 0's verdict, Outcome, arrived (other ranks), or Err
	// if it could not be received; Digest is rank 0's target.
	agVerdict
	// agSent: the message of the last agSend action went out, or Err.
	agSent
	// agRestored: rank 0's restore of the previous circuits (agRestore)
	// returned Err (nil: they are back).
	agRestored
	// agFailed: the operation ended before its agreement (Err: the
	// communicator failed, or the operation's deadline passed): rank 0
	// sends no verdict, still waiting for its switch and restoring the
	// previous circuits unless nothing was switched.
	agFailed
)

// agreeEvent is one input of an agreement state machine.
type agreeEvent struct {
	Kind    agreeEventKind
	From    int
	Outcome outcome
	Digest  uint64
	Err     error
}

// agreeActionKind says what the shell must do.
type agreeActionKind uint8

const (
	// agSend: send Outcome, as rank 0's verdict to every other rank or as
	// this rank's status to rank 0, and report agSent.
	agSend agreeActionKind = iota + 1
	// agStop: stop this rank's links (connecting and checking); agLinks
	// follows when they have stopped.
	agStop
	// agDone: the agreement is over: Outcome is the verdict, or Err fails
	// the communicator.
	agDone
	// agRestore: restore the previous circuits (Rewire.Rollback, rank 0
	// only), and report agRestored.
	agRestore
)

// agreeAction is one output of an agreement state machine.
type agreeAction struct {
	Kind    agreeActionKind
	Outcome outcome
	Err     error
}

func (a agreeAction) String() string {
	switch a.Kind {
	case agSend:
		return "send " + a.Outcome.String()
	case agStop:
		return "stop links"
	case agRestore:
		return "restore circuits"
	case agDone:
		if a.Err != nil {
			return "fail: " + a.Err.Error()
		}
		return "done " + a.Outcome.String()
	}
	return fmt.Sprintf("action %d", a.Kind)
}

func (s outcome) String() string {
	if s.ok {
		return fmt.Sprintf("ok applied=%v", s.applied)
	}
	return fmt.Sprintf("%s failed on rank %d: %s applied=%v rollback=%v", s.step, s.rank, s.reason, s.applied, s.rollback)
}

// verdictRoot is rank 0's side. It decides once its switch has returned:
// the switch's failure if it failed; otherwise the failure of the lowest
// rank among those whose status it holds, as soon as it holds one;
// otherwise success once every status is in. A failure whose switch may
// have happened (it succeeded, or failed without wrapping ErrNotSwitched)
// first restores the previous circuits, and the verdict says whether the
// restore succeeded, naming its failure in the reason. After the verdict
// has gone out, it stops its own links and takes the statuses still on
// their way, so that no message is left on a connection. When the
// communicator fails instead, it still waits for the switch and restores
// the previous circuits unless nothing was switched.
type verdictRoot struct {
	size        int
	digest      uint64 // this rank's target
	switching   bool   // the switch runs
	switchErr   error
	applied     bool // the switch happened
	hasRollback bool // rank 0 can restore the previous circuits
	ownDone     bool // this rank's links have stopped
	waiting     int  // statuses not in yet
	got         []bool
	failed      *outcome
	verdict     *outcome // decided
	pending     *outcome // decided, sent once the restore has returned
	restoreSent bool     // agRestore given
	restoring   bool     // and agRestored not in yet
	restoreErr  error
	sending     bool  // the verdict is going out
	sent        bool  // and went
	stopped     bool  // agStop given
	err         error // the communicator fails
	done        bool
	out         []agreeAction
}

// newVerdictRoot starts rank 0's side for size ranks given the target of
// digest; switching says whether a switch runs, hasRollback whether a
// successful one would be undone on failure, planErr is rank 0's plan
// failure, if any.
func newVerdictRoot(size int, digest uint64, switching, hasRollback bool, planErr error) *verdictRoot {
	v := &verdictRoot{size: size, digest: digest, switching: switching, hasRollback: hasRollback, waiting: size - 1, got: make([]bool, size)}
	if planErr != nil {
		v.note(0, failedOutcome("plan", planErr))
	}
	return v
}

// start returns the actions due before any event (a verdict, if there is
// neither a switch nor another rank to wait for).
func (v *verdictRoot) start() []agreeAction {
	v.out = nil
	v.progress()
	return v.out
}

// step applies ev and returns the actions that follow, in order.
func (v *verdictRoot) step(ev agreeEvent) []agreeAction {
	v.out = nil
	if v.done {
		return nil
	}
	switch ev.Kind {
	case agLinks:
		if v.ownDone {
			break
		}
		v.ownDone = true
		v.note(0, ev.Outcome)
	case agSwitched:
		v.switching = false
		v.switchErr, v.applied = ev.Err, ev.Err == nil
	case agStatus:
		if ev.From <= 0 || ev.From >= v.size || v.got[ev.From] {
			break // not a status rank 0 waits for
		}
		v.got[ev.From] = true
		v.waiting--
		switch {
		case ev.Err != nil:
			v.fail(ev.Err)
		case ev.Digest != v.digest:
			v.fail(&PeerError{Peer: -1, Reporter: 0, Kind: ErrMismatch,
				Reason: fmt.Sprintf("rank %d called %s but rank 0 called %s", ev.From, describeRewire(ev.Digest), describeRewire(v.digest))})
		case v.verdict == nil:
			v.note(ev.From, ev.Outcome)
		}
	case agSent:
		v.sending = false
		if ev.Err != nil {
			v.fail(ev.Err)
		} else {
			v.sent = true
		}
	case agRestored:
		if v.restoring {
			v.restoring, v.restoreErr = false, ev.Err
		}
	case agFailed:
		v.fail(ev.Err)
	}
	v.progress()
	return v.out
}

// mayHaveSwitched says, once the switch has returned, whether the fabric
// may hold the target's circuits: the switch happened, or it failed
// without a definite refusal (ErrNotSwitched).
func (v *verdictRoot) mayHaveSwitched() bool {
	return !v.switching && (v.applied || v.switchErr != nil && !errors.Is(v.switchErr, ErrNotSwitched))
}

// restore gives agRestore once, if the previous circuits may need to be
// restored and can be, and says whether it did.
func (v *verdictRoot) restore() bool {
	if v.restoreSent || !v.hasRollback || !v.mayHaveSwitched() {
		return false
	}
	v.restoreSent, v.restoring = true, true
	v.out = append(v.out, agreeAction{Kind: agRestore})
	return true
}

// note keeps the failure of the lowest rank.
func (v *verdictRoot) note(r int, s outcome) {
	if !s.ok && (v.failed == nil || r < v.failed.rank) {
		s.rank = r
		v.failed = &s
	}
}

// fail records the first error that fails the communicator.
func (v *verdictRoot) fail(err error) {
	if v.err == nil {
		v.err = err
	}
}

func (v *verdictRoot) progress() {
	if v.err == nil && v.verdict == nil && v.pending == nil && !v.switching {
		var d *outcome
		switch {
		case v.switchErr != nil:
			f := failedOutcome("apply", v.switchErr)
			d = &f
		case v.failed != nil:
			d = v.failed
		case v.ownDone && v.waiting == 0:
			d = &outcome{ok: true}
		}
		if d != nil {
			d.applied = v.applied
			if !d.ok && v.restore() {
				// The verdict says whether the restore succeeded.
				v.pending = d
			} else {
				v.send(d)
			}
		}
	}
	if v.err == nil && v.pending != nil && !v.restoring {
		d := v.pending
		v.pending = nil
		d.rollback = v.restoreErr == nil
		if v.restoreErr != nil {
			d.reason += "; " + v.restoreErr.Error()
		}
		v.send(d)
	}
	if v.err != nil {
		v.restore()
	}
	if (v.err != nil || v.sent) && !v.sending && !v.stopped {
		v.stopped = true
		v.out = append(v.out, agreeAction{Kind: agStop})
	}
	switch {
	case v.sending || !v.ownDone || v.restoring:
	case v.err != nil && v.switching:
		// The switch's outcome decides whether to restore.
	case v.err != nil:
		v.done = true
		v.out = append(v.out, agreeAction{Kind: agDone, Err: v.err})
	case v.sent && v.waiting == 0:
		v.done = true
		v.out = append(v.out, agreeAction{Kind: agDone, Outcome: *v.verdict})
	}
}

// send gives d, the verdict, to the other ranks.
func (v *verdictRoot) send(d *outcome) {
	v.verdict, v.sending = d, true
	v.out = append(v.out, agreeAction{Kind: agSend, Outcome: *d})
}

// verdictMember is the side of a rank other than 0. It sends its links'
// status to rank 0 once they are ready and waits for the verdict; a
// verdict arriving first (a failure elsewhere) stops its links, and it
// still sends its status, which rank 0 takes and discards.
type verdictMember struct {
	rank    int
	digest  uint64
	own     *outcome // this rank's links' outcome, once stopped
	verdict *outcome
	err     error // the communicator fails
	sending bool
	sent    bool
	stopped bool
	done    bool
	out     []agreeAction
}

func newVerdictMember(rank int, digest uint64) *verdictMember {
	return &verdictMember{rank: rank, digest: digest}
}

// step applies ev and returns the actions that follow, in order.
func (m *verdictMember) step(ev agreeEvent) []agreeAction {
	m.out = nil
	if m.done {
		return nil
	}
	switch ev.Kind {
	case agLinks:
		if m.own != nil {
			break
		}
		s := ev.Outcome
		m.own = &s
		if m.err == nil {
			m.sending = true
			m.out = append(m.out, agreeAction{Kind: agSend, Outcome: s})
		}
	case agVerdict:
		if m.verdict != nil || m.err != nil {
			break // one verdict only
		}
		switch {
		case ev.Err != nil:
			m.fail(ev.Err)
		case ev.Digest != m.digest:
			m.fail(&PeerError{Peer: -1, Reporter: m.rank, Kind: ErrMismatch,
				Reason: fmt.Sprintf("rank 0 called %s but rank %d called %s", describeRewire(ev.Digest), m.rank, describeRewire(m.digest))})
		default:
			s := ev.Outcome
			m.verdict = &s
		}
		if m.own == nil && !m.stopped {
			// A failure elsewhere, before this rank's links were ready.
			m.stopped = true
			m.out = append(m.out, agreeAction{Kind: agStop})
		}
	case agSent:
		m.sending = false
		if ev.Err != nil {
			m.fail(ev.Err)
		} else {
			m.sent = true
		}
	}
	switch {
	case m.sending:
	case m.err != nil && m.own != nil:
		m.done = true
		m.out = append(m.out, agreeAction{Kind: agDone, Err: m.err})
	case m.sent && m.verdict != nil:
		m.done = true
		m.out = append(m.out, agreeAction{Kind: agDone, Outcome: *m.verdict})
	}
	return m.out
}

func (m *verdictMember) fail(err error) {
	if m.err == nil {
		m.err = err
	}
}

// describeRewire names a rewire by its target, as mismatches report it.
func describeRewire(digest uint64) string {
	return fmt.Sprintf("Rewire(target digest %x)", digest)
}
