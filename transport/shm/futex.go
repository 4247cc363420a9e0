package shm

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations. The ring lives in memory shared between processes, so
// the process-private variants (FUTEX_*_PRIVATE) must not be used: the
// kernel keys these waits by the backing file page, not by the address.
const (
	futexOpWait = 0 // FUTEX_WAIT
	futexOpWake = 1 // FUTEX_WAKE
)

// futexWait sleeps while *w == val, for at most d. Spurious and early
// returns are harmless: callers re-check their condition in a loop.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the sleepers on w.
func futexWake(w *atomic.Uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWake, 1<<30, 0, 0, 0)
}

// bump changes the futex word w and wakes whoever sleeps on it. Changing
// the word first makes a FUTEX_WAIT that is about to start with the old
// value return at once, so the wake-up cannot be lost.
func bump(w *atomic.Uint32) {
	w.Add(1)
	futexWake(w)
}

// yieldCore gives the calling thread's core away (sched_yield), so that a
// process runnable on it, most likely the peer being waited for, runs now
// instead of after a futex wake-up. It reports false, and gives nothing
// away, while yielding is off: when a yield took longer than slowYield,
// some process that does not wait for anyone (a computation, a build)
// shares the core, and each yield would hand it a whole time slice, so
// waits sleep at once for yieldBackoff.
func yieldCore() bool {
	now := time.Now()
	if now.UnixNano() < yieldOff.Load() {
		return false
	}
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	if took := time.Since(now); took > slowYield {
		yieldOff.Store(now.Add(took + yieldBackoff).UnixNano())
		return false
	}
	return true
}

// yieldOff is the time (Unix nanoseconds) until which yieldCore does not
// yield; shared by the process's connections.
var yieldOff atomic.Int64

const (
	// yieldRounds bounds how many times one wait yields before it
	// sleeps on the futex.
	yieldRounds = 128
	// slowYield is the longest a yield may take before yielding stops:
	// far more than a peer's turn, far less than a time slice.
	slowYield = 200 * time.Microsecond
	// yieldBackoff is how long yielding stays off after a slow yield.
	yieldBackoff = 100 * time.Millisecond
)

// giveWay lets others run for a moment in a wait while the processes
// outnumber the cores: this process's other goroutines (runtime.Gosched;
// from a thread locked to its goroutine, as a call from C is, that also
// puts the thread to sleep until the scheduler hands it back, which
// measured best for 4 ranks on 2 cores through torch.distributed) and the
// processes sharing the core (yieldCore).
func giveWay() {
	runtime.Gosched()
	yieldCore()
}
