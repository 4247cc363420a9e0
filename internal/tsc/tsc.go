// Package tsc reads the processor's time-stamp counter, a clock that costs
// a third of what a monotonic clock read through the kernel's vDSO costs
// (9 against 23 ns on a KVM guest), for code that reads the time on every
// operation. The counter counts ticks, not nanoseconds: callers calibrate
// it against the monotonic clock, and use it only where the kernel itself
// keeps time with it (Trusted).
package tsc

import (
	"os"
	"strings"
	"sync/atomic"
)

// clocksource is where Linux names the clock it keeps time with.
const clocksource = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// trusted caches the kernel's choice: 0 not read yet, 1 the counter, 2
// another clock.
var trusted atomic.Int32

// Trusted reports whether the counter can serve as a monotonic clock here:
// the processor has one Read can reach, and the kernel keeps time with it,
// which it does only once it has found the counter invariant (constant
// rate, running in every power state) and synchronized across processors.
// It reads the kernel's choice the first time and after Recheck.
func Trusted() bool {
	switch trusted.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	return Recheck()
}

// Recheck reads the kernel's choice again (the kernel stops keeping time
// with a counter its watchdog finds drifting) and reports whether the
// counter is still trusted.
func Recheck() bool {
	ok := false
	if Supported {
		b, err := os.ReadFile(clocksource)
		ok = err == nil && strings.TrimSpace(string(b)) == "tsc"
	}
	if ok {
		trusted.Store(1)
	} else {
		trusted.Store(2)
	}
	return ok
}
