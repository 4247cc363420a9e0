package shm

import (
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
