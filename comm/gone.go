package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/occl/occl/transport/tcp"
)

// goneProbeInterval is how often the bootstrap of a shrunk communicator
// checks that the other members' processes are still there, unless there
// are so many that this would make a member probe more than goneProbeRate
// times a second.
const goneProbeInterval = 100 * time.Millisecond

// goneProbeRate bounds how many probes a second one member of a shrink's
// bootstrap makes (each a TCP connection and a handshake the probed
// member's listener answers): with more than goneProbeRate/10+1 members
// each one's probes come less often than every goneProbeInterval, so that
// the probes cost every member the same, bounded, share of its CPU at any
// size instead of one growing with the number of members (every 1.02 s
// at 1024 members instead of every 100 ms, which would be 10 230 probes a
// second made and answered by each).
const goneProbeRate = 1000

// goneCheckTimeout bounds the check, after the bootstrap of a shrunk
// communicator failed, of which member's process is gone. A process that
// is gone is refused at once; one that is stopped is not found gone.
const goneCheckTimeout = 250 * time.Millisecond

// goneGrace is how long a probe of the bootstrap of a shrunk communicator
// may go on once the bootstrap no longer needs it.
const goneGrace = 100 * time.Millisecond

// goneWatch finds, during the bootstrap of a shrunk communicator, the
// members whose process is gone, so that the bootstrap fails at once
// instead of waiting for them until its timeout. A member is gone when
// connecting to its listeners is refused: the kernel answers for a process
// that exited, while a process that is stopped, or slow, still has its
// listeners (they accept, and the handshake waits), and is waited for as
// before. Its listeners are the old communicator's data listener, open
// until the member's Shrink returns, and, once the rank table is known,
// the new communicator's, open for as long as the member's new
// communicator (a member that completed the bootstrap and returned is not
// gone).
type goneWatch struct {
	self    int   // this rank's new rank
	members []int // old ranks, by new rank
	// The old communicator: this rank's rank in it, its id and secret,
	// and its data listeners (by old rank).
	oldRank   int
	oldComm   uint64
	oldSecret []byte
	oldAddrs  []string
	timeout   time.Duration // bounds one probe
	interval  time.Duration // between two probes of one member, at least
	rate      int           // probes a second one member makes, at most

	// probe says whether member rank (new rank) is gone; nil means
	// w.gone. Tests count probes through it.
	probe func(ctx context.Context, rank int) bool

	fresh atomic.Pointer[freshListeners]
}

// freshListeners are the new communicator's data listeners, from its rank
// table.
type freshListeners struct {
	comm   uint64
	secret []byte
	addrs  []string // by new rank
}

// goneError is the failure of the bootstrap of a shrunk communicator whose
// member, old rank old (new rank rank), is gone.
func (w *goneWatch) goneError(rank int) *PeerError {
	return &PeerError{Peer: w.members[rank], Reporter: w.oldRank, Kind: ErrPeerFailed,
		Reason: fmt.Sprintf("its process is gone during the bootstrap of the shrunk communicator (as its rank %d): its listeners refuse connections", rank)}
}

// known records the new communicator's data listeners, once the rank table
// arrived.
func (w *goneWatch) known(comm uint64, secret []byte, addrs []string) {
	w.fresh.Store(&freshListeners{comm: comm, secret: secret, addrs: addrs})
}

// period returns how often watch probes each member: every interval, or
// less often if that would make more than rate probes a second.
func (w *goneWatch) period() time.Duration {
	others := len(w.members) - 1
	if w.rate <= 0 || others <= 0 {
		return w.interval
	}
	return max(w.interval, time.Duration(others)*time.Second/time.Duration(w.rate))
}

// watch probes every other member each period until ctx ends, and ends
// ctx's bootstrap (cancel) with the error naming the first member found
// gone. It returns when ctx ends. The members' probes are spread over the
// period (the first at once), not made all at once: at the start of the
// bootstrap every member starts its watch, and a burst of n-1 handshakes
// from each would reach every listener at once.
func (w *goneWatch) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	probe := w.probe
	if probe == nil {
		probe = w.gone
	}
	period := w.period()
	others := len(w.members) - 1
	var wg sync.WaitGroup
	k := 0
	for r := range w.members {
		if r == w.self {
			continue
		}
		offset := period * time.Duration(k) / time.Duration(others)
		k++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if offset > 0 {
				t := time.NewTimer(offset)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				if probe(ctx, r) {
					cancel(w.goneError(r))
					return
				}
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
}

// check probes every other member once, within timeout, and returns the
// error naming the lowest one that is gone, or nil.
func (w *goneWatch) check(ctx context.Context, timeout time.Duration) *PeerError {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gone := make([]bool, len(w.members))
	var wg sync.WaitGroup
	for r := range w.members {
		if r != w.self {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gone[r] = w.gone(ctx, r)
			}()
		}
	}
	wg.Wait()
	for r, g := range gone {
		if g {
			return w.goneError(r)
		}
	}
	return nil
}

// gone says whether member rank (new rank) is gone: its new data listener,
// if known, and its old one refuse connections.
func (w *goneWatch) gone(ctx context.Context, rank int) bool {
	if f := w.fresh.Load(); f != nil && f.addrs[rank] != "" {
		h := tcp.Hello{Purpose: tcp.PurposeProbe, Comm: f.comm, From: w.self, To: rank, NStreams: 1}
		if !w.refused(ctx, f.addrs[rank], f.secret, h) {
			return false
		}
	}
	old := w.members[rank]
	h := tcp.Hello{Purpose: tcp.PurposeProbe, Comm: w.oldComm, From: w.oldRank, To: old, NStreams: 1}
	return w.refused(ctx, w.oldAddrs[old], w.oldSecret, h)
}

// refused says whether a connection to the listener at addr is refused:
// nothing listens there any more. Any other outcome (the handshake
// completes, fails or times out) is not.
func (w *goneWatch) refused(ctx context.Context, addr string, secret []byte, h tcp.Hello) bool {
	// A probe ends goneGrace after ctx, not with it: a connection dropped
	// before its handshake makes the listener warn.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(goneGrace, cancel) })()
	tc, err := tcp.DialOnce(pctx, addr, secret, h)
	if err == nil {
		tc.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
