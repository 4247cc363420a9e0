package comm

import "time"

// clockBase is when the process started using occl, as read from both the
// wall and the monotonic clock.
var clockBase = time.Now()

// now reads the time for an operation's record from the monotonic clock
// alone: time.Now reads the wall clock too, and each reading costs tens of
// nanoseconds on a virtual machine, twice per operation. The result has
// clockBase's wall time plus the monotonic time elapsed since, so it
// compares and subtracts like any time.Now reading (through its monotonic
// part) and prints as wall time (which differs from the wall clock by as
// much as the wall clock was adjusted since the process started).
func now() time.Time { return clockBase.Add(time.Since(clockBase)) }
