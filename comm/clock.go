package comm

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/occl/occl/internal/tsc"
)

// clockBase is when the process started using occl, as read from both the
// wall and the monotonic clock; tscBase is the time-stamp counter at that
// moment (the midpoint of two readings around it).
var clockBase, tscBase = basePair()

// pairTries is how many times a clock reading is bracketed by counter
// readings to find one the thread was not descheduled in the middle of:
// the rate of the counter is measured from these pairs, and a pair taken
// across a preemption (milliseconds on a loaded machine) would skew every
// stamp after it.
const pairTries = 4

// basePair reads the wall and monotonic clock with the counter at the
// same moment.
func basePair() (time.Time, uint64) { return bracketed(time.Now) }

// clockPair reads the monotonic clock (since clockBase) with the counter
// at the same moment.
func clockPair() (time.Duration, uint64) {
	return bracketed(func() time.Duration { return time.Since(clockBase) })
}

// bracketed calls read between two counter readings, pairTries times, and
// returns the result whose counter readings lie closest, with their
// midpoint.
func bracketed[T any](read func() T) (T, uint64) {
	var best T
	var ticks uint64
	gap := ^uint64(0)
	for range pairTries {
		t1 := tsc.Read()
		v := read()
		t2 := tsc.Read()
		if t2-t1 < gap {
			gap, best, ticks = t2-t1, v, t1+(t2-t1)/2
		}
	}
	return best, ticks
}

// stamp is a reading of the monotonic clock, in nanoseconds since
// clockBase: what an operation records of when it ran. Reading it costs one
// clock read and a subtraction, where time.Now reads the wall clock too and
// building a time.Time from a monotonic reading costs as much again. It
// becomes a time.Time only when someone looks (time).
//
// Where the kernel keeps time with the processor's time-stamp counter
// (tsc.Trusted: its clock source is the counter, or a paravirtual clock
// whose vDSO reads the counter), stamps are read from the counter: 9-11 ns
// a read instead of 23-27 on a virtual machine, twice per operation. The
// counter is anchored to the monotonic clock every anchorEvery, at its
// rate measured since the process started, so that stamps stay within a
// fraction of a microsecond of the monotonic clock and never go back: an
// anchor that finds the last one ahead of the clock starts from its
// reading and slews to meet the clock. A counter whose rate changes is not
// trusted any more, by the kernel (or, behind a paravirtual clock, by the
// vDSO's fallback to the system call) and then by stamps (recheckEvery).
// A communicator that records a timeline reads the monotonic clock itself
// (Communicator.now): the timeline orders operations among events read
// with time.Now.
type stamp int64

// calibration is how long stamps come from the monotonic clock before the
// counter's rate is first measured from it; anchorEvery is how long an
// anchor serves.
//
// recheckEvery is how often the kernel's choice of clock is read again: it
// stops keeping time with a counter its watchdog finds drifting, and so do
// stamps.
const (
	calibration  = 10 * time.Millisecond
	anchorEvery  = 10 * time.Millisecond
	recheckEvery = time.Second
)

// recheckAt is when slowNow next reads the kernel's choice of clock.
var recheckAt atomic.Int64

// recheck reads the kernel's choice of clock again: tsc.Recheck, or what
// a test puts in its place.
var recheck atomic.Pointer[func() bool]

func init() {
	f := tsc.Recheck
	recheck.Store(&f)
}

// recheckClock stops stamps from reading the counter if the kernel no
// longer keeps time with it.
func recheckClock() {
	if !(*recheck.Load())() {
		anchor.Store(nil)
	}
}

// tscAnchor ties a counter reading to a stamp: a reading t of the counter
// from ticks to next is the stamp ns plus (t-ticks) times mult, the
// nanoseconds per tick in 32.32 fixed point.
type tscAnchor struct {
	ticks, next uint64
	ns          int64
	mult        uint64
}

// at returns the stamp of counter reading t, which is not before a.ticks.
func (a *tscAnchor) at(t uint64) stamp {
	hi, lo := bits.Mul64(t-a.ticks, a.mult)
	return stamp(a.ns + int64(hi<<32|lo>>32))
}

// anchor is the current anchor, nil until the first calibration (for ever
// where the counter is not trusted).
var anchor atomic.Pointer[tscAnchor]

// now reads the monotonic clock.
func now() stamp {
	if a := anchor.Load(); a != nil {
		if t := tsc.Read(); t >= a.ticks && t < a.next {
			return a.at(t)
		}
	}
	return slowNow()
}

// slowNow reads the monotonic clock through the runtime and, past the
// calibration window where the counter is trusted, anchors the counter to
// it. Goroutines that anchor at once each store a valid anchor.
func slowNow() stamp {
	d := time.Since(clockBase)
	if d < calibration || !tsc.Trusted() {
		return stamp(d)
	}
	if at := recheckAt.Load(); int64(d) >= at && recheckAt.CompareAndSwap(at, int64(d+recheckEvery)) {
		// Off the caller's path: a recheck reads a file and, on a
		// paravirtual clock, times the vDSO (13 to 40 us), which an
		// operation would otherwise pay once a second. The anchor made
		// below meanwhile serves at most anchorEvery.
		go recheckClock()
	}
	// Read again: Trusted and Recheck read a file.
	d, t := clockPair()
	if t <= tscBase {
		return stamp(d)
	}
	mult := uint64(float64(d) / float64(t-tscBase) * (1 << 32))
	every := uint64(float64(anchorEvery) / float64(mult) * (1 << 32))
	s := stamp(d)
	if a := anchor.Load(); a != nil && t >= a.ticks {
		// The last anchor's reading of t, if ahead of the clock, is where
		// this anchor starts, so that stamps never go back; it runs
		// slower so as to meet the clock when it ends (slewing, as NTP
		// does). Ahead by a whole window, the counter ran off (its rate
		// changed), and the clock wins.
		if e := a.at(t); e > s && e-s < stamp(anchorEvery) {
			mult = uint64(float64(stamp(d)+stamp(anchorEvery)-e) / float64(every) * (1 << 32))
			s = e
		}
	}
	anchor.Store(&tscAnchor{ticks: t, next: t + every, ns: int64(s), mult: mult})
	return s
}

// time returns s as a time.Time: clockBase's wall time plus the monotonic
// time elapsed since, so that it compares and subtracts like any time.Now
// reading (through its monotonic part) and prints as wall time (which
// differs from the wall clock by as much as the wall clock was adjusted
// since the process started). The zero stamp stays the zero time.
func (s stamp) time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return clockBase.Add(time.Duration(s))
}

// add returns s moved by d.
func (s stamp) add(d time.Duration) stamp { return s + stamp(d) }

// addSat returns s moved forward by d (at least 0), or the latest stamp
// there is where that overflows.
func (s stamp) addSat(d time.Duration) stamp {
	if s > math.MaxInt64-stamp(d) {
		return math.MaxInt64
	}
	return s + stamp(d)
}
