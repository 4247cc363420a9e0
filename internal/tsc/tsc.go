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
// the processor has one Read can reach, and the kernel keeps time with it.
// It does where its clock source is the counter itself ("tsc"), which it
// chooses only once it has found the counter invariant (constant rate,
// running in every power state) and synchronized across processors. On a
// virtual machine the source is usually the hypervisor's paravirtual clock
// instead (kvm-clock, Hyper-V's TSC page, Xen), which is the counter scaled
// by parameters the hypervisor publishes; the vDSO reads it without
// entering the kernel only while the hypervisor vouches for the counter
// being stable and the same on every virtual processor, and falls back to
// a system call otherwise. There the counter is trusted when a vDSO read of
// the monotonic clock costs less than a quarter of the system call
// (vdsoReadsCounter): tens of nanoseconds against a microsecond or more.
// Trusted reads the kernel's choice the first time and after Recheck.
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
// with a counter its watchdog finds drifting, and a hypervisor can
// withdraw its stable flag), and reports whether the counter is still
// trusted. On a paravirtual clock it also times the vDSO again (8 system
// calls: 14 us of Recheck's 40 on a 2-core KVM guest).
func Recheck() bool {
	ok := false
	if Supported {
		b, err := os.ReadFile(clocksource)
		ok = err == nil && trusts(strings.TrimSpace(string(b)), vdsoReadsCounter)
	}
	if ok {
		trusted.Store(1)
	} else {
		trusted.Store(2)
	}
	return ok
}

// paravirtual names the clock sources that are the counter scaled by the
// hypervisor's parameters, which the vDSO reads from the counter while the
// hypervisor marks it stable.
var paravirtual = map[string]bool{
	"kvm-clock":                   true,
	"hyperv_clocksource_tsc_page": true,
	"xen":                         true,
}

// trusts reports whether the kernel's clock source keeps time with the
// counter: the counter itself, or a paravirtual clock that vdso (called
// only for those) finds read from the counter.
func trusts(source string, vdso func() bool) bool {
	switch {
	case source == "tsc":
		return true
	case paravirtual[source]:
		return vdso()
	}
	return false
}

// cheaper reports whether the vDSO read, vdso ticks at best, costs less
// than a quarter of the system call's sys ticks.
func cheaper(vdso, sys uint64) bool { return vdso > 0 && vdso*4 < sys }
