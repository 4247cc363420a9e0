package transport

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// CoreYieldRounds is how many times a wait under WithCoreYield gives its
// core to the other processes (sched_yield; one of them may be the peer
// it waits for) before it sleeps, when the processes outnumber the cores.
const CoreYieldRounds = 512

// The guard of CoreYield. A peer hands a core back within microseconds;
// another program keeps it for its whole time slice, milliseconds. A
// yield that keeps a wait away for more than coreYieldSlow is slow; after
// a second slow one within coreYieldSlowWindow of the first, the waits
// stop yielding their core for a while and only sleep, which a peer's
// wake-up ends at once. A lone slow yield (an interrupt, a kernel thread,
// the runtime's own threads) changes nothing: backing off for a second on
// one made 4 ranks on 2 cores sleep instead of yield, and their small
// operations 2-4 times slower, every now and then.
//
// The while is coreYieldBackoffMin at first and doubles, up to
// coreYieldBackoffMax, each time the waits back off again within
// coreYieldCalm of the last back-off's end: a program that keeps taking
// the core is soon left alone for a second at a time, while a burst of
// slow yields (processes starting beside the ranks, a virtual machine's
// host taking the core for a moment) costs tens of milliseconds. A fixed
// second made the first second of a job's small operations sleep: at 4
// processes on 2 cores the ranks' own start-up had their yields slow, and
// an 8 B to 64 KiB sweep of occl-bench ran inside the back-off.
//
// A back-off ends early when the core is free again: while it lasts, one
// wait at most every coreYieldProbeEvery (or an eighth of the back-off,
// if longer) yields anyway, as a probe, and a probe that comes back fast
// ends the back-off. A slow probe counts as any slow yield. The back-off's
// end is recorded as it happened, so the next one still doubles. Without
// probes, a program that held the core for a moment kept the waits asleep
// for as long as the grown back-offs lasted: with a Python interpreter
// starting beside 4 ranks on 2 cores (reading occl-bench's output), the
// first 64 B AllToAlls took 12.8-44.6 us a call (8 rounds, median 18.7)
// and with probes 5.0-15.1 (median 8.9), against 4.1-5.0 with nothing
// beside them; beside a busy loop, 134-197 us with probes and 153-165
// without.
const (
	coreYieldSlow       = time.Millisecond
	coreYieldSlowWindow = 100 * time.Millisecond
	coreYieldBackoffMin = 20 * time.Millisecond
	coreYieldBackoffMax = time.Second
	coreYieldCalm       = 5 * time.Second
	coreYieldProbeEvery = 20 * time.Millisecond
)

// CoreYield decides whether the waits of one connection may give their
// core away (see WithCoreYield), from how long their recent yields took.
// Its zero value allows yields. It is safe for concurrent use.
//
// A wait calls Begin, gives the core away with SchedYield if Begin
// allows it, and then calls End with what Begin returned.
type CoreYield struct {
	off     atomic.Int64 // monotonic time until which Begin refuses
	slow    atomic.Int64 // monotonic time the last slow yield ended
	backoff atomic.Int64 // the last back-off's length, 0 before the first
	probe   atomic.Int64 // monotonic time from which a back-off's next probe may yield
}

// Begin reports whether a wait may give its core away now, and the time
// to pass to End once it has: yes outside a back-off, and for one probe
// every coreYieldProbeEvery or more within one.
func (y *CoreYield) Begin() (start int64, ok bool) {
	start = monotonic()
	if start >= y.off.Load() {
		return start, true
	}
	p := y.probe.Load()
	return start, start >= p && y.probe.CompareAndSwap(p, start+probeGap(y.backoff.Load()))
}

// End records a yield that began at start (from Begin). A fast yield
// within a back-off (a probe) ends it.
func (y *CoreYield) End(start int64) {
	end := monotonic()
	if end-start <= int64(coreYieldSlow) {
		if off := y.off.Load(); end < off {
			y.off.CompareAndSwap(off, end)
		}
		return
	}
	if last := y.slow.Swap(end); last != 0 && end-last < int64(coreYieldSlowWindow) {
		d := y.nextBackoff(end)
		y.probe.Store(end + probeGap(d))
		y.off.Store(end + d)
	}
}

// probeGap is the least time between two probes of a back-off of d.
func probeGap(d int64) int64 { return max(int64(coreYieldProbeEvery), d/8) }

// nextBackoff returns the length of a back-off that starts at now and
// records it: coreYieldBackoffMin, or twice the last one (at most
// coreYieldBackoffMax) if that ended less than coreYieldCalm ago.
func (y *CoreYield) nextBackoff(now int64) int64 {
	d := int64(coreYieldBackoffMin)
	if last := y.backoff.Load(); last > 0 && now-y.off.Load() < int64(coreYieldCalm) {
		d = min(2*last, int64(coreYieldBackoffMax))
	}
	y.backoff.Store(d)
	return d
}

// SchedYield gives the calling thread's core to the other threads that
// wait for it. It is a raw system call: the Go runtime is not told, so
// the thread keeps its processor through the yield and pays no entry and
// exit bookkeeping; told, the runtime's monitor may hand the processor to
// another thread when a yield lasts over 20 us, for the thread to take
// back through the scheduler. With 4 processes on 2 cores (occl-bench -z
// 1, 3 interleaved rounds, shared memory): 8 B AllReduce 5.8-6.3 -> 3.2-4.0
// us, 64 B AllToAll 4.0-5.7 -> 3.3-4.2 us. The goroutines it keeps from
// running meanwhile would run on this core, which is given away.
func SchedYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// clockBase is the origin of monotonic.
var clockBase = time.Now()

// monotonic reads the monotonic clock, in nanoseconds since clockBase.
func monotonic() int64 { return int64(time.Since(clockBase)) }
