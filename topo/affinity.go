package topo

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CPUShare returns the CPUs local rank localRank of localSize should use:
// the CPUs this process may run on, split into localSize contiguous groups
// as evenly as possible. When there are more ranks than CPUs, ranks share
// CPUs round-robin. It is pure arithmetic over allowed, so it can be tested
// without a machine.
func CPUShare(allowed []int, localRank, localSize int) []int {
	n := len(allowed)
	if n == 0 || localSize <= 0 || localRank < 0 || localRank >= localSize {
		return nil
	}
	if localSize >= n {
		return []int{allowed[localRank%n]}
	}
	lo := localRank * n / localSize
	hi := (localRank + 1) * n / localSize
	return append([]int(nil), allowed[lo:hi]...)
}

// AllowedCPUs returns the CPUs the calling process may run on.
func AllowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// BindProcess pins every thread of this process to cpus and sets
// GOMAXPROCS to their number, so that the local ranks of a host do not
// compete for the same cores (as mpirun's default binding does). Threads
// created later inherit the mask from the thread that creates them.
func BindProcess(cpus []int) error {
	if len(cpus) == 0 {
		return fmt.Errorf("bind: no CPUs")
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	// Twice: a thread created during the first pass may have been cloned
	// from one not pinned yet.
	for pass := 0; pass < 2; pass++ {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("bind: list threads: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("bind: sched_setaffinity of thread %d: %w", tid, err)
			}
		}
	}
	runtime.GOMAXPROCS(len(cpus))
	return nil
}

// OnlineCPUs returns the number of CPUs online on this host (whatever this
// process is bound to), or runtime.NumCPU when sysfs does not say.
func OnlineCPUs() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := len(ParseCPUList(strings.TrimSpace(string(b)))); n > 0 {
			return n
		}
	}
	return runtime.NumCPU()
}
