package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// agreeNet runs a rewire's agreement, rank 0's verdictRoot and the other
// ranks' verdictMembers, over an in-memory network. The script says when
// each rank's links are ready and when the switch returns; messages are
// delivered in order by flush, and a rank whose communicator fails makes
// every pending receive fail, as closing the connections does.
type agreeNet struct {
	t           *testing.T
	size        int
	root        *verdictRoot
	members     []*verdictMember // [0] unused
	linked      []bool           // agLinks given
	stop        []bool           // agStop given, agLinks due
	queue       []agreeMsg
	held        map[int]bool // ranks whose messages wait
	slow        map[int]bool // ranks whose links do not stop until the script says
	dead        map[int]bool
	dup         bool
	sends       []*agreeSend // sends waiting for their messages
	gotStat     []bool       // rank 0 has rank r's status (or its error)
	gotVerd     []bool       // rank r has the verdict (or its error)
	results     []string     // per rank: "done ..." or "fail: ..."
	failed      bool         // some rank's communicator failed
	verdict     int          // verdicts rank 0 sent
	restores    int          // restores rank 0 started
	restoring   bool         // one runs
	holdRestore bool         // and does not return until the script says
	restoreErr  error        // what it returns
}

type agreeMsg struct {
	from, to int
	s        outcome
	digest   uint64
	send     *agreeSend
}

// agreeSend is one agSend action: done once all its messages are delivered
// or lost.
type agreeSend struct {
	rank    int
	pending int
	err     error
}

const testDigest = 0xfeed

func newAgreeNet(t *testing.T, size int, switching, hasRollback bool, planErr error) *agreeNet {
	n := &agreeNet{t: t, size: size, linked: make([]bool, size), stop: make([]bool, size),
		held: map[int]bool{}, slow: map[int]bool{}, dead: map[int]bool{}, gotStat: make([]bool, size), gotVerd: make([]bool, size),
		results: make([]string, size), members: make([]*verdictMember, size)}
	n.root = newVerdictRoot(size, testDigest, switching, hasRollback, planErr)
	for r := 1; r < size; r++ {
		n.members[r] = newVerdictMember(r, testDigest)
	}
	n.apply(0, n.root.start())
	return n
}

// event gives ev to rank r and carries out the actions.
func (n *agreeNet) event(r int, ev agreeEvent) {
	if n.dead[r] {
		return
	}
	if r == 0 {
		n.apply(0, n.root.step(ev))
	} else {
		n.apply(r, n.members[r].step(ev))
	}
}

func (n *agreeNet) apply(r int, acts []agreeAction) {
	for _, a := range acts {
		switch a.Kind {
		case agStop:
			n.stop[r] = true
		case agRestore:
			if r != 0 || n.restoring {
				n.t.Fatalf("rank %d restores (one running: %v)", r, n.restoring)
			}
			n.restores++
			n.restoring = true
		case agSend:
			snd := &agreeSend{rank: r}
			n.sends = append(n.sends, snd)
			digest := uint64(testDigest)
			if r != 0 {
				digest = n.members[r].digest
			}
			for to := range n.size {
				if to != r && (r == 0 || to == 0) {
					snd.pending++
					n.queue = append(n.queue, agreeMsg{from: r, to: to, s: a.Outcome, digest: digest, send: snd})
				}
			}
			if r == 0 {
				n.verdict++
			}
		case agDone:
			if n.results[r] != "" {
				n.t.Fatalf("rank %d done twice: %s, then %v", r, n.results[r], a)
			}
			if !n.linked[r] {
				n.t.Errorf("rank %d done with its links still running: %v", r, a)
			}
			if r == 0 && n.restoring {
				n.t.Errorf("rank 0 done with its restore still running: %v", a)
			}
			n.results[r] = a.String()
			if a.Err != nil {
				n.failed = true
			}
		}
	}
}

// links makes rank r's links ready with s (ok if zero).
func (n *agreeNet) links(r int, s outcome) {
	if n.linked[r] {
		return
	}
	n.linked[r] = true
	n.event(r, agreeEvent{Kind: agLinks, Outcome: s})
}

func (n *agreeNet) switched(err error) { n.event(0, agreeEvent{Kind: agSwitched, Err: err}) }

// flush delivers every message and completion due, until nothing moves.
func (n *agreeNet) flush() {
	for moved := true; moved; {
		moved = false
		for i := 0; i < len(n.queue); i++ {
			m := n.queue[i]
			if n.held[m.from] {
				continue
			}
			n.queue = append(n.queue[:i:i], n.queue[i+1:]...)
			i--
			moved = true
			m.send.pending--
			if n.dead[m.to] || n.dead[m.from] {
				m.send.err = fmt.Errorf("send to rank %d: connection reset", m.to)
				continue
			}
			for range 1 + btoi(n.dup) {
				if m.to == 0 {
					n.gotStat[m.from] = true
					n.event(0, agreeEvent{Kind: agStatus, From: m.from, Outcome: m.s, Digest: m.digest})
				} else {
					n.gotVerd[m.to] = true
					n.event(m.to, agreeEvent{Kind: agVerdict, Outcome: m.s, Digest: m.digest})
				}
			}
		}
		for i := 0; i < len(n.sends); i++ {
			if s := n.sends[i]; s.pending == 0 {
				n.sends = append(n.sends[:i:i], n.sends[i+1:]...)
				i--
				moved = true
				n.event(s.rank, agreeEvent{Kind: agSent, Err: s.err})
			}
		}
		if n.restoring && !n.holdRestore {
			moved = true
			n.restoring = false
			n.event(0, agreeEvent{Kind: agRestored, Err: n.restoreErr})
		}
		for r := range n.size {
			if n.stop[r] && !n.linked[r] && !n.slow[r] {
				moved = true
				n.links(r, failedOutcome("connect", context.Canceled))
			}
		}
		if n.failed {
			// The communicator failed: its connections close, and every
			// receive still waiting fails.
			for r := 1; r < n.size; r++ {
				if !n.gotStat[r] {
					moved = true
					n.gotStat[r] = true
					n.event(0, agreeEvent{Kind: agStatus, From: r, Err: errors.New("connection closed")})
				}
				if !n.gotVerd[r] {
					moved = true
					n.gotVerd[r] = true
					n.event(r, agreeEvent{Kind: agVerdict, Err: errors.New("connection closed")})
				}
			}
		}
	}
}

// kill makes rank r's process die: its peers' receives from it fail, and
// so do their sends to it.
func (n *agreeNet) kill(r int) {
	n.dead[r] = true
	if r == 0 {
		for m := 1; m < n.size; m++ {
			if !n.gotVerd[m] {
				n.gotVerd[m] = true
				n.event(m, agreeEvent{Kind: agVerdict, Err: errors.New("rank 0: connection reset")})
			}
		}
		return
	}
	if !n.gotStat[r] {
		n.gotStat[r] = true
		n.event(0, agreeEvent{Kind: agStatus, From: r, Err: fmt.Errorf("rank %d: connection reset", r)})
	}
}

// TestRewireAgreement drives the agreement on a rewire's outcome through
// the interleavings that matter. Every rank that returns a verdict returns
// rank 0's one; a rank whose peer died fails the communicator instead.
func TestRewireAgreement(t *testing.T) {
	ok := outcome{ok: true}
	connect := failedOutcome("connect", errors.New("no light"))
	verify := failedOutcome("verify", errors.New("rank 1 answered as rank 3"))
	okApplied := "done ok applied=true"
	for _, tc := range []struct {
		name       string
		size       int
		switching  bool
		planErr    error
		script     func(n *agreeNet)
		want       []string // per rank: the String() of its agDone, or a prefix of it
		noVerdict  bool     // rank 0 sends none (else one)
		restores   int      // times rank 0 restores the previous circuits
		noRollback bool     // Rewire.Rollback is nil
	}{
		{
			name: "all ready before the switch returns: the verdict follows the switch", size: 4, switching: true,
			script: func(n *agreeNet) {
				for r := range 4 {
					n.links(r, ok)
				}
				n.flush()
				if n.verdict != 0 {
					n.t.Fatal("verdict sent before the switch returned")
				}
				n.switched(nil)
			},
			want: []string{okApplied, okApplied, okApplied, okApplied},
		},
		{
			name: "late status: success waits for every rank", size: 4, switching: true,
			script: func(n *agreeNet) {
				n.switched(nil)
				for r := range 3 {
					n.links(r, ok)
				}
				n.flush()
				if n.verdict != 0 {
					n.t.Fatal("success declared with a status missing")
				}
				n.links(3, ok)
			},
			want: []string{okApplied, okApplied, okApplied, okApplied},
		},
		{
			name: "no switch, one rank", size: 1,
			script: func(n *agreeNet) { n.links(0, ok) },
			want:   []string{"done ok applied=false"},
		},
		{
			name: "a failure stops the ranks still connecting, whose statuses are drained", restores: 1, size: 4, switching: true,
			script: func(n *agreeNet) {
				n.held[3] = true
				n.links(0, ok)
				n.links(2, connect)
				n.switched(nil)
				n.flush()
				if !n.stop[1] || !n.stop[3] || n.stop[2] {
					n.t.Fatalf("stopped %v: want ranks 1 and 3, still connecting", n.stop)
				}
				if n.results[0] != "" || n.results[1] == "" {
					n.t.Fatalf("rank 0 %q before rank 3's status came, rank 1 %q", n.results[0], n.results[1])
				}
				n.held[3] = false
			},
			want: []string{
				"done connect failed on rank 2: no light applied=true rollback=true",
				"done connect failed on rank 2: no light applied=true rollback=true",
				"done connect failed on rank 2: no light applied=true rollback=true",
				"done connect failed on rank 2: no light applied=true rollback=true",
			},
		},
		{
			name: "failures before the switch returns: the lowest rank's", restores: 1, size: 4, switching: true,
			script: func(n *agreeNet) {
				n.links(0, ok)
				n.links(2, ok)
				n.links(3, verify)
				n.flush()
				n.links(1, connect)
				n.flush()
				n.switched(nil)
			},
			want: []string{"done connect failed on rank 1", "done connect failed on rank 1", "done connect failed on rank 1", "done connect failed on rank 1"},
		},
		{
			name: "after the switch, the first failure in decides", restores: 1, size: 4, switching: true,
			script: func(n *agreeNet) {
				n.switched(nil)
				n.links(3, verify)
				n.flush()
				n.links(1, connect)
			},
			want: []string{"done verify failed on rank 3", "done verify failed on rank 3", "done verify failed on rank 3", "done verify failed on rank 3"},
		},
		{
			name: "rank 0's links stop last: it waits for them", restores: 1, size: 3, switching: true,
			script: func(n *agreeNet) {
				n.slow[0] = true
				n.switched(nil)
				n.links(1, connect)
				n.links(2, ok)
				n.flush()
				if !n.stop[0] || n.results[0] != "" {
					n.t.Fatalf("rank 0 stopped %v, done %q, while its links run", n.stop[0], n.results[0])
				}
				n.links(0, failedOutcome("connect", context.Canceled))
			},
			want: []string{"done connect failed on rank 1: no light", "done connect failed on rank 1", "done connect failed on rank 1"},
		},
		{
			name: "a peer dying while rank 0 connects: rank 0 waits for its switch, then restores", size: 3, switching: true, restores: 1,
			script: func(n *agreeNet) {
				n.slow[0] = true
				n.kill(2)
				n.flush()
				if !n.stop[0] || n.results[0] != "" {
					n.t.Fatalf("rank 0 stopped %v, done %q, while its links run", n.stop[0], n.results[0])
				}
				n.links(0, failedOutcome("connect", context.Canceled))
				n.flush()
				if n.results[0] != "" || n.restores != 0 {
					n.t.Fatalf("rank 0 done %q, restored %d times, before its switch returned", n.results[0], n.restores)
				}
				n.switched(nil)
			},
			want:      []string{"fail: rank 2: connection reset", "fail: connection closed", ""},
			noVerdict: true,
		},
		{
			name: "the switch's failure beats every status", size: 3, switching: true,
			script: func(n *agreeNet) {
				n.links(1, connect)
				n.flush()
				n.switched(fmt.Errorf("port 3 stuck: %w", ErrNotSwitched))
			},
			want: []string{"done apply failed on rank 0: port 3 stuck: the fabric was not switched applied=false rollback=false",
				"done apply failed on rank 0: port 3 stuck: the fabric was not switched applied=false rollback=false",
				"done apply failed on rank 0: port 3 stuck: the fabric was not switched applied=false rollback=false"},
		},
		{
			name: "switch outcome unknown: restored before the verdict, RolledBack", size: 3, switching: true, restores: 1,
			script: func(n *agreeNet) {
				n.holdRestore = true
				for r := range 3 {
					n.links(r, ok)
				}
				n.switched(errors.New("controller timed out"))
				n.flush()
				if n.restores != 1 || n.verdict != 0 {
					n.t.Fatalf("restores %d, verdicts %d while the restore runs: want 1 and 0", n.restores, n.verdict)
				}
				n.holdRestore = false
			},
			want: []string{"done apply failed on rank 0: controller timed out applied=false rollback=true",
				"done apply failed on rank 0: controller timed out applied=false rollback=true",
				"done apply failed on rank 0: controller timed out applied=false rollback=true"},
		},
		{
			name: "switch outcome unknown, restore failed: not RolledBack, the reason names it", size: 3, switching: true, restores: 1,
			script: func(n *agreeNet) {
				n.restoreErr = errors.New("restore the previous circuits: controller unreachable")
				n.switched(errors.New("controller timed out"))
				for r := range 3 {
					n.links(r, ok)
				}
			},
			want: []string{"done apply failed on rank 0: controller timed out; restore the previous circuits: controller unreachable applied=false rollback=false",
				"done apply failed on rank 0: controller timed out; restore the previous circuits: controller unreachable applied=false rollback=false",
				"done apply failed on rank 0: controller timed out; restore the previous circuits: controller unreachable applied=false rollback=false"},
		},
		{
			name: "definite refusal: no restore", size: 3, switching: true,
			script: func(n *agreeNet) {
				n.switched(fmt.Errorf("port 3 is drained: %w", ErrNotSwitched))
				for r := range 3 {
					n.links(r, ok)
				}
			},
			want: []string{"done apply failed on rank 0: port 3 is drained: the fabric was not switched applied=false rollback=false",
				"done apply failed on rank 0: port 3 is drained: the fabric was not switched applied=false rollback=false",
				"done apply failed on rank 0: port 3 is drained: the fabric was not switched applied=false rollback=false"},
		},
		{
			name: "switched, a link failed, restore failed: not RolledBack, the reason names it", size: 3, switching: true, restores: 1,
			script: func(n *agreeNet) {
				n.restoreErr = errors.New("restore the previous circuits: port 5 stuck")
				n.switched(nil)
				n.links(0, ok)
				n.links(1, ok)
				n.links(2, connect)
			},
			want: []string{"done connect failed on rank 2: no light; restore the previous circuits: port 5 stuck applied=true rollback=false",
				"done connect failed on rank 2: no light; restore the previous circuits: port 5 stuck applied=true rollback=false",
				"done connect failed on rank 2: no light; restore the previous circuits: port 5 stuck applied=true rollback=false"},
		},
		{
			name: "switch outcome unknown, no Rollback: nothing to restore", size: 2, switching: true, noRollback: true,
			script: func(n *agreeNet) {
				n.switched(errors.New("controller timed out"))
				n.links(0, ok)
				n.links(1, ok)
			},
			want: []string{"done apply failed on rank 0: controller timed out applied=false rollback=false",
				"done apply failed on rank 0: controller timed out applied=false rollback=false"},
		},
		{
			name: "the communicator fails while the restore runs: one restore, and rank 0 waits for it", size: 3, switching: true, restores: 1,
			script: func(n *agreeNet) {
				n.holdRestore = true
				n.links(0, ok)
				n.links(1, connect)
				n.switched(nil)
				n.flush()
				n.kill(2)
				n.flush()
				if n.results[0] != "" {
					n.t.Fatalf("rank 0 done %q while its restore runs", n.results[0])
				}
				n.holdRestore = false
			},
			want:      []string{"fail: rank 2: connection reset", "fail: connection closed", ""},
			noVerdict: true,
		},
		{
			name: "the operation ends while the switch runs: no verdict, the abandoned switch is restored", size: 3, switching: true, restores: 1,
			script: func(n *agreeNet) {
				n.links(0, ok)
				n.links(1, ok)
				n.links(2, ok)
				n.flush()
				n.event(0, agreeEvent{Kind: agFailed, Err: errors.New("peer failed: rank 3")})
				n.flush()
				if n.results[0] != "" || n.restores != 0 {
					n.t.Fatalf("rank 0 done %q, %d restores, before its switch returned", n.results[0], n.restores)
				}
				// Abandoned as the operation's context ended: its
				// outcome is unknown, but no verdict may say so.
				n.switched(errors.New("the switch (Rewire.Apply) did not return before its context was cancelled"))
			},
			want:      []string{"fail: peer failed: rank 3", "fail: connection closed", "fail: connection closed"},
			noVerdict: true,
		},
		{
			name: "rank 0's plan failure decides at once", size: 3, planErr: errors.New("target has 2 hosts"),
			script: func(n *agreeNet) {
				if n.verdict != 1 {
					n.t.Fatal("no verdict at the start")
				}
				n.links(0, failedOutcome("plan", errors.New("target has 2 hosts")))
			},
			want: []string{"done plan failed on rank 0: target has 2 hosts applied=false rollback=false",
				"done plan failed on rank 0", "done plan failed on rank 0"},
		},
		{
			name: "duplicated messages change nothing", size: 4, switching: true,
			script: func(n *agreeNet) {
				n.dup = true
				for r := range 4 {
					n.links(r, ok)
				}
				n.flush()
				n.switched(nil)
			},
			want: []string{okApplied, okApplied, okApplied, okApplied},
		},
		{
			name: "duplicated failure statuses change nothing", restores: 1, size: 4, switching: true,
			script: func(n *agreeNet) {
				n.dup = true
				n.switched(nil)
				n.links(0, ok)
				n.links(2, connect)
			},
			want: []string{"done connect failed on rank 2", "done connect failed on rank 2", "done connect failed on rank 2", "done connect failed on rank 2"},
		},
		{
			name: "a peer dying before its status: every rank fails", restores: 1, size: 4, switching: true,
			script: func(n *agreeNet) {
				n.links(0, ok)
				n.links(1, ok)
				n.flush()
				n.kill(3)
				n.switched(nil)
			},
			want:      []string{"fail: rank 3: connection reset", "fail: connection closed", "fail: connection closed", ""},
			noVerdict: true,
		},
		{
			name: "a peer dying after its status: the verdict does not reach it", restores: 1, size: 3, switching: true,
			script: func(n *agreeNet) {
				for r := range 3 {
					n.links(r, ok)
				}
				n.flush()
				n.kill(2)
				n.switched(nil)
			},
			// Rank 1 took the verdict before rank 0 learnt that its send
			// to rank 2 failed; the communicator fails everywhere.
			want: []string{"fail: send to rank 2: connection reset", okApplied, ""},
		},
		{
			name: "rank 0 dying: every rank stops its links and fails", size: 4, switching: true,
			script: func(n *agreeNet) {
				n.links(1, ok)
				n.flush()
				n.kill(0)
			},
			want:      []string{"", "fail: rank 0: connection reset", "fail: rank 0: connection reset", "fail: rank 0: connection reset"},
			noVerdict: true,
		},
		{
			name: "a rank given another target", restores: 1, size: 3, switching: true,
			script: func(n *agreeNet) {
				n.members[2].digest = 0xbad
				for r := range 3 {
					n.links(r, ok)
				}
				n.flush()
				n.switched(nil)
			},
			want: []string{"fail: mismatched operations: rank 2 called Rewire(target digest bad) but rank 0 called Rewire(target digest feed)",
				"fail: connection closed", "fail: connection closed"},
			noVerdict: true,
		},
		{
			name: "a verdict of another target", restores: 1, size: 3, switching: true,
			script: func(n *agreeNet) {
				n.held[2] = true // rank 0 has not seen rank 2's status yet
				n.members[2].digest = 0xbad
				n.switched(errors.New("port down"))
				n.flush()
			},
			want: []string{"fail: connection closed", "done apply failed on rank 0",
				"fail: mismatched operations: rank 0 called Rewire(target digest feed) but rank 2 called Rewire(target digest bad)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newAgreeNet(t, tc.size, tc.switching, !tc.noRollback, tc.planErr)
			tc.script(n)
			n.flush()
			for r, want := range tc.want {
				got := n.results[r]
				if want == "" {
					if got != "" && !n.dead[r] {
						t.Errorf("rank %d: %s, want nothing", r, got)
					}
					continue
				}
				if !strings.HasPrefix(got, want) {
					t.Errorf("rank %d: %q, want %q", r, got, want)
				}
			}
			if want := btoi(!tc.noVerdict); n.verdict != want {
				t.Errorf("rank 0 sent %d verdicts, want %d", n.verdict, want)
			}
			if n.restores != tc.restores {
				t.Errorf("rank 0 restored %d times, want %d", n.restores, tc.restores)
			}
			if len(n.queue) != 0 && !n.failed {
				t.Errorf("messages left on the connections: %+v", n.queue)
			}
		})
	}
}
