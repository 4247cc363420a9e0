package comm

import (
	"fmt"
	"time"

	"github.com/occl/occl/comm/internal/wire"
)

// The decisions of the TCP control plane (see control.go) are made by two
// state machines, one for the root (rank 0) and one for every rank's end,
// in the manner of a raft node's Step: each takes one event at a time (a
// message arrived, a connection dropped, a timer fired, something happened
// on this rank), changes its state and returns the actions that follow
// (send a message, fail the communicator, arm a timer). They do no I/O,
// read no clock (the time comes with the event) and start no goroutine:
// the shells in control.go own the sockets, the goroutines and the timers,
// feed events in and carry actions out.

// ctrlEventKind says what happened.
type ctrlEventKind uint8

const (
	// evRecv: Msg arrived from rank From (on a member: from the root).
	evRecv ctrlEventKind = iota + 1
	// evConnLost: the control connection to From broke with Err.
	evConnLost
	// evTick: the heartbeat interval passed.
	evTick
	// evTimer: the timer armed as Timer fired.
	evTimer
	// evReport: this rank detected Fail (member only).
	evReport
	// evLinkLost: this rank's link to Peer broke with Err (member only).
	evLinkLost
	// evStalled: this rank's collective Seq runs long (member only).
	evStalled
	// evClose: this rank leaves the control plane; Clean says the
	// communicator is healthy.
	evClose
)

// ctrlEvent is one input of a control-plane state machine. Now is the time
// it happened, for the events that compare times.
type ctrlEvent struct {
	Kind  ctrlEventKind
	From  int
	Msg   wire.Msg
	Err   string
	Now   time.Time
	Timer int
	Fail  *PeerError
	Peer  int
	Seq   uint64
	Clean bool
}

// ctrlActionKind says what the shell must do.
type ctrlActionKind uint8

const (
	// actSend: send Msg to rank To (a member sends to the root only).
	actSend ctrlActionKind = iota + 1
	// actDeclare: the root decided Msg, a verdict, which actSend actions
	// of the same step deliver; the shell logs it.
	actDeclare
	// actFail: fail this rank's communicator with Fail.
	actFail
	// actArm: deliver an evTimer for Timer After from now.
	actArm
	// actAnswer: answer the probe of Seq (wire.ProbeAnswer).
	actAnswer
	// actAllLeft: every rank has left or gone (root only).
	actAllLeft
	// actLeave: this rank leaves; the shell tears its end down.
	actLeave
	// actStallReport: log the root's report Msg on the stall of Seq.
	actStallReport
	// actVerdict: the root's verdict arrived (member only; see
	// ctrlMember.awaitsVerdict).
	actVerdict
)

// ctrlAction is one output of a control-plane state machine.
type ctrlAction struct {
	Kind  ctrlActionKind
	To    int
	Msg   wire.Msg
	Fail  *PeerError
	Timer int
	After time.Duration
	Seq   uint64
}

func (a ctrlAction) String() string {
	switch a.Kind {
	case actSend:
		return fmt.Sprintf("send %d %s", a.To, describeMsg(&a.Msg))
	case actDeclare:
		return "declare " + describeMsg(&a.Msg)
	case actFail:
		return fmt.Sprintf("fail peer=%d reporter=%d %v: %s", a.Fail.Peer, a.Fail.Reporter, a.Fail.Kind, a.Fail.Reason)
	case actArm:
		return fmt.Sprintf("arm %d %v", a.Timer, a.After)
	case actAnswer:
		return fmt.Sprintf("answer %d", a.Seq)
	case actAllLeft:
		return "all left"
	case actLeave:
		return "leave"
	case actStallReport:
		return fmt.Sprintf("stall report %d: %s", a.Seq, a.Msg.Text)
	case actVerdict:
		return "verdict"
	}
	return fmt.Sprintf("action %d", a.Kind)
}

// describeMsg names a control message and the fields that matter to the
// control plane.
func describeMsg(m *wire.Msg) string {
	switch m.Type {
	case wire.Heartbeat:
		return "heartbeat"
	case wire.Goodbye:
		return "goodbye"
	case wire.Shutdown:
		return "shutdown"
	case wire.Report, wire.Verdict:
		what := "report"
		if m.Type == wire.Verdict {
			what = "verdict"
		}
		return fmt.Sprintf("%s kind=%d peer=%d reporter=%d: %s", what, m.Kind, m.Peer, m.Reporter, m.Text)
	case wire.Stalled:
		return fmt.Sprintf("stalled %d", m.Seq)
	case wire.Probe:
		return fmt.Sprintf("probe %d", m.Seq)
	case wire.ProbeAnswer:
		return fmt.Sprintf("probe answer %d state=%d op=%+v", m.Seq, m.State, m.Op)
	case wire.StallReport:
		return fmt.Sprintf("stall report %d", m.Seq)
	}
	return fmt.Sprintf("message type %d", m.Type)
}

// ---- the root ----

// ctrlRoot is the root's state: it turns the first failure it learns of
// into the verdict every rank receives.
type ctrlRoot struct {
	size         int
	hbTimeout    time.Duration // silence after which a rank has failed
	probeTimeout time.Duration // how long a probe waits for answers
	lostGrace    time.Duration // wait before blaming a broken link
	heard        []time.Time   // last message from each rank
	left         []bool        // said goodbye
	gone         []bool        // connection broken
	verdict      *wire.Msg     // the first verdict
	closing      bool
	allLeft      bool // actAllLeft given
	probe        *probeRound
	reported     uint64           // the last collective a stall report was sent for
	lost         map[int]wire.Msg // armed timer -> the verdict it declares
	lostBy       map[int]wire.Msg // reporter -> the verdict its first broken link would declare
	nextTimer    int
	out          []ctrlAction
}

// probeRound collects the answers to one probe.
type probeRound struct {
	seq     uint64
	timer   int
	answers []wire.Msg
	missing int
}

// newCtrlRoot returns the root of size ranks, every one heard at now.
func newCtrlRoot(size int, now time.Time, hbTimeout, lostGrace time.Duration) *ctrlRoot {
	s := &ctrlRoot{
		size: size, hbTimeout: hbTimeout, probeTimeout: min(2*time.Second, hbTimeout), lostGrace: lostGrace,
		heard: make([]time.Time, size), left: make([]bool, size), gone: make([]bool, size),
		lost: map[int]wire.Msg{}, lostBy: map[int]wire.Msg{},
	}
	for r := range s.heard {
		s.heard[r] = now
	}
	return s
}

// step applies ev and returns the actions that follow, in order.
func (s *ctrlRoot) step(ev ctrlEvent) []ctrlAction {
	s.out = nil
	switch ev.Kind {
	case evRecv:
		s.recv(ev.From, &ev.Msg, ev.Now)
	case evConnLost:
		s.gone[ev.From] = true
		s.checkAllLeft()
		if !s.left[ev.From] {
			s.declare(wire.Msg{Type: wire.Verdict, Kind: kindPeerFailed, Peer: ev.From, Reporter: 0,
				Text: fmt.Sprintf("process exited or closed its connection without leaving (%s)", ev.Err)})
		}
	case evTick:
		for r := range s.size {
			if !s.live(r) {
				continue
			}
			if silent := ev.Now.Sub(s.heard[r]); silent > s.hbTimeout {
				s.declare(wire.Msg{Type: wire.Verdict, Kind: kindPeerFailed, Peer: r, Reporter: 0,
					Text: fmt.Sprintf("no heartbeat for %v", silent.Round(time.Millisecond))})
				continue
			}
			s.send(r, wire.Msg{Type: wire.Heartbeat})
		}
	case evTimer:
		if v, ok := s.lost[ev.Timer]; ok {
			delete(s.lost, ev.Timer)
			s.declare(s.upstream(v))
		} else if s.probe != nil && s.probe.timer == ev.Timer {
			s.endProbe()
		}
	case evClose:
		if !s.closing {
			s.closing = true
			for r := range s.size {
				if !s.gone[r] && !s.left[r] {
					s.send(r, wire.Msg{Type: wire.Shutdown})
				}
			}
		}
	}
	return s.out
}

// live says whether rank r still takes part: connected, not left, and the
// root not closing.
func (s *ctrlRoot) live(r int) bool { return !s.gone[r] && !s.left[r] && !s.closing }

func (s *ctrlRoot) send(r int, m wire.Msg) {
	s.out = append(s.out, ctrlAction{Kind: actSend, To: r, Msg: m})
}

func (s *ctrlRoot) arm(after time.Duration) int {
	s.nextTimer++
	s.out = append(s.out, ctrlAction{Kind: actArm, Timer: s.nextTimer, After: after})
	return s.nextTimer
}

func (s *ctrlRoot) recv(from int, m *wire.Msg, now time.Time) {
	s.heard[from] = now
	switch m.Type {
	case wire.Goodbye:
		s.left[from] = true
		s.checkAllLeft()
	case wire.Report:
		if m.Kind != kindLost {
			s.declare(wire.Msg{Type: wire.Verdict, Kind: m.Kind, Peer: m.Peer, Reporter: from, Text: m.Text})
			return
		}
		// A broken link: if the rank at the other end died, its control
		// connection drops too, and that verdict is the precise one. Give
		// it a moment to arrive before blaming the link.
		if s.verdict == nil && !s.closing {
			v := wire.Msg{Type: wire.Verdict, Kind: kindPeerFailed, Peer: m.Peer, Reporter: from,
				Text: fmt.Sprintf("rank %d lost its connection to it: %s", from, m.Text)}
			s.lost[s.arm(s.lostGrace)] = v
			if _, ok := s.lostBy[from]; !ok {
				s.lostBy[from] = v
			}
		}
	case wire.Stalled:
		s.startProbe(m.Seq)
	case wire.ProbeAnswer:
		pr := s.probe
		if pr == nil || pr.seq != m.Seq || pr.answers[from].Type == wire.ProbeAnswer {
			return // late, stray or repeated
		}
		pr.answers[from] = *m
		if pr.missing--; pr.missing == 0 {
			s.endProbe()
		}
	}
}

// upstream returns the verdict to declare for v, a broken link's: if the
// rank v blames reported a broken link of its own, it is alive, and its
// link to v's reporter most likely broke because it stopped its operation
// after losing that other link (a rank whose operation fails gives up the
// transfers it has under way, and its peers see their links to it break).
// The blame then follows the reports to the rank whose loss started them:
// the first blamed rank that reported nothing. In a cycle (two ranks
// reporting each other, a link broken between them) v stands.
func (s *ctrlRoot) upstream(v wire.Msg) wire.Msg {
	seen := map[int]bool{v.Reporter: true, v.Peer: true}
	for {
		w, ok := s.lostBy[v.Peer]
		if !ok || seen[w.Peer] {
			return v
		}
		seen[w.Peer] = true
		v = w
	}
}

// checkAllLeft gives actAllLeft once every rank has left or gone.
func (s *ctrlRoot) checkAllLeft() {
	if s.allLeft {
		return
	}
	for r := range s.size {
		if !s.left[r] && !s.gone[r] {
			return
		}
	}
	s.allLeft = true
	s.out = append(s.out, ctrlAction{Kind: actAllLeft})
}

// startProbe asks every rank about seq, unless a probe is running, and
// waits for the answers at most probeTimeout.
func (s *ctrlRoot) startProbe(seq uint64) {
	if s.probe != nil || s.verdict != nil || s.closing {
		return
	}
	pr := &probeRound{seq: seq, answers: make([]wire.Msg, s.size)}
	for r := range s.size {
		if s.live(r) {
			pr.missing++
			s.send(r, wire.Msg{Type: wire.Probe, Seq: seq})
		}
	}
	pr.timer = s.arm(s.probeTimeout)
	s.probe = pr
}

// endProbe judges the answers in: ranks that called different collectives
// fail the communicator with a mismatch.
func (s *ctrlRoot) endProbe() {
	pr := s.probe
	s.probe = nil
	if pe := judge(pr.seq, pr.answers); pe != nil {
		s.declare(wire.Msg{Type: wire.Verdict, Kind: kindMismatch, Peer: pe.Peer, Reporter: pe.Reporter, Text: pe.Reason})
		return
	}
	if s.verdict != nil || s.closing {
		return
	}
	if pr.seq <= s.reported {
		// Reported already: the other ranks' watchdogs fire too.
		return
	}
	if text := describeStall(pr.seq, pr.answers); text != "" {
		s.reported = pr.seq
		report := wire.Msg{Type: wire.StallReport, Seq: pr.seq, Text: text}
		for r := range s.size {
			if !s.gone[r] && !s.left[r] {
				s.send(r, report)
			}
		}
	}
}

// declare sends the first verdict to every rank still connected; later
// ones, and any once the root is closing, are dropped.
func (s *ctrlRoot) declare(v wire.Msg) {
	if s.verdict != nil || s.closing {
		return
	}
	s.verdict = &v
	s.out = append(s.out, ctrlAction{Kind: actDeclare, Msg: v})
	for r := range s.size {
		if !s.gone[r] && !s.left[r] {
			s.send(r, v)
		}
	}
}

// ---- every rank's end ----

// ctrlMember is one rank's end of the control plane: it forwards what the
// rank detects to the root and fails the communicator with the root's
// verdict, or blames the root when it goes silent or away.
type ctrlMember struct {
	rank      int
	hbTimeout time.Duration
	heard     time.Time // last message from the root
	leaving   bool      // this rank is closing
	shutdown  bool      // the root closed cleanly
	failed    bool      // actFail given
	reported  bool      // this rank reported a failure to the root
	verdict   bool      // the root's verdict arrived
	out       []ctrlAction
}

// awaitsVerdict says whether this rank reported a failure whose verdict
// has not arrived. On rank 0, whose process runs the root, closing then
// would take the verdict to the others with it: the root writes its own
// rank's copy of a verdict last, so the shell waits for it first (see
// ctrlClient.close).
func (m *ctrlMember) awaitsVerdict() bool { return m.reported && !m.verdict }

func newCtrlMember(rank int, now time.Time, hbTimeout time.Duration) *ctrlMember {
	return &ctrlMember{rank: rank, hbTimeout: hbTimeout, heard: now}
}

// step applies ev and returns the actions that follow, in order.
func (m *ctrlMember) step(ev ctrlEvent) []ctrlAction {
	m.out = nil
	switch ev.Kind {
	case evRecv:
		m.heard = ev.Now
		switch ev.Msg.Type {
		case wire.Verdict:
			v := &ev.Msg
			m.fail(&PeerError{Peer: v.Peer, Reporter: v.Reporter, Kind: errOfKind(v.Kind), Reason: v.Text})
			if !m.verdict {
				m.verdict = true
				m.out = append(m.out, ctrlAction{Kind: actVerdict})
			}
		case wire.Shutdown:
			m.shutdown = true
		case wire.Probe:
			m.out = append(m.out, ctrlAction{Kind: actAnswer, Seq: ev.Msg.Seq})
		case wire.StallReport:
			if !m.failed {
				m.out = append(m.out, ctrlAction{Kind: actStallReport, Seq: ev.Msg.Seq, Msg: ev.Msg})
			}
		}
	case evConnLost:
		if !m.leaving && !m.shutdown {
			m.fail(&PeerError{Peer: 0, Reporter: m.rank, Kind: ErrPeerFailed,
				Reason: fmt.Sprintf("lost the control connection to rank 0: %s", ev.Err)})
		}
	case evTick:
		if m.shutdown {
			break
		}
		m.send(wire.Msg{Type: wire.Heartbeat})
		if silent := ev.Now.Sub(m.heard); silent > m.hbTimeout {
			m.fail(&PeerError{Peer: 0, Reporter: m.rank, Kind: ErrPeerFailed,
				Reason: fmt.Sprintf("no heartbeat from rank 0 (the control root) for %v", silent.Round(time.Millisecond))})
		}
	case evReport:
		pe := ev.Fail
		m.reported = true
		m.send(wire.Msg{Type: wire.Report, Kind: kindOf(pe.Kind), Peer: pe.Peer, Reporter: pe.Reporter, Text: pe.Reason})
	case evLinkLost:
		m.send(wire.Msg{Type: wire.Report, Kind: kindLost, Peer: ev.Peer, Reporter: m.rank, Text: ev.Err})
	case evStalled:
		m.send(wire.Msg{Type: wire.Stalled, Seq: ev.Seq})
	case evClose:
		if m.leaving {
			break
		}
		m.leaving = true
		if ev.Clean {
			m.send(wire.Msg{Type: wire.Goodbye})
		}
		m.out = append(m.out, ctrlAction{Kind: actLeave})
	}
	return m.out
}

func (m *ctrlMember) send(msg wire.Msg) {
	m.out = append(m.out, ctrlAction{Kind: actSend, To: 0, Msg: msg})
}

// fail gives actFail for the first failure this end learns of.
func (m *ctrlMember) fail(pe *PeerError) {
	if m.failed {
		return
	}
	m.failed = true
	m.out = append(m.out, ctrlAction{Kind: actFail, Fail: pe})
}
