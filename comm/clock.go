package comm

import "time"

// clockBase is when the process started using occl, as read from both the
// wall and the monotonic clock.
var clockBase = time.Now()

// stamp is a reading of the monotonic clock, in nanoseconds since
// clockBase: what an operation records of when it ran. Reading it costs one
// clock read and a subtraction, where time.Now reads the wall clock too and
// building a time.Time from a monotonic reading costs as much again (tens of
// nanoseconds each on a virtual machine, twice per operation). It becomes a
// time.Time only when someone looks (time).
type stamp int64

// now reads the monotonic clock.
func now() stamp { return stamp(time.Since(clockBase)) }

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
