package emu

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/transport"
)

// DefaultSpin is the Spin of a zero Config: how long before its target a
// wait stops sleeping and polls the clock, yielding to other goroutines
// between reads.
const DefaultSpin = 150 * time.Microsecond

// Waiting strategy. Go timers wake up to about a millisecond late (the
// runtime's poller sleeps in whole milliseconds), nanosleep 50 to 150 µs
// late (the kernel's timer slack plus scheduling), and a loop that reads
// the clock and yields is late by a few microseconds. A wait therefore
// sleeps on a timer while more than timerGrain+spin remain, which keeps it
// cancellable, then in nanosleep until spin remain, then polls the clock.
const (
	// timerGrain is how late a Go timer may fire.
	timerGrain = 1500 * time.Microsecond
	// maxNanosleep bounds one uninterruptible nanosleep, so cancellation
	// and Close are noticed within about this long.
	maxNanosleep = timerGrain
)

// clockBase and clockOffset convert Go's monotonic clock into
// CLOCK_MONOTONIC nanoseconds: monotime() = clockOffset + time.Since(clockBase).
// clockErr says why the offset is unknown; times then only compare within
// this process.
var clockBase, clockOffset, clockErr = calibrate()

// calibrate measures the offset between Go's monotonic clock (which the
// runtime reads from CLOCK_MONOTONIC through the vDSO) and the absolute
// CLOCK_MONOTONIC value, keeping the sample with the narrowest bracket. The
// error is below a microsecond.
func calibrate() (time.Time, int64, error) {
	base := time.Now()
	best := int64(math.MaxInt64)
	var off int64
	for range 16 {
		a := time.Since(base)
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return base, 0, fmt.Errorf("emu: reading CLOCK_MONOTONIC: %w", err)
		}
		b := time.Since(base)
		if w := int64(b - a); w < best {
			best = w
			off = ts.Nano() - int64(a+b)/2
		}
	}
	return base, off, nil
}

// monotime returns the current CLOCK_MONOTONIC time in nanoseconds, the
// clock every process of the machine shares. It does not allocate or enter
// the kernel.
func monotime() int64 { return clockOffset + int64(time.Since(clockBase)) }

// deadlineOf returns ctx's deadline on the monotime scale, and whether it
// has one.
func deadlineOf(ctx context.Context, now int64) (int64, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return now + int64(time.Until(dl)), true
}

// waiter sleeps until a point of monotime. Each goroutine that waits needs
// its own; its timer is reused, so waiting does not allocate.
type waiter struct {
	timer *time.Timer
	spin  time.Duration
}

func newWaiter(spin time.Duration) waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return waiter{timer: t, spin: spin}
}

// until returns nil once monotime() >= target. It returns ctx's error if
// ctx ends first and transport.ErrClosed if done is closed first; both are
// noticed within maxNanosleep.
func (w *waiter) until(ctx context.Context, done <-chan struct{}, target int64) error {
	for {
		rem := time.Duration(target - monotime())
		if rem <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return transport.ErrClosed
		default:
		}
		switch {
		case rem > timerGrain+w.spin:
			w.timer.Reset(rem - timerGrain)
			select {
			case <-w.timer.C:
			case <-ctx.Done():
				w.timer.Stop()
				return ctx.Err()
			case <-done:
				w.timer.Stop()
				return transport.ErrClosed
			}
		case rem > w.spin:
			// The thread keeps its P while in the system call: let
			// goroutines queued on it (such as the peer this Conn just
			// woke) run first.
			runtime.Gosched()
			ts := unix.NsecToTimespec(int64(min(rem-w.spin, maxNanosleep)))
			unix.Nanosleep(&ts, nil) // EINTR only shortens the sleep
		default:
			runtime.Gosched()
		}
	}
}

// deadlineError reports a wait that cannot end before ctx's deadline.
func deadlineError(what string, need time.Duration) error {
	return fmt.Errorf("emu: %s needs %v more on the emulated fabric, past the context deadline: %w",
		what, need.Round(time.Microsecond), context.DeadlineExceeded)
}
