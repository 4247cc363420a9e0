package agree

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// net is an in-memory network of machines. Messages are delivered in an
// order the seed chooses. A rank can be killed (its connections break and
// the failure detector finds it), stopped (it neither sends nor receives,
// and the detector finds it unreachable) and resumed; a rank whose
// agreement is over leaves (closes its listener: later messages to it fail).
type net struct {
	t       *testing.T
	rng     *rand.Rand
	n       int
	ms      []*Machine
	queue   []msg
	dead    []bool
	stopped []bool
	held    [][]msg // messages to a stopped rank, delivered when it resumes
	result  []*Action
	ballots []uint32 // highest ballot each rank reached
	to      []int    // the rank each rank last proposed to (-1: none)
	steps   int
	// hook runs before every delivery, with the step count.
	hook func(*net, int)
}

type msg struct {
	to int
	ev Event
}

func newNet(t *testing.T, seed uint64, n int, excluded []int, suspects func(r int) []int) *net {
	w := &net{t: t, rng: rand.New(rand.NewPCG(seed, 7)), n: n, dead: make([]bool, n), stopped: make([]bool, n),
		held: make([][]msg, n), result: make([]*Action, n), ballots: make([]uint32, n), to: make([]int, n)}
	for r := range w.to {
		w.to[r] = -1
	}
	for r := range n {
		w.ms = append(w.ms, New(r, n, excluded, suspects(r), 1))
	}
	return w
}

// gone says whether rank r left: it died, or its agreement is over and
// it is not in the bootstrap of a communicator that cannot form.
func (w *net) gone(r int) bool {
	res := w.result[r]
	return w.dead[r] || res != nil && (res.Kind == Excluded || w.complete(res.Decision))
}

// booting says whether rank r accepted a decision some of whose members did
// not: it waits in the bootstrap, and holds the messages sent to it.
func (w *net) booting(r int) bool {
	return !w.dead[r] && w.result[r] != nil && !w.gone(r)
}

// apply carries out rank r's actions.
func (w *net) apply(r int, acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case SendPropose:
			w.to[r] = a.To
			if w.gone(a.To) {
				w.send(r, Event{Kind: Lost, From: a.To})
			} else {
				w.send(a.To, Event{Kind: Propose, From: r, Ballot: a.Ballot, Suspects: a.Suspects})
			}
		case Leave:
			w.send(a.To, Event{Kind: Lost, From: r})
			w.to[r] = -1
		case SendDecide:
			for _, to := range a.Recipients {
				w.send(to.Rank, Event{Kind: Decide, From: r, Ballot: to.Ballot, Decision: a.Decision})
			}
		case Done, Excluded:
			a := a
			w.result[r] = &a
		}
	}
	w.ballots[r] = max(w.ballots[r], w.ms[r].Ballot())
}

// send queues ev for rank to.
func (w *net) send(to int, ev Event) {
	if w.gone(to) {
		return
	}
	w.queue = append(w.queue, msg{to, ev})
}

func (w *net) kill(r int) {
	// Its connection to the rank it proposed to breaks.
	if w.to[r] >= 0 {
		w.send(w.to[r], Event{Kind: Lost, From: r})
	}
	w.dead[r] = true
}

// run delivers messages and failure-detector verdicts until nothing more
// can happen, and fails the test if a live rank is stuck.
func (w *net) run() {
	for r := range w.n {
		if !w.dead[r] && !w.stopped[r] {
			w.apply(r, w.ms[r].Start())
		}
	}
	w.loop()
}

func (w *net) loop() {
	for {
		if len(w.queue) == 0 {
			// The failure detector: every live rank learns that the ranks
			// it watches are unreachable if they are.
			any := false
			for r := range w.n {
				if w.gone(r) || w.stopped[r] {
					continue
				}
				for _, q := range w.ms[r].Watched() {
					if w.gone(q) || w.stopped[q] {
						w.queue = append(w.queue, msg{r, Event{Kind: Lost, From: q}})
						any = true
					}
				}
			}
			if !any && !w.retry() {
				return
			}
			continue
		}
		// Random order, but first in first out on each connection.
		i := w.rng.IntN(len(w.queue))
		for j, q := range w.queue[:i] {
			if q.to == w.queue[i].to && q.ev.From == w.queue[i].ev.From {
				i = j
				break
			}
		}
		m := w.queue[i]
		w.queue = slices.Delete(w.queue, i, i+1)
		if w.hook != nil {
			w.hook(w, w.steps)
		}
		w.steps++
		if w.gone(m.to) {
			continue
		}
		if w.stopped[m.to] || w.booting(m.to) {
			w.held[m.to] = append(w.held[m.to], m)
			continue
		}
		w.apply(m.to, w.ms[m.to].Step(m.ev))
	}
}

// retry restarts the ranks that accepted a decision some of whose
// members did not (the bootstrap of its communicator fails), as Shrink
// does: with the members missing from the bootstrap suspected, at the
// next ballot. It says whether it restarted any.
func (w *net) retry() bool {
	var again []int
	for r := range w.n {
		if w.booting(r) && !w.stopped[r] {
			again = append(again, r)
		}
	}
	for _, r := range again {
		suspects := w.ms[r].Suspects()
		for _, q := range w.result[r].Decision.Members {
			if res := w.result[q]; res == nil || res.Kind != Done || !reflect.DeepEqual(res.Decision, w.result[r].Decision) {
				suspects = append(suspects, q)
			}
		}
		w.ms[r] = New(r, w.n, w.ms[r].excluded(), suspects, w.ms[r].Ballot()+1)
	}
	for _, r := range again {
		w.result[r] = nil
		w.to[r] = -1
		// What the previous round's proposers sent is dropped with their
		// connections, which they see close.
		for _, m := range w.held[r] {
			if m.ev.Kind == Propose {
				w.send(m.ev.From, Event{Kind: Lost, From: r})
			}
		}
		w.held[r] = nil
	}
	for _, r := range again {
		w.apply(r, w.ms[r].Start())
	}
	return len(again) > 0
}

// complete says whether every member of d accepted it (took part in the
// bootstrap of its communicator).
func (w *net) complete(d Decision) bool {
	for _, q := range d.Members {
		res := w.result[q]
		if w.dead[q] || res == nil || res.Kind != Done || !reflect.DeepEqual(res.Decision, d) {
			return false
		}
	}
	return true
}

// resume restarts a stopped rank: it gets what was sent to it meanwhile.
func (w *net) resume(r int) {
	w.stopped[r] = false
	w.queue = append(w.queue, w.held[r]...)
	w.held[r] = nil
}

// check verifies the outcome: every live rank finished; the ranks that
// accepted a decision all accepted the same one, and all its members did;
// every other live rank is excluded; ballots stay within n. It returns the
// decision (empty if there is none).
func (w *net) check() Decision {
	w.t.Helper()
	var d *Decision
	for r := range w.n {
		res := w.result[r]
		if w.dead[r] {
			continue
		}
		if res == nil {
			w.t.Fatalf("rank %d never finished (coordinator %d, ballot %d)", r, w.ms[r].Coordinator(), w.ms[r].Ballot())
		}
		if w.ballots[r] > uint32(w.n) {
			w.t.Fatalf("rank %d ran %d ballots with %d ranks", r, w.ballots[r], w.n)
		}
		if res.Kind != Done {
			continue
		}
		if d == nil {
			d = &res.Decision
		} else if !reflect.DeepEqual(*d, res.Decision) {
			w.t.Fatalf("split decision: %+v vs %+v (rank %d)", *d, res.Decision, r)
		}
	}
	if d == nil {
		return Decision{}
	}
	if !w.complete(*d) {
		w.t.Fatalf("decision %+v not accepted by every member (or a member died)", *d)
	}
	return *d
}

func same(s []int) func(int) []int { return func(int) []int { return s } }

func without(n int, out ...int) []int {
	var m []int
	for r := range n {
		if !slices.Contains(out, r) {
			m = append(m, r)
		}
	}
	return m
}

func TestAgreement(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		excluded  []int
		suspects  func(int) []int
		dead      []int // dead from the start
		wantCoord int
		want      []int // members; nil: no quorum, everyone excluded
	}{
		{name: "one failed rank, known to all", n: 8, suspects: same([]int{5}), dead: []int{5}, wantCoord: 0, want: without(8, 5)},
		{name: "failed rank found by the detector", n: 8, suspects: same(nil), dead: []int{5}, wantCoord: 0, want: without(8, 5)},
		{name: "dead coordinator", n: 8, suspects: same([]int{5}), dead: []int{0, 5}, wantCoord: 1, want: without(8, 0, 5)},
		{name: "first three coordinators dead", n: 8, suspects: same(nil), dead: []int{0, 1, 2}, wantCoord: 3, want: without(8, 0, 1, 2)},
		{name: "excluded on purpose", n: 4, excluded: []int{2}, suspects: same(nil), dead: []int{2}, wantCoord: 0, want: []int{0, 1, 3}},
		{name: "healthy, nobody excluded", n: 5, suspects: same(nil), wantCoord: 0, want: without(5)},
		{name: "one rank knows more", n: 6,
			suspects: func(r int) []int {
				if r == 4 {
					return []int{0}
				}
				return nil
			}, dead: []int{0}, wantCoord: 1, want: without(6, 0)},
		{name: "a suspected live rank is excluded", n: 6, suspects: same([]int{3}), wantCoord: 0, want: without(6, 3)},
		{name: "half lost, lowest kept", n: 4, suspects: same(nil), dead: []int{2, 3}, wantCoord: 0, want: []int{0, 1}},
		{name: "half lost with the lowest", n: 4, suspects: same(nil), dead: []int{0, 1}, want: nil},
		{name: "most lost", n: 8, suspects: same([]int{1, 2, 3, 4, 5}), dead: []int{1, 2, 3, 4, 5}, want: nil},
		{name: "alone", n: 1, suspects: same(nil), wantCoord: 0, want: []int{0}},
	}
	for _, tc := range tests {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("%s/%d", tc.name, seed), func(t *testing.T) {
				w := newNet(t, seed, tc.n, tc.excluded, tc.suspects)
				for _, r := range tc.dead {
					w.dead[r] = true
				}
				w.run()
				d := w.check()
				if !slices.Equal(d.Members, tc.want) {
					t.Fatalf("members %v, want %v", d.Members, tc.want)
				}
				if tc.want == nil {
					for r := range tc.n {
						if !w.dead[r] && w.result[r].Kind != Excluded {
							t.Fatalf("rank %d: %v without a quorum", r, w.result[r].Kind)
						}
					}
					return
				}
				if d.Coordinator != tc.wantCoord {
					t.Fatalf("coordinator %d, want %d", d.Coordinator, tc.wantCoord)
				}
			})
		}
	}
}

// A rank dies at every possible moment of the agreement: the others still
// agree, on a decision without it or (if it died after the decision was
// made) with it, never split.
func TestDeathDuringAgreement(t *testing.T) {
	for _, victim := range []int{0, 1, 3} {
		for at := range 40 {
			for seed := range uint64(5) {
				w := newNet(t, seed, 8, nil, same([]int{5}))
				w.dead[5] = true
				w.hook = func(w *net, step int) {
					if step == at && !w.dead[victim] {
						w.kill(victim)
					}
				}
				w.run()
				d := w.check()
				if len(d.Members) < 5 || slices.Contains(d.Members, 5) {
					t.Fatalf("victim %d at step %d seed %d: members %v", victim, at, seed, d.Members)
				}
			}
		}
	}
}

// Two ranks die during the agreement, the second while the survivors
// handle the first.
func TestTwoDeathsDuringAgreement(t *testing.T) {
	for at := range 30 {
		for seed := range uint64(5) {
			w := newNet(t, seed, 8, nil, same(nil))
			w.hook = func(w *net, step int) {
				if step == at {
					w.kill(0)
				}
				if step == at+3 {
					w.kill(2)
				}
			}
			w.run()
			d := w.check()
			if d.Members == nil {
				t.Fatalf("step %d seed %d: no decision", at, seed)
			}
		}
	}
}

// A rank stops (SIGSTOP) at some moment: the others exclude it, or keep it
// if it proposed before stopping and the decision did not wait on it, all
// of them alike. When it resumes after the others left, it is excluded:
// it never forms a communicator of its own.
func TestStoppedRank(t *testing.T) {
	for _, victim := range []int{0, 2, 7} {
		for at := range 40 {
			for seed := range uint64(4) {
				w := newNet(t, seed, 8, nil, same(nil))
				w.hook = func(w *net, step int) {
					if step == at {
						w.stopped[victim] = true
					}
				}
				w.run()
				// The others are over; the stopped rank has not finished.
				if w.stopped[victim] {
					for r := range w.n {
						if r != victim && w.result[r] == nil {
							t.Fatalf("victim %d at %d seed %d: rank %d stuck behind the stopped rank", victim, at, seed, r)
						}
					}
					w.resume(victim)
					w.loop()
				}
				d := w.check()
				if len(d.Members) < 7 && slices.Contains(d.Members, victim) {
					t.Fatalf("members %v", d.Members)
				}
				if !d.Has(victim) && w.result[victim].Kind != Excluded {
					t.Fatalf("victim %d at %d seed %d: %v, members %v", victim, at, seed, w.result[victim], d.Members)
				}
			}
		}
	}
}

// Each ballot suspects one more rank: with the first ranks dying one after
// the other as each becomes the coordinator, no rank runs more than n
// ballots, and the survivors still agree.
func TestBallotBound(t *testing.T) {
	const n = 9
	for seed := range uint64(20) {
		w := newNet(t, seed, n, nil, same(nil))
		next := 0
		w.hook = func(w *net, step int) {
			// Kill the coordinator most ranks wait for, up to four times.
			if next < 4 && step%7 == 3 {
				w.kill(next)
				next++
			}
		}
		w.run()
		d := w.check()
		if len(d.Members) == 0 {
			t.Fatalf("seed %d: no decision", seed)
		}
	}
}

func TestSelfSuspected(t *testing.T) {
	m := New(2, 4, nil, []int{2}, 1)
	acts := m.Start()
	if len(acts) != 1 || acts[0].Kind != Excluded || !m.Over() {
		t.Fatalf("start of a suspected rank: %+v", acts)
	}
}

// A decision from a coordinator the rank left, or for an older ballot, is
// ignored.
func TestStaleDecision(t *testing.T) {
	m := New(3, 4, nil, nil, 1)
	if a := m.Start(); len(a) != 1 || a[0].Kind != SendPropose || a[0].To != 0 {
		t.Fatalf("start: %+v", a)
	}
	if a := m.Step(Event{Kind: Lost, From: 0}); len(a) != 2 || a[0].Kind != Leave || a[1].To != 1 || a[1].Ballot != 2 {
		t.Fatalf("after losing rank 0: %+v", a)
	}
	d := Decision{Coordinator: 0, Ballot: 1, Members: []int{0, 1, 2, 3}}
	if a := m.Step(Event{Kind: Decide, From: 0, Ballot: 1, Decision: d}); a != nil {
		t.Fatalf("decision from the lost coordinator accepted: %+v", a)
	}
	d.Coordinator = 1
	if a := m.Step(Event{Kind: Decide, From: 1, Ballot: 1, Decision: d}); a != nil {
		t.Fatalf("decision for an old ballot accepted: %+v", a)
	}
	d.Members = []int{1, 2, 3}
	if a := m.Step(Event{Kind: Decide, From: 1, Ballot: 2, Decision: d}); len(a) != 1 || a[0].Kind != Done {
		t.Fatalf("current decision: %+v", a)
	}
}
