// Package agree decides which ranks of a failed communicator survive into
// the communicator that replaces it. It is a pure state machine: Step takes
// an event (a message received, a rank found unreachable) and returns the
// actions to carry out (messages to send, the outcome); it does no I/O,
// reads no clock and starts no goroutine. The driver owns the connections
// and the failure detector.
//
// The semantics are those of MPI's fault-tolerance proposal (ULFM: revoke,
// agree, shrink; "Post-failure recovery of MPI communication capability:
// Design and rationale", Bland et al.); the protocol is the rotating
// coordinator of "Unreliable Failure Detectors for Reliable Distributed
// Systems" (Chandra and Toueg), its consensus with an eventually strong
// failure detector, reduced to what a shrink needs:
//
//   - Every rank holds a suspect set S: the ranks excluded on purpose, the
//     rank the communicator's failure named, and every coordinator it lost.
//     Its coordinator is the lowest rank not in S; its ballot counts the
//     coordinators it tried.
//   - A rank proposes its S to its coordinator and waits for the decision.
//     If the driver reports the coordinator lost (the connection broke, or
//     the coordinator stopped answering the failure detector), the rank adds
//     it to S, increments its ballot and proposes to the next one; if that is
//     itself, it becomes the coordinator.
//   - A coordinator waits until every rank not in its S has proposed or been
//     reported lost, then decides: the excluded ranks are the union of its S,
//     the proposals' S and the lost ranks; the members are the others. It
//     sends the decision to every rank that proposed to it (the members and
//     the excluded ranks that are still alive: they learn that they are
//     excluded). A rank accepts a decision only from its current coordinator
//     in answer to its current ballot.
//   - A rank proposing to a rank that does not (yet) consider itself the
//     coordinator is held there, not refused: that rank becomes the
//     coordinator once it loses the ranks below it, and counts the proposals
//     it holds.
//   - The bootstrap of the new communicator commits a decision: it completes
//     only if every member joins. If it does not (a member died after the
//     decision, or took another one), the members agree again, starting at
//     the next ballot with what they suspect.
//
// Two choices beyond a plain rotating coordinator, and why:
//
//   - A coordinator does not wait a fixed time for silent ranks. It waits
//     for every rank that the driver's failure detector still finds alive
//     (a process that answers but has not called Shrink yet, because it is
//     still computing, is waited for), so only unreachable ranks are
//     excluded. The detector (the driver's timeout) decides what silent
//     means.
//   - A decision needs a quorum: more than half of the eligible ranks (those
//     not excluded on purpose), or exactly half if the lowest eligible rank
//     is among them (Chandra and Toueg's algorithm also needs a majority
//     alive). Without it a rank that was stopped (SIGSTOP) or cut off
//     while the others decided could, once it resumes, find everyone
//     unreachable and form a communicator of its own. With it, two
//     decisions' member sets always share a rank, and since a rank joins the
//     communicator of one decision only, at most one of them can complete
//     its bootstrap. The cost is that Shrink cannot survive the loss of half
//     the ranks or more at once.
//
// Each lost coordinator adds a rank to S, so a rank runs at most n ballots.
package agree

import (
	"fmt"
	"slices"
)

// Decision is the outcome of an agreement.
type Decision struct {
	// Coordinator is the rank that decided and Ballot the ballot it decided
	// in (its own; together they name the decision).
	Coordinator int
	Ballot      uint32
	// Members are the surviving ranks, ascending (old ranks; a member's new
	// rank is its index). Empty if the coordinator found no quorum.
	Members []int
}

// Has says whether rank r is a member.
func (d *Decision) Has(r int) bool {
	_, ok := slices.BinarySearch(d.Members, r)
	return ok
}

// EventKind says what happened.
type EventKind uint8

// Events.
const (
	// Propose: rank From proposed Suspects at Ballot to this rank.
	Propose EventKind = iota + 1
	// Decide: rank From decided Decision, in answer to this rank's proposal
	// at Ballot.
	Decide
	// Lost: rank From cannot be reached: the connection to or from it broke,
	// or it did not answer the failure detector in time.
	Lost
)

// Event is an input to Step.
type Event struct {
	Kind     EventKind
	From     int
	Ballot   uint32
	Suspects []int
	Decision Decision
}

// ActionKind says what the driver must do.
type ActionKind uint8

// Actions.
const (
	// SendPropose: send Suspects at Ballot to rank To (the new
	// coordinator).
	SendPropose ActionKind = iota + 1
	// Leave: close the connection to rank To, a coordinator this rank
	// left (so that it sees this rank go, if it is alive).
	Leave
	// SendDecide: this rank decided Decision: tell every rank in To of it,
	// answering each one's proposal at the ballot in Ballots.
	SendDecide
	// Done: this rank is a member of Decision.
	Done
	// Excluded: this rank is not in the new communicator, for Reason.
	Excluded
)

// Action is an output of Step.
type Action struct {
	Kind     ActionKind
	To       int
	Ballot   uint32
	Suspects []int
	// SendDecide: the ranks to tell and the ballot each proposed at.
	Recipients []Recipient
	Decision   Decision
	Reason     string
}

// Recipient is a rank a decision goes to and the ballot of its proposal.
type Recipient struct {
	Rank   int
	Ballot uint32
}

type proposal struct {
	ballot   uint32
	suspects []int
}

// Machine is one rank's side of an agreement.
type Machine struct {
	self, n  int
	eligible []int // ranks not excluded on purpose, ascending
	suspect  []bool
	ballot   uint32
	coord    int
	props    map[int]proposal // proposals received, by rank
	lost     []bool           // ranks the driver reported lost
	over     bool
	out      []Action
}

// New returns the machine of rank self of n ranks. excluded are the ranks
// left out on purpose (they take no part), suspects the ranks already known
// to have failed; ballot is the first ballot (1, or one past the last
// ballot of an earlier agreement whose bootstrap failed).
func New(self, n int, excluded, suspects []int, ballot uint32) *Machine {
	m := &Machine{self: self, n: n, suspect: make([]bool, n), lost: make([]bool, n),
		props: map[int]proposal{}, ballot: max(ballot, 1)}
	out := make([]bool, n)
	for _, r := range excluded {
		if r >= 0 && r < n {
			out[r], m.suspect[r] = true, true
		}
	}
	for r := range n {
		if !out[r] {
			m.eligible = append(m.eligible, r)
		}
	}
	for _, r := range suspects {
		if r >= 0 && r < n {
			m.suspect[r] = true
		}
	}
	return m
}

// Ballot returns the rank's current ballot.
func (m *Machine) Ballot() uint32 { return m.ballot }

// Coordinator returns the rank's current coordinator.
func (m *Machine) Coordinator() int { return m.coord }

// Over says whether the agreement ended for this rank (Done or Excluded).
func (m *Machine) Over() bool { return m.over }

// Watched returns the ranks whose liveness the driver must check now: the
// coordinator while this rank waits for its decision; while this rank is
// the coordinator, the ranks it still waits for.
func (m *Machine) Watched() []int {
	if m.over {
		return nil
	}
	if m.coord != m.self {
		return []int{m.coord}
	}
	var w []int
	for r := range m.n {
		if r != m.self && !m.suspect[r] && !m.lost[r] {
			if _, ok := m.props[r]; !ok {
				w = append(w, r)
			}
		}
	}
	return w
}

// Start begins the agreement: the rank proposes to its coordinator, or
// becomes the coordinator.
func (m *Machine) Start() []Action {
	m.out = nil
	if m.suspect[m.self] {
		m.exclude("this rank is among the failed or excluded ranks")
		return m.out
	}
	m.pickCoordinator()
	return m.out
}

// Step advances the machine with ev and returns the actions to carry out.
func (m *Machine) Step(ev Event) []Action {
	m.out = nil
	if m.over || ev.From < 0 || ev.From >= m.n || ev.From == m.self {
		return nil
	}
	switch ev.Kind {
	case Propose:
		m.lost[ev.From] = false
		m.props[ev.From] = proposal{ballot: ev.Ballot, suspects: slices.Clone(ev.Suspects)}
		if m.coord == m.self {
			m.tryDecide()
		}
	case Decide:
		if ev.From != m.coord || ev.Ballot != m.ballot || m.coord == m.self {
			return nil // a stale decision, from a coordinator this rank left
		}
		d := ev.Decision
		if !d.Has(m.self) {
			if len(d.Members) == 0 {
				m.exclude(fmt.Sprintf("coordinator rank %d found no quorum: more than half of the ranks are unreachable", d.Coordinator))
			} else {
				m.exclude(fmt.Sprintf("coordinator rank %d excluded this rank (members %v)", d.Coordinator, d.Members))
			}
			return m.out
		}
		m.over = true
		m.out = append(m.out, Action{Kind: Done, Decision: d})
	case Lost:
		m.lost[ev.From] = true
		delete(m.props, ev.From)
		if ev.From == m.coord {
			m.out = append(m.out, Action{Kind: Leave, To: ev.From})
			m.suspect[ev.From] = true
			m.ballot++
			m.pickCoordinator()
		} else if m.coord == m.self {
			m.tryDecide()
		}
	}
	return m.out
}

// pickCoordinator moves to the lowest rank not suspected, proposing to it
// or, if it is this rank, coordinating.
func (m *Machine) pickCoordinator() {
	m.coord = -1
	for r := range m.n {
		if !m.suspect[r] {
			m.coord = r
			break
		}
	}
	if m.coord == m.self {
		m.tryDecide()
		return
	}
	m.out = append(m.out, Action{Kind: SendPropose, To: m.coord, Ballot: m.ballot, Suspects: m.Suspects()})
}

// Suspects returns the ranks this rank suspects (those excluded on purpose
// among them).
func (m *Machine) Suspects() []int {
	var s []int
	for r, x := range m.suspect {
		if x {
			s = append(s, r)
		}
	}
	return s
}

// tryDecide decides, as the coordinator, once every rank not suspected has
// proposed or been lost.
func (m *Machine) tryDecide() {
	if len(m.Watched()) > 0 {
		return
	}
	out := slices.Clone(m.suspect)
	for r := range m.n {
		if m.lost[r] {
			out[r] = true
		}
	}
	for _, p := range m.props {
		for _, r := range p.suspects {
			if r >= 0 && r < m.n && r != m.self {
				out[r] = true
			}
		}
	}
	d := Decision{Coordinator: m.self, Ballot: m.ballot}
	for r := range m.n {
		if !out[r] {
			d.Members = append(d.Members, r)
		}
	}
	quorum := m.quorate(d.Members)
	if !quorum {
		d.Members = nil
	}
	var to []Recipient
	for r := range m.n {
		if p, ok := m.props[r]; ok {
			to = append(to, Recipient{Rank: r, Ballot: p.ballot})
		}
	}
	m.out = append(m.out, Action{Kind: SendDecide, Recipients: to, Decision: d})
	if !quorum {
		m.exclude(fmt.Sprintf("no quorum: only %d of the %d eligible ranks are reachable", len(m.Reachable()), len(m.eligible)))
		return
	}
	m.over = true
	m.out = append(m.out, Action{Kind: Done, Decision: d})
}

// Reachable returns the ranks the coordinator neither suspects nor lost.
func (m *Machine) Reachable() []int {
	var r []int
	for x := range m.n {
		if !m.suspect[x] && !m.lost[x] {
			r = append(r, x)
		}
	}
	return r
}

// quorate says whether members are more than half of the eligible ranks,
// or exactly half including the lowest of them.
func (m *Machine) quorate(members []int) bool {
	k := 0
	for _, r := range members {
		if _, ok := slices.BinarySearch(m.eligible, r); ok {
			k++
		}
	}
	e := len(m.eligible)
	if 2*k > e {
		return true
	}
	return 2*k == e && e > 0 && len(members) > 0 && members[0] == m.eligible[0]
}

func (m *Machine) exclude(reason string) {
	m.over = true
	m.out = append(m.out, Action{Kind: Excluded, Reason: reason})
}

// excluded returns the ranks left out on purpose.
func (m *Machine) excluded() []int {
	var x []int
	for r := range m.n {
		if _, ok := slices.BinarySearch(m.eligible, r); !ok {
			x = append(x, r)
		}
	}
	return x
}
