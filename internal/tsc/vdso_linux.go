package tsc

import (
	"time"

	"golang.org/x/sys/unix"
)

// vdsoSamples is how many reads of each kind vdsoReadsCounter times: the
// fastest counts, so a read preempted or interrupted in between costs
// nothing but its sample.
const vdsoSamples = 8

// vdsoReadsCounter reports whether the runtime's read of the monotonic
// clock (through the vDSO) costs less than a quarter of the same read by a
// system call, timed with the counter: the vDSO then reads the clock from
// the counter, which on a paravirtual clock it does only while the
// hypervisor marks the counter stable (Linux's vread_pvclock and its
// Hyper-V and Xen counterparts fall back to the system call otherwise).
func vdsoReadsCounter() bool {
	return cheaper(vdsoTicks(), syscallTicks())
}

// vdsoTicks returns the fewest counter ticks a read of the monotonic clock
// through the runtime (time.Since reads only that clock) took.
func vdsoTicks() uint64 {
	base := time.Now()
	return fewestTicks(func() { _ = time.Since(base) })
}

// syscallTicks returns the fewest counter ticks a clock_gettime system
// call for the monotonic clock took.
func syscallTicks() uint64 {
	var ts unix.Timespec
	return fewestTicks(func() { _ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) })
}

// fewestTicks returns the fewest counter ticks of vdsoSamples calls of f.
func fewestTicks(f func()) uint64 {
	best := ^uint64(0)
	for range vdsoSamples {
		t := Read()
		f()
		if d := Read() - t; d < best {
			best = d
		}
	}
	return best
}
