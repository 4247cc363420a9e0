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
	"sync"
)

// clocksource is where Linux names the clock it keeps time with.
const clocksource = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

var trusted = sync.OnceValue(func() bool {
	if !Supported {
		return false
	}
	b, err := os.ReadFile(clocksource)
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
})

// Trusted reports whether the counter can serve as a monotonic clock here:
// the processor has one Read can reach, and the kernel keeps time with it,
// which it does only once it has found the counter invariant (constant
// rate, running in every power state) and synchronized across processors.
// It reads the kernel's choice once.
func Trusted() bool { return trusted() }
