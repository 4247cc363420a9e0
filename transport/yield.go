package transport

import (
	"context"
	"time"
)

// A transport that polls while it waits (shm) normally lets the process's
// other goroutines run between polls, since one of them may be producing
// what the wait is for: a schedule's sender goroutine, or a peer rank in the
// same process. For a caller that is the only goroutine of its operation
// this is pure cost, and from a thread locked to its goroutine (every call
// from C is one) each hand-off is two thread switches: the processor goes to
// another thread, which finds only the locked goroutine to run and hands it
// back. The operation's context says which case applies.

// yieldKey is the context key of the yield setting.
type yieldKey struct{}

// WithoutYield returns a copy of ctx under which a polling transport does
// not hand the processor to other goroutines while it waits for a peer in
// another process: the caller promises that nothing it waits for depends
// on another goroutine of this process. Waits still sleep once their
// polling time is over, and still yield for a peer in this process.
func WithoutYield(ctx context.Context) context.Context {
	return context.WithValue(ctx, yieldKey{}, false)
}

// WithYield returns a copy of ctx under which a polling transport lets
// other goroutines run while it waits (the default), for goroutines that
// work beside others of the same operation.
func WithYield(ctx context.Context) context.Context {
	if Yields(ctx) {
		return ctx
	}
	return context.WithValue(ctx, yieldKey{}, true)
}

// Yields reports whether waits under ctx may let other goroutines run
// (true unless WithoutYield set it off).
func Yields(ctx context.Context) bool {
	v, ok := ctx.Value(yieldKey{}).(bool)
	return !ok || v
}

// coreYieldKey is the context key of the core-yield setting.
type coreYieldKey struct{}

// WithCoreYield returns a copy of ctx under which a polling transport,
// when the processes of its host outnumber the cores, gives the core to
// the other processes between polls (sched_yield) for a while before it
// sleeps: one of them may be the peer it waits for, and waking a sleeper
// costs tens of microseconds on a virtual machine. For operations whose
// time is the peers' answers (small messages); during large transfers a
// core kept busy polling slows the copies of its neighbours, so they poll
// briefly and sleep.
func WithCoreYield(ctx context.Context) context.Context {
	return context.WithValue(ctx, coreYieldKey{}, true)
}

// CoreYields reports whether ctx was made by WithCoreYield.
func CoreYields(ctx context.Context) bool {
	v, _ := ctx.Value(coreYieldKey{}).(bool)
	return v
}

// copyWaitKey is the context key of the copy-wait setting.
type copyWaitKey struct{}

// CopyWaitYield bounds how long a wait under WithCopyWait gives its core
// away before it waits as any other: a peer that has not answered by then
// is not copying, it is stalled or gone, and the wait sleeps until it is
// woken.
const CopyWaitYield = 20 * time.Millisecond

// WithCopyWait returns a copy of ctx under which a polling transport, when
// the processes of its host outnumber the cores and nothing else of the
// process waits for the processor (WithoutYield), waits for peers that copy
// large blocks (an all-to-all whose blocks are lent: each receiver copies
// its peers' blocks out of their memory): after its first polls it gives
// the core away with sched_yield between polls, for up to CopyWaitYield,
// without first yielding to the process's goroutines or sleeping. Such
// waits last as long as the copies of the busiest receiver, a time slice
// or more, and a wait that hands its processor between the process's
// threads (two thread switches and futex calls a round) or sleeps and is
// woken keeps taking the core from the process that shares it, which may
// be that receiver: 4 processes on 2 cores, AllToAllV of 4 MiB where every
// rank sends rank d a share proportional to 1/(d+1), 1.57-1.80 -> 1.12-1.14
// ms (Open MPI's vader 1.11-1.26).
func WithCopyWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, copyWaitKey{}, true)
}

// CopyWaits reports whether ctx was made by WithCopyWait.
func CopyWaits(ctx context.Context) bool {
	v, _ := ctx.Value(copyWaitKey{}).(bool)
	return v
}

// overlapKey is the context key of the overlap setting.
type overlapKey struct{}

// An Overlap reports whether the operation a wait belongs to overlaps its
// caller's computation, as a training step's backward pass runs while its
// gradients are reduced. A wait asks it more than once, since the caller
// may say so after the operation has started.
type Overlap interface{ Overlapping() bool }

// WithOverlap returns a copy of ctx whose operations overlap their caller's
// computation while o says so. A polling transport's waits then wait as
// where the processes outnumber the cores (shared memory: poll on only
// while the peer runs, then give the core away and sleep; TCP: wait in the
// netpoller at once) instead of polling for their spin time: a core kept
// polling is taken from the computation, and so from the peer waiting for
// its result.
func WithOverlap(ctx context.Context, o Overlap) context.Context {
	return context.WithValue(ctx, overlapKey{}, o)
}

// OverlapOf returns the Overlap of ctx (see WithOverlap), one that never
// overlaps if it has none. A wait looks it up once and asks it as often as
// it needs: the lookup walks ctx's chain.
func OverlapOf(ctx context.Context) Overlap {
	if o, ok := ctx.Value(overlapKey{}).(Overlap); ok && o != nil {
		return o
	}
	return noOverlap{}
}

// noOverlap is the Overlap of a context without one.
type noOverlap struct{}

func (noOverlap) Overlapping() bool { return false }
