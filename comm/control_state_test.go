package comm

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm/internal/wire"
)

// ctrlNet runs a control plane's state machines over an in-memory network
// with a simulated clock: the root, one member per rank (rank 0's member
// included), messages in flight in order, and armed timers. Every step is
// explicit, so an interleaving is a script.
type ctrlNet struct {
	t       *testing.T
	now     time.Time
	root    *ctrlRoot
	members []*ctrlMember
	inbox   []ctrlPacket // in flight, in order
	held    map[int]bool // rank whose messages (both ways) wait in inbox
	dropped map[int]bool // rank whose messages (both ways) are lost
	dead    map[int]bool // member that takes no more events
	rootOff bool         // the root takes no more events
	dup     bool         // every message arrives twice
	timers  map[int]time.Time
	fails   []*PeerError // each member's first actFail
	nFails  []int        // how many actFail each member gave
	nVerds  []int        // how many actVerdict each member gave
	decls   []wire.Msg   // the root's verdicts
	left    []bool       // members that gave actLeave
	allLeft int          // actAllLeft given
	probed  map[int]wire.Fingerprint
	late    map[int]bool     // ranks that answer probes as not there yet
	stalls  map[int][]string // each member's stall reports
}

// ctrlPacket is a control message in flight: up (member From to the root)
// or down (the root to member To).
type ctrlPacket struct {
	up       bool
	from, to int
	msg      wire.Msg
}

const (
	testHB      = 100 * time.Millisecond
	testHBTO    = time.Second
	testLostTO  = 500 * time.Millisecond
	testProbeTO = time.Second // min(2s, testHBTO)
)

func newCtrlNet(t *testing.T, size int) *ctrlNet {
	n := &ctrlNet{
		t: t, now: time.Unix(1000, 0), held: map[int]bool{}, dropped: map[int]bool{}, dead: map[int]bool{},
		timers: map[int]time.Time{}, fails: make([]*PeerError, size), nFails: make([]int, size), nVerds: make([]int, size),
		left: make([]bool, size), probed: map[int]wire.Fingerprint{},
		late: map[int]bool{}, stalls: map[int][]string{},
	}
	n.root = newCtrlRoot(size, n.now, testHBTO, testLostTO)
	for r := range size {
		n.members = append(n.members, newCtrlMember(r, n.now, testHBTO))
	}
	return n
}

// member gives ev to rank r's end and carries out its actions.
func (n *ctrlNet) member(r int, ev ctrlEvent) {
	if n.dead[r] {
		return
	}
	ev.Now = n.now
	for _, a := range n.members[r].step(ev) {
		switch a.Kind {
		case actSend:
			n.inbox = append(n.inbox, ctrlPacket{up: true, from: r, msg: a.Msg})
		case actFail:
			if n.fails[r] == nil {
				n.fails[r] = a.Fail
			}
			n.nFails[r]++
		case actAnswer:
			// Ranks agree on every collective unless a test says
			// otherwise in probed.
			st := wire.Msg{Type: wire.ProbeAnswer, Seq: a.Seq, State: reached, Op: wire.Fingerprint{Op: 1, Count: 8},
				Current: a.Seq, Done: a.Seq - 1, Waiting: -1}
			if fp, ok := n.probed[r]; ok {
				st.Op = fp
			}
			if n.late[r] {
				st.State, st.Op, st.Current = notReached, wire.Fingerprint{}, 0
			}
			n.inbox = append(n.inbox, ctrlPacket{up: true, from: r, msg: st})
		case actLeave:
			n.left[r] = true
		case actStallReport:
			n.stalls[r] = append(n.stalls[r], a.Msg.Text)
		case actVerdict:
			n.nVerds[r]++
		default:
			n.t.Fatalf("member %d: unexpected action %v", r, a)
		}
	}
}

// rootEvent gives ev to the root and carries out its actions.
func (n *ctrlNet) rootEvent(ev ctrlEvent) {
	if n.rootOff {
		return
	}
	ev.Now = n.now
	for _, a := range n.root.step(ev) {
		switch a.Kind {
		case actSend:
			n.inbox = append(n.inbox, ctrlPacket{to: a.To, msg: a.Msg})
		case actDeclare:
			n.decls = append(n.decls, a.Msg)
		case actArm:
			n.timers[a.Timer] = n.now.Add(a.After)
		case actAllLeft:
			n.allLeft++
		default:
			n.t.Fatalf("root: unexpected action %v", a)
		}
	}
}

func (n *ctrlNet) rank(p ctrlPacket) int {
	if p.up {
		return p.from
	}
	return p.to
}

// flush delivers every message in flight, and those they cause, except
// those of held ranks.
func (n *ctrlNet) flush() {
	for {
		i := 0
		for i < len(n.inbox) && n.held[n.rank(n.inbox[i])] {
			i++
		}
		if i == len(n.inbox) {
			return
		}
		p := n.inbox[i]
		n.inbox = append(n.inbox[:i:i], n.inbox[i+1:]...)
		if n.dropped[n.rank(p)] {
			continue
		}
		for range 1 + btoi(n.dup) {
			if p.up {
				n.rootEvent(ctrlEvent{Kind: evRecv, From: p.from, Msg: p.msg})
			} else {
				n.member(p.to, ctrlEvent{Kind: evRecv, From: 0, Msg: p.msg})
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// advance moves the clock by d in heartbeat intervals: every end ticks,
// due timers fire and messages are delivered.
func (n *ctrlNet) advance(d time.Duration) {
	end := n.now.Add(d)
	for n.now.Before(end) {
		n.now = n.now.Add(min(testHB, end.Sub(n.now)))
		var due []int
		for id, at := range n.timers {
			if !at.After(n.now) {
				due = append(due, id)
			}
		}
		sort.Ints(due)
		for _, id := range due {
			delete(n.timers, id)
			n.rootEvent(ctrlEvent{Kind: evTimer, Timer: id})
		}
		n.rootEvent(ctrlEvent{Kind: evTick})
		for r := range n.members {
			n.member(r, ctrlEvent{Kind: evTick})
		}
		n.flush()
	}
}

// crash kills rank r's process: its end stops and the root sees its
// connection drop.
func (n *ctrlNet) crash(r int) {
	n.dead[r] = true
	n.dropped[r] = true
	n.rootEvent(ctrlEvent{Kind: evConnLost, From: r, Err: "connection reset by peer"})
}

// crashRoot kills rank 0's process: the root and rank 0's end stop, every
// other rank sees its control connection drop.
func (n *ctrlNet) crashRoot() {
	n.rootOff, n.dead[0] = true, true
	for r := 1; r < len(n.members); r++ {
		n.dropped[r] = true
		n.member(r, ctrlEvent{Kind: evConnLost, Err: "EOF"})
	}
}

// cut breaks rank r's control connection after its messages in flight: both
// ends see it drop.
func (n *ctrlNet) cut(r int) {
	n.flush()
	n.dropped[r] = true
	n.member(r, ctrlEvent{Kind: evConnLost, Err: "EOF"})
	n.rootEvent(ctrlEvent{Kind: evConnLost, From: r, Err: "EOF"})
}

// isolate makes rank r's process hang: its messages are lost, its
// connection stays up.
func (n *ctrlNet) isolate(r int) { n.dropped[r] = true }

// verdict is what a test expects a rank to fail with.
type verdict struct {
	peer, reporter int
	kind           error
	text           string // a part of the reason
}

func (v verdict) match(pe *PeerError) bool {
	return pe != nil && pe.Peer == v.peer && pe.Reporter == v.reporter && pe.Kind == v.kind && strings.Contains(pe.Reason, v.text)
}

// TestControlStateMachine drives the control plane's state machines through
// the interleavings that matter and checks that every rank ends with the
// same verdict, decided once, or none.
func TestControlStateMachine(t *testing.T) {
	mismatch := &PeerError{Peer: -1, Reporter: 2, Kind: ErrMismatch, Reason: "at seq 4 rank 3 called Broadcast"}
	for _, tc := range []struct {
		name   string
		size   int
		script func(n *ctrlNet)
		want   *verdict     // every rank not in except fails with it (nil: none fails)
		except map[int]bool // ranks that fail otherwise (dead, isolated)
		check  func(t *testing.T, n *ctrlNet)
	}{
		{
			name: "report reaches every rank",
			size: 4,
			script: func(n *ctrlNet) {
				n.member(2, ctrlEvent{Kind: evReport, Fail: mismatch})
				n.flush()
			},
			want: &verdict{peer: -1, reporter: 2, kind: ErrMismatch, text: "rank 3 called Broadcast"},
		},
		{
			name: "duplicated messages give one verdict",
			size: 4,
			script: func(n *ctrlNet) {
				n.dup = true
				n.member(2, ctrlEvent{Kind: evReport, Fail: mismatch})
				n.member(2, ctrlEvent{Kind: evReport, Fail: mismatch})
				n.flush()
			},
			want: &verdict{peer: -1, reporter: 2, kind: ErrMismatch, text: "Broadcast"},
		},
		{
			name: "concurrent reports: the first to arrive wins on every rank",
			size: 4,
			script: func(n *ctrlNet) {
				n.member(3, ctrlEvent{Kind: evReport, Fail: &PeerError{Peer: 3, Reporter: 3, Kind: ErrAborted, Reason: "aborted"}})
				n.member(1, ctrlEvent{Kind: evReport, Fail: &PeerError{Peer: -1, Reporter: 1, Kind: ErrTimeout, Reason: "timed out"}})
				n.flush()
			},
			want: &verdict{peer: 3, reporter: 3, kind: ErrAborted, text: "aborted"},
		},
		{
			name: "a broken link is blamed after the grace period",
			size: 4,
			script: func(n *ctrlNet) {
				n.member(1, ctrlEvent{Kind: evLinkLost, Peer: 3, Err: "read: EOF"})
				n.flush()
				n.advance(testLostTO - testHB)
				if len(n.decls) != 0 {
					n.t.Fatalf("verdict %v before the grace period ended", n.decls)
				}
				n.advance(testHB)
			},
			want: &verdict{peer: 3, reporter: 1, kind: ErrPeerFailed, text: "rank 1 lost its connection to it: read: EOF"},
		},
		{
			name: "a rank that gave up its transfers after losing another link is not blamed",
			size: 3,
			script: func(n *ctrlNet) {
				// Rank 2 lost its link to rank 1 and stopped its
				// operation; rank 0 saw its link to rank 2 break
				// because of that, and its report arrived first.
				n.member(0, ctrlEvent{Kind: evLinkLost, Peer: 2, Err: "peer closed"})
				n.flush()
				n.advance(testHB)
				n.member(2, ctrlEvent{Kind: evLinkLost, Peer: 1, Err: "read: EOF"})
				n.flush()
				n.advance(testLostTO)
			},
			want: &verdict{peer: 1, reporter: 2, kind: ErrPeerFailed, text: "rank 2 lost its connection to it: read: EOF"},
		},
		{
			name: "blame follows a chain of broken links to its start",
			size: 4,
			script: func(n *ctrlNet) {
				n.member(0, ctrlEvent{Kind: evLinkLost, Peer: 3, Err: "peer closed"})
				n.member(3, ctrlEvent{Kind: evLinkLost, Peer: 2, Err: "peer closed"})
				n.member(2, ctrlEvent{Kind: evLinkLost, Peer: 1, Err: "read: EOF"})
				n.flush()
				n.advance(testLostTO)
			},
			want: &verdict{peer: 1, reporter: 2, kind: ErrPeerFailed, text: "rank 2 lost its connection to it: read: EOF"},
		},
		{
			name: "two ranks that lost the link between them: the first report stands",
			size: 3,
			script: func(n *ctrlNet) {
				n.member(0, ctrlEvent{Kind: evLinkLost, Peer: 1, Err: "read: EOF"})
				n.member(1, ctrlEvent{Kind: evLinkLost, Peer: 0, Err: "read: EOF"})
				n.flush()
				n.advance(testLostTO)
			},
			want: &verdict{peer: 1, reporter: 0, kind: ErrPeerFailed, text: "rank 0 lost its connection to it: read: EOF"},
		},
		{
			name: "a peer dying within the grace period is the precise verdict",
			size: 4,
			script: func(n *ctrlNet) {
				n.member(1, ctrlEvent{Kind: evLinkLost, Peer: 3, Err: "read: EOF"})
				n.flush()
				n.advance(testHB)
				n.crash(3)
				n.flush()
				n.advance(testLostTO) // the link's timer fires: nothing more
			},
			want:   &verdict{peer: 3, reporter: 0, kind: ErrPeerFailed, text: "without leaving (connection reset by peer)"},
			except: map[int]bool{3: true},
		},
		{
			name: "rank 0 dying fails every other rank, blaming it",
			size: 4,
			script: func(n *ctrlNet) {
				n.advance(3 * testHB)
				n.crashRoot()
			},
			want:   &verdict{peer: 0, reporter: -2, kind: ErrPeerFailed, text: "lost the control connection to rank 0: EOF"},
			except: map[int]bool{0: true},
		},
		{
			name: "rank 0 hanging fails every other rank after the heartbeat timeout",
			size: 3,
			script: func(n *ctrlNet) {
				n.rootOff, n.dead[0] = true, true
				n.advance(testHBTO)
				for r := 1; r < 3; r++ {
					if n.fails[r] != nil {
						n.t.Fatalf("rank %d failed at the timeout, before it passed: %v", r, n.fails[r])
					}
				}
				n.advance(testHB)
			},
			want:   &verdict{peer: 0, reporter: -2, kind: ErrPeerFailed, text: "no heartbeat from rank 0"},
			except: map[int]bool{0: true},
		},
		{
			name: "a hanging rank is declared failed after the heartbeat timeout",
			size: 4,
			script: func(n *ctrlNet) {
				n.advance(testHB)
				n.isolate(2)
				n.advance(testHBTO + testHB)
			},
			want:   &verdict{peer: 2, reporter: 0, kind: ErrPeerFailed, text: "no heartbeat for 1.1s"},
			except: map[int]bool{2: true},
			check: func(t *testing.T, n *ctrlNet) {
				// Rank 2 hears nothing either, and blames the root.
				if !(verdict{peer: 0, reporter: 2, kind: ErrPeerFailed, text: "no heartbeat from rank 0"}).match(n.fails[2]) {
					t.Errorf("isolated rank 2 failed with %v", n.fails[2])
				}
			},
		},
		{
			name: "heartbeats keep every rank alive",
			size: 4,
			script: func(n *ctrlNet) {
				n.advance(10 * testHBTO)
			},
		},
		{
			name: "ranks that say goodbye leave without a verdict",
			size: 3,
			script: func(n *ctrlNet) {
				for r := range 3 {
					n.member(r, ctrlEvent{Kind: evClose, Clean: true})
				}
				n.flush()
				for r := range 3 {
					n.cut(r)
				}
				n.rootEvent(ctrlEvent{Kind: evClose})
			},
			check: func(t *testing.T, n *ctrlNet) {
				if n.allLeft != 1 {
					t.Errorf("all left given %d times, want once", n.allLeft)
				}
				for r, l := range n.left {
					if !l {
						t.Errorf("rank %d did not leave", r)
					}
				}
			},
		},
		{
			name: "the root's shutdown lets the ranks lose it quietly",
			size: 3,
			script: func(n *ctrlNet) {
				n.rootEvent(ctrlEvent{Kind: evClose})
				n.flush()
				for r := 1; r < 3; r++ {
					n.cut(r)
				}
				n.advance(2 * testHBTO)
			},
		},
		{
			name: "after closing the root declares nothing",
			size: 3,
			script: func(n *ctrlNet) {
				n.rootEvent(ctrlEvent{Kind: evClose})
				n.member(1, ctrlEvent{Kind: evReport, Fail: mismatch})
				n.flush()
				n.rootEvent(ctrlEvent{Kind: evConnLost, From: 2, Err: "EOF"})
			},
		},
		{
			name: "an abort, then the aborting rank's connection drops",
			size: 4,
			script: func(n *ctrlNet) {
				pe := &PeerError{Peer: 2, Reporter: 2, Kind: ErrAborted, Reason: "aborted the communicator"}
				n.member(2, ctrlEvent{Kind: evReport, Fail: pe})
				n.member(2, ctrlEvent{Kind: evClose, Clean: false})
				n.cut(2)
				n.flush()
			},
			want:   &verdict{peer: 2, reporter: 2, kind: ErrAborted, text: "aborted"},
			except: map[int]bool{2: true},
		},
		{
			name: "a probe finds ranks in different collectives",
			size: 4,
			script: func(n *ctrlNet) {
				n.probed[3] = wire.Fingerprint{Op: 2, Root: 1, Count: 8}
				n.member(1, ctrlEvent{Kind: evStalled, Seq: 9})
				n.flush()
			},
			want: &verdict{peer: -1, reporter: -1, kind: ErrMismatch, text: "collectives do not match at seq 9"},
		},
		{
			name: "a probe finds ranks rewiring to different targets",
			size: 3,
			script: func(n *ctrlNet) {
				for r := range 3 {
					n.probed[r] = wire.Fingerprint{Op: 13, Target: 0xfeed}
				}
				n.probed[2] = wire.Fingerprint{Op: 13, Target: 0xbad}
				n.member(0, ctrlEvent{Kind: evStalled, Seq: 3})
				n.flush()
			},
			want: &verdict{peer: -1, reporter: -1, kind: ErrMismatch,
				text: "ranks [0 1] called Rewire(target digest feed); ranks [2] called Rewire(target digest bad)"},
		},
		{
			name: "duplicated probe answers do not end a probe early",
			size: 4,
			script: func(n *ctrlNet) {
				n.dup = true
				n.probed[3] = wire.Fingerprint{Op: 2, Root: 1, Count: 8}
				n.held[3] = true
				n.member(1, ctrlEvent{Kind: evStalled, Seq: 9})
				n.flush()
				if n.root.probe == nil || n.root.probe.missing != 1 {
					n.t.Fatalf("probe %+v, want one answer missing", n.root.probe)
				}
				n.held[3] = false
				n.flush()
			},
			want: &verdict{peer: -1, reporter: -1, kind: ErrMismatch, text: "ranks [0 1 2] called AllReduce(count=8, int8, sum); ranks [3] called Broadcast(count=8, int8, root=1)"},
		},
		{
			name: "a probe answer later than the probe's timeout is ignored",
			size: 4,
			script: func(n *ctrlNet) {
				n.probed[3] = wire.Fingerprint{Op: 2, Root: 1, Count: 8}
				n.held[3] = true
				n.member(1, ctrlEvent{Kind: evStalled, Seq: 9})
				n.flush()
				// Rank 3's answer comes after the probe ended: the ranks
				// that answered agree.
				n.now = n.now.Add(testProbeTO)
				n.rootEvent(ctrlEvent{Kind: evTimer, Timer: 1})
				n.held[3] = false
				n.flush()
				if n.root.probe != nil {
					n.t.Fatal("probe still running")
				}
			},
		},
		{
			name: "a rank failing during a probe: one verdict",
			size: 4,
			script: func(n *ctrlNet) {
				n.held[3] = true
				n.member(1, ctrlEvent{Kind: evStalled, Seq: 9})
				n.flush()
				n.crash(3)
				n.advance(testProbeTO)
			},
			want:   &verdict{peer: 3, reporter: 0, kind: ErrPeerFailed, text: "without leaving"},
			except: map[int]bool{3: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newCtrlNet(t, tc.size)
			tc.script(n)
			n.flush()
			if tc.want == nil {
				if len(n.decls) != 0 {
					t.Errorf("verdicts %v, want none", n.decls)
				}
				for r, pe := range n.fails {
					if pe != nil {
						t.Errorf("rank %d failed: %v", r, pe)
					}
				}
			} else {
				want := *tc.want
				for r, pe := range n.fails {
					if tc.except[r] {
						continue
					}
					w := want
					if w.reporter == -2 { // the rank itself
						w.reporter = r
					}
					if !w.match(pe) {
						t.Errorf("rank %d failed with %v, want %+v", r, pe, w)
					}
					if n.nFails[r] != 1 {
						t.Errorf("rank %d failed %d times", r, n.nFails[r])
					}
				}
				if want.reporter != -2 && len(n.decls) != 1 {
					t.Errorf("%d verdicts %v, want one", len(n.decls), n.decls)
				}
				for r, v := range n.nVerds {
					if want.reporter != -2 && !tc.except[r] && !n.dead[r] && !n.dropped[r] && v != 1 {
						t.Errorf("rank %d saw the verdict %d times, want once", r, v)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, n)
			}
		})
	}
}

// TestCtrlMemberForwards checks what a rank's end sends the root for what
// its rank detects.
func TestCtrlMemberForwards(t *testing.T) {
	now := time.Unix(0, 0)
	m := newCtrlMember(2, now, time.Second)
	got := func(ev ctrlEvent) string {
		ev.Now = now
		var s []string
		for _, a := range m.step(ev) {
			s = append(s, a.String())
		}
		return strings.Join(s, "; ")
	}
	for _, tc := range []struct {
		ev   ctrlEvent
		want string
	}{
		{ctrlEvent{Kind: evReport, Fail: &PeerError{Peer: 5, Reporter: 2, Kind: ErrTimeout, Reason: "slow"}},
			fmt.Sprintf("send 0 report kind=%d peer=5 reporter=2: slow", kindTimeout)},
		{ctrlEvent{Kind: evLinkLost, Peer: 1, Err: "EOF"}, fmt.Sprintf("send 0 report kind=%d peer=1 reporter=2: EOF", kindLost)},
		{ctrlEvent{Kind: evStalled, Seq: 7}, "send 0 stalled 7"},
		{ctrlEvent{Kind: evRecv, Msg: wire.Msg{Type: wire.Probe, Seq: 7}}, "answer 7"},
		{ctrlEvent{Kind: evRecv, Msg: wire.Msg{Type: wire.StallReport, Seq: 7, Text: "stall at Barrier seq 7: rank 1 has not called it"}},
			"stall report 7: stall at Barrier seq 7: rank 1 has not called it"},
		{ctrlEvent{Kind: evRecv, Msg: wire.Msg{Type: wire.Heartbeat}}, ""},
		{ctrlEvent{Kind: evRecv, Msg: wire.Msg{Type: wire.Verdict, Kind: kindOf(ErrAborted), Peer: 2, Reporter: 2, Text: "shrinking"}},
			"fail peer=2 reporter=2 communicator aborted: shrinking; verdict"},
		{ctrlEvent{Kind: evRecv, Msg: wire.Msg{Type: wire.Verdict, Kind: kindOf(ErrTimeout), Peer: 1, Reporter: 3, Text: "later"}}, ""},
		{ctrlEvent{Kind: evTick}, "send 0 heartbeat"},
		{ctrlEvent{Kind: evClose, Clean: true}, "send 0 goodbye; leave"},
		{ctrlEvent{Kind: evClose, Clean: true}, ""},   // closing twice
		{ctrlEvent{Kind: evConnLost, Err: "EOF"}, ""}, // left: not a failure
	} {
		if s := got(tc.ev); s != tc.want {
			t.Errorf("event %+v: %q, want %q", tc.ev, s, tc.want)
		}
	}
	if !errors.Is(errOfKind(kindOf(ErrTimeout)), ErrTimeout) {
		t.Error("kinds do not round-trip")
	}
}

// TestCtrlMemberAwaitsVerdict: a rank that reported a failure awaits the
// root's verdict until it arrives; one that reported nothing does not.
func TestCtrlMemberAwaitsVerdict(t *testing.T) {
	now := time.Unix(0, 0)
	m := newCtrlMember(0, now, time.Second)
	if m.awaitsVerdict() {
		t.Fatal("awaits a verdict before reporting anything")
	}
	m.step(ctrlEvent{Kind: evReport, Now: now, Fail: &PeerError{Peer: 0, Reporter: 0, Kind: ErrAborted, Reason: "shrinking"}})
	if !m.awaitsVerdict() {
		t.Fatal("does not await the verdict on its report")
	}
	m.step(ctrlEvent{Kind: evRecv, Now: now, Msg: wire.Msg{Type: wire.Heartbeat}})
	if !m.awaitsVerdict() {
		t.Fatal("a heartbeat ended the wait for the verdict")
	}
	m.step(ctrlEvent{Kind: evRecv, Now: now, Msg: wire.Msg{Type: wire.Verdict, Kind: kindOf(ErrAborted)}})
	if m.awaitsVerdict() {
		t.Fatal("still awaits the verdict after it arrived")
	}
}

// TestCtrlStallReport: a probe that finds every rank in the same operation,
// or not there yet, ends in one report that every rank logs; a mismatch
// ends in a verdict and no report.
func TestCtrlStallReport(t *testing.T) {
	n := newCtrlNet(t, 4)
	n.late[3] = true
	n.member(1, ctrlEvent{Kind: evStalled, Seq: 9})
	n.flush()
	want := "stall at AllReduce(count=8, int8, sum) seq 9: rank 3 has not called it (last completed: seq 8); ranks 0-2 are in it"
	for r := range 4 {
		if got := n.stalls[r]; len(got) != 1 || got[0] != want {
			t.Errorf("rank %d logged %q, want [%q]", r, got, want)
		}
	}
	if len(n.decls) != 0 {
		t.Errorf("verdicts %v, want none", n.decls)
	}
	// Another rank's watchdog fires on the same operation: no second
	// report.
	n.member(2, ctrlEvent{Kind: evStalled, Seq: 9})
	n.flush()
	for r := range 4 {
		if len(n.stalls[r]) != 1 {
			t.Errorf("rank %d logged %d reports on seq 9, want 1", r, len(n.stalls[r]))
		}
	}

	n = newCtrlNet(t, 4)
	n.probed[2] = wire.Fingerprint{Op: 2, Root: 1, Count: 8}
	n.member(0, ctrlEvent{Kind: evStalled, Seq: 9})
	n.flush()
	for r := range 4 {
		if len(n.stalls[r]) != 0 {
			t.Errorf("rank %d logged a stall report on a mismatch: %q", r, n.stalls[r])
		}
	}
	if len(n.decls) != 1 {
		t.Errorf("verdicts %v, want one mismatch", n.decls)
	}
}
