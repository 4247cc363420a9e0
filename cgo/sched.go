package main

import (
	"runtime"
	"sync/atomic"
	"time"
)

// A thread of the caller (a C or Python thread) that calls into Go runs
// its calls on a goroutine bound to it which never passes through the Go
// scheduler: each call takes a processor (P) on entry and leaves it to
// the thread, marked as in a system call, on return. The runtime's monitor
// (sysmon) takes as stuck a P whose goroutine has not been rescheduled for
// 10 ms, and from then on takes that P back on every pass, which keeps the
// monitor itself waking every 20 us (retake and sysmon in the runtime's
// proc.go, Go 1.26): on a machine whose CPUs the ranks fill, each of
// those wake-ups takes the CPU of a rank's thread. With
// torch.distributed at 2 processes on 2 CPUs (32 B all_to_all_single with
// 60 us of Python between calls) a main thread was preempted by the
// process's own threads a thousand times a second.
//
// schedPass breaks that: every call from C passes its goroutine through
// the scheduler (runtime.Gosched) if none has for schedPassEvery, so the
// monitor sees the P's goroutine rescheduled. A pass costs two thread
// hand-overs (the goroutine is locked to its thread): a median of 118 us
// (27-263 us from the 10th to the 90th percentile) on a 2-CPU virtual
// machine, at most once per schedPassEvery.
type schedPass struct {
	every time.Duration
	last  atomic.Int64 // when the last pass began, in now's units
	now   func() int64
	yield func()
}

// schedPassEvery is half the monitor's 10 ms.
const schedPassEvery = 5 * time.Millisecond

// passes is the process's schedPass, used by begin.
var passes = newSchedPass(schedPassEvery, runtime.Gosched)

// schedBase anchors the monotonic clock schedPass reads.
var schedBase = time.Now()

// newSchedPass returns a schedPass that calls yield at most once per every.
func newSchedPass(every time.Duration, yield func()) *schedPass {
	return &schedPass{every: every, now: func() int64 { return int64(time.Since(schedBase)) }, yield: yield}
}

// maybe yields if no call has for p.every. Of calls racing for the same
// pass one yields.
func (p *schedPass) maybe() {
	now, last := p.now(), p.last.Load()
	if now-last < int64(p.every) || !p.last.CompareAndSwap(last, now) {
		return
	}
	p.yield()
}
