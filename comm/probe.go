package comm

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/logx"
)

// Mismatched collectives are usually caught by the frame checks: the first
// message between two ranks in different operations carries the wrong
// fingerprint. When the two operations exchange no message at all (two
// broadcasts from different roots, say), every rank just waits. To catch
// those too, a rank whose operation runs longer than the stall interval
// asks the control root to probe: every rank reports the fingerprint of its
// call at that sequence number, and if two ranks disagree the communicator
// fails with ErrMismatch on every rank instead of timing out.

// Probe states.
const (
	notReached uint8 = 0 // the rank has not started that operation yet
	reached    uint8 = 1 // the fingerprint is valid
	forgotten  uint8 = 2 // too old to remember
)

// judge compares the ranks' answers about seq (a zero Msg where a rank did
// not answer) and returns a mismatch failure if two ranks called different
// collectives, or nil.
func judge(seq uint64, answers []wire.Msg) *PeerError {
	groups := map[wire.Fingerprint][]int{}
	for r, a := range answers {
		if a.Type == wire.ProbeAnswer && a.State == reached {
			groups[a.Op] = append(groups[a.Op], r)
		}
	}
	if len(groups) < 2 {
		return nil
	}
	var parts []string
	for fp, ranks := range groups {
		parts = append(parts, fmt.Sprintf("ranks %v called %s", ranks, describeFingerprint(fp)))
	}
	sort.Strings(parts)
	return &PeerError{Peer: -1, Reporter: -1, Kind: ErrMismatch,
		Reason: fmt.Sprintf("collectives do not match at seq %d: %s", seq, strings.Join(parts, "; "))}
}

// stallInterval is how long an operation runs before the rank asks for a
// probe (OCCL_STALL_TIMEOUT, by default the smaller of 2 s and a quarter of
// the operation timeout); it doubles, up to maxStallInterval, while the
// operation goes on.
func (c *config) stallInterval() time.Duration {
	if c.stall > 0 {
		return c.stall
	}
	return min(2*time.Second, c.timeout/4)
}

const maxStallInterval = 30 * time.Second

// watchdog asks for a probe when a collective runs longer than the stall
// interval. Arming it costs an operation one uncontended compare-and-swap:
// its timer is set only when none is pending, and when it fires it looks in
// the history at the collective running then (one that started later is
// given the rest of its interval).
type watchdog struct {
	armed atomic.Bool // the timer is pending

	mu       sync.Mutex
	timer    *time.Timer
	reported uint64        // the collective due and next are about
	due      time.Time     // when it is next reported as stalled
	next     time.Duration // the interval after that report
}

// armWatchdog makes sure the watchdog will look at the collective that
// the history has just recorded as running.
func (c *Communicator) armWatchdog() {
	w := &c.watch
	// onStall clears armed before it looks at the history, and this reads
	// armed after the history recorded the collective: one of the two
	// sees the other, so the collective is never left without a pending
	// timer. That needs a full barrier on both sides, between the store
	// and the load: onStall's is its atomic store, this one's a locked
	// compare-and-swap that changes nothing, since the history's stores
	// are plain (a sequence lock) and a plain load could be answered
	// before they are visible.
	if !w.armed.CompareAndSwap(true, true) {
		w.mu.Lock()
		w.arm(c.cfg.stallInterval(), c.onStall)
		w.mu.Unlock()
	}
}

// arm sets the timer to fire after d unless it is pending; w.mu is held.
func (w *watchdog) arm(d time.Duration, f func()) {
	if w.armed.Load() {
		return
	}
	w.armed.Store(true)
	if w.timer == nil {
		w.timer = time.AfterFunc(d, f)
	} else {
		w.timer.Reset(d)
	}
}

// stopWatchdog stops the timer for good (the communicator is closing).
func (c *Communicator) stopWatchdog() {
	w := &c.watch
	w.mu.Lock()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

func (c *Communicator) onStall() {
	w := &c.watch
	w.mu.Lock()
	w.armed.Store(false)
	seq, start := c.hist.runningCollective()
	if seq == 0 {
		// Nothing is running: the next collective arms the timer.
		w.mu.Unlock()
		return
	}
	now := time.Now()
	if w.reported != seq {
		w.reported, w.next = seq, c.cfg.stallInterval()
		w.due = start.time().Add(w.next)
	}
	if now.Before(w.due) {
		w.arm(w.due.Sub(now), c.onStall)
		w.mu.Unlock()
		return
	}
	w.next = min(2*w.next, maxStallInterval)
	w.due = now.Add(w.next)
	w.arm(w.next, c.onStall)
	w.mu.Unlock()
	logx.For(c.log, logx.Coll).Info("occl: operation stalled; asking every rank what it is running", "seq", seq)
	c.ctrl.stalled(seq)
}

func describeFingerprint(fp wire.Fingerprint) string {
	op := algo.Collective(fp.Op)
	dt := algo.DType(fp.DType)
	switch op {
	case algo.OpAllReduce, algo.OpReduceScatter:
		return fmt.Sprintf("%s(count=%d, %s, %s)", op, fp.Count, dt, algo.Op(fp.RedOp))
	case algo.OpReduce:
		return fmt.Sprintf("%s(count=%d, %s, %s, root=%d)", op, fp.Count, dt, algo.Op(fp.RedOp), fp.Root)
	case algo.OpBroadcast, algo.OpGather, algo.OpScatter:
		return fmt.Sprintf("%s(count=%d, %s, root=%d)", op, fp.Count, dt, fp.Root)
	case algo.OpBarrier, algo.OpAllToAllV, algo.OpSplit, algo.OpGrow:
		return op.String()
	case algo.OpSendRecv:
		return fmt.Sprintf("%d %s elements", fp.Count, dt)
	case algo.OpRewire:
		if fp.Target == 0 {
			return op.String()
		}
		return describeRewire(fp.Target)
	}
	return fmt.Sprintf("%s(count=%d, %s)", op, fp.Count, dt)
}
