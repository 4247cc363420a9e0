package ocs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/occl/occl/topo"
)

// Switching delays of real optical circuit switches, for NewEmulated.
const (
	// PiezoDelay is the reconfiguration time of a piezo-steered MEMS
	// switch such as a Polatis (10-25 ms specified).
	PiezoDelay = 25 * time.Millisecond
	// TransceiverDelay is the reconfiguration time of a switch built from
	// tunable transceivers, as in InfinitePOD.
	TransceiverDelay = time.Millisecond
)

// MaxEmulatedPorts is the largest switch NewEmulated builds.
const MaxEmulatedPorts = 1 << 16

// ErrInjected is the error (wrapped) of an Apply that failed because of
// Emulated.FailNextApply.
var ErrInjected = errors.New("injected switch fault")

// EmulatedStats counts what an Emulated switch did.
type EmulatedStats struct {
	// Applies counts calls of Apply, failed ones included.
	Applies int
	// Connects and Disconnects count cross-connects made and torn down.
	Connects    int
	Disconnects int
}

// Emulated is an in-memory optical circuit switch with a configurable
// switching delay and fault injection. It implements Switch and is safe for
// concurrent use; Applies run one at a time.
//
// An Apply takes the switching delay (plus any SlowApply delay) as a whole,
// like a switch that moves all its mirrors at once, but its changes complete
// one after another spread over that time, removals first, so that a
// cancelled or failing Apply leaves a partial, reported progress.
type Emulated struct {
	ports   int
	delay   time.Duration
	changes chan struct{}

	applyMu sync.Mutex // serializes Apply

	mu        sync.Mutex // guards the fields below
	peer      []int      // peer[p] is p's partner, or -1
	failed    []bool
	extra     time.Duration
	failAfter int // connects the next Apply makes before failing; -1 when disarmed
	stats     EmulatedStats
}

var _ Switch = (*Emulated)(nil)

// NewEmulated returns an emulated switch with the given number of ports, no
// cross-connects, and the given switching delay per Apply (PiezoDelay,
// TransceiverDelay, or 0 for instant switching).
func NewEmulated(ports int, delay time.Duration) (*Emulated, error) {
	if ports < 2 || ports > MaxEmulatedPorts {
		return nil, fmt.Errorf("ocs: emulated switch: %d ports, want 2 to %d", ports, MaxEmulatedPorts)
	}
	if delay < 0 {
		return nil, fmt.Errorf("ocs: emulated switch: negative switching delay %v", delay)
	}
	e := &Emulated{
		ports:     ports,
		delay:     delay,
		changes:   make(chan struct{}, 1),
		peer:      make([]int, ports),
		failed:    make([]bool, ports),
		failAfter: -1,
	}
	for i := range e.peer {
		e.peer[i] = -1
	}
	return e, nil
}

// Ports returns the number of ports.
func (e *Emulated) Ports() int { return e.ports }

// Delay returns the switching delay given to NewEmulated.
func (e *Emulated) Delay() time.Duration { return e.delay }

// Connections returns the installed cross-connects, sorted.
func (e *Emulated) Connections(ctx context.Context) ([]topo.Circuit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []topo.Circuit
	for a, b := range e.peer {
		if b > a {
			out = append(out, topo.Circuit{A: a, B: b})
		}
	}
	return out, nil
}

// FailedPorts returns the failed ports in increasing order.
func (e *Emulated) FailedPorts(ctx context.Context) ([]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int
	for p, f := range e.failed {
		if f {
			out = append(out, p)
		}
	}
	return out, nil
}

// Changes returns the channel signalled when a port fails or is repaired.
func (e *Emulated) Changes() <-chan struct{} { return e.changes }

// FailPort marks port p failed: its cross-connect (if any) stays configured
// but no new one can use it until RepairPort.
func (e *Emulated) FailPort(p int) error { return e.setFailed(p, true) }

// RepairPort returns a failed port p to service.
func (e *Emulated) RepairPort(p int) error { return e.setFailed(p, false) }

func (e *Emulated) setFailed(p int, failed bool) error {
	if p < 0 || p >= e.ports {
		return fmt.Errorf("ocs: emulated switch: no port %d (ports 0-%d)", p, e.ports-1)
	}
	e.mu.Lock()
	changed := e.failed[p] != failed
	e.failed[p] = failed
	e.mu.Unlock()
	if changed {
		select {
		case e.changes <- struct{}{}:
		default: // a signal is already pending
		}
	}
	return nil
}

// FailNextApply arms a one-shot fault: the next Apply does all its removals,
// makes at most afterN connects and then fails with an error wrapping
// ErrInjected (after making all of them if it has afterN or fewer). A
// negative afterN disarms the fault.
func (e *Emulated) FailNextApply(afterN int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failAfter = max(afterN, -1)
}

// SlowApply adds extra to the switching time of every following Apply (0
// restores the normal delay).
func (e *Emulated) SlowApply(extra time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.extra = max(extra, 0)
}

// Stats returns what the switch did so far.
func (e *Emulated) Stats() EmulatedStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Apply tears down remove, then makes add, taking the switching delay. It
// validates the whole request before changing anything.
func (e *Emulated) Apply(ctx context.Context, remove, add []topo.Circuit) (Progress, error) {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()

	e.mu.Lock()
	e.stats.Applies++
	failAfter := e.failAfter
	e.failAfter = -1
	total := e.delay + e.extra
	err := e.check(remove, add)
	e.mu.Unlock()
	var prog Progress
	if err != nil {
		return prog, err
	}
	if err := ctx.Err(); err != nil {
		return prog, err
	}

	ops := len(remove) + len(add)
	start := time.Now()
	timer := time.NewTimer(time.Hour)
	timer.Stop() // since Go 1.23 Reset needs no draining
	defer timer.Stop()
	// wait blocks until the i-th of ops changes is due.
	wait := func(i int) error {
		due := start.Add(time.Duration(int64(total) * int64(i+1) / int64(ops)))
		d := time.Until(due)
		if d <= 0 {
			return ctx.Err()
		}
		timer.Reset(d)
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	for i, c := range remove {
		if err := wait(i); err != nil {
			return prog, fmt.Errorf("ocs: emulated switch: tearing down %v: %w", c, err)
		}
		c = c.Normalize()
		e.mu.Lock()
		e.peer[c.A], e.peer[c.B] = -1, -1
		e.stats.Disconnects++
		e.mu.Unlock()
		prog.Removed = append(prog.Removed, c)
	}
	for i, c := range add {
		if failAfter >= 0 && i == failAfter {
			return prog, fmt.Errorf("ocs: emulated switch: making %v after %d connects: %w", c, i, ErrInjected)
		}
		if err := wait(len(remove) + i); err != nil {
			return prog, fmt.Errorf("ocs: emulated switch: making %v: %w", c, err)
		}
		c = c.Normalize()
		e.mu.Lock()
		if e.failed[c.A] || e.failed[c.B] {
			p := c.A
			if !e.failed[p] {
				p = c.B
			}
			e.mu.Unlock()
			return prog, fmt.Errorf("ocs: emulated switch: making %v: port %d failed", c, p)
		}
		e.peer[c.A], e.peer[c.B] = c.B, c.A
		e.stats.Connects++
		e.mu.Unlock()
		prog.Added = append(prog.Added, c)
	}
	if failAfter >= 0 && failAfter >= len(add) {
		return prog, fmt.Errorf("ocs: emulated switch: after %d connects: %w", len(add), ErrInjected)
	}
	return prog, nil
}

// check validates an Apply request against the current state. e.mu is held.
func (e *Emulated) check(remove, add []topo.Circuit) error {
	inRange := func(c topo.Circuit) error {
		if c.A < 0 || c.A >= e.ports || c.B < 0 || c.B >= e.ports || c.A == c.B {
			return fmt.Errorf("ocs: emulated switch: bad cross-connect %v (ports 0-%d)", c, e.ports-1)
		}
		return nil
	}
	freed := make(map[int]bool, 2*len(remove))
	for _, c := range remove {
		if err := inRange(c); err != nil {
			return err
		}
		if e.peer[c.A] != c.B || freed[c.A] {
			return fmt.Errorf("ocs: emulated switch: cannot tear down %v: not installed", c)
		}
		freed[c.A], freed[c.B] = true, true
	}
	used := make(map[int]bool, 2*len(add))
	for _, c := range add {
		if err := inRange(c); err != nil {
			return err
		}
		for _, p := range []int{c.A, c.B} {
			if used[p] {
				return fmt.Errorf("ocs: emulated switch: port %d used twice", p)
			}
			used[p] = true
			if e.peer[p] >= 0 && !freed[p] {
				return fmt.Errorf("ocs: emulated switch: cannot make %v: port %d is connected to %d", c, p, e.peer[p])
			}
			if e.failed[p] {
				return fmt.Errorf("ocs: emulated switch: cannot make %v: port %d failed", c, p)
			}
		}
	}
	return nil
}

// sortedInts returns a sorted copy of xs.
func sortedInts(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
