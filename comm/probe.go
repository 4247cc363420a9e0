package comm

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

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
// interval. The communicator's first collective starts its timer, which
// from then on runs until the communicator closes: each time it fires it
// looks in the history at the collective running then (one that started
// later is given the rest of its interval), and with none running it
// comes back after a stall interval. So an operation only reads armed,
// a plain load: a timer that stopped while nothing ran would need every
// operation to tell it, after recording itself in the history, with a
// locked instruction that waits for the history's stores (2% of a 2-rank
// AllReduce of 8 bytes on shared memory). The price is one wake-up per
// stall interval (2 s by default) of a communicator that stays idle.
type watchdog struct {
	armed atomic.Bool // the timer runs

	mu       sync.Mutex
	stopped  bool // the communicator is closing: the timer stays stopped
	timer    *time.Timer
	reported uint64        // the collective due and next are about
	due      time.Time     // when it is next reported as stalled
	next     time.Duration // the interval after that report
}

// armWatchdog starts the watchdog at the communicator's first collective.
func (c *Communicator) armWatchdog() {
	w := &c.watch
	if w.armed.Load() {
		return
	}
	w.mu.Lock()
	if !w.armed.Load() && !w.stopped {
		w.armed.Store(true)
		// The timer refers to the communicator weakly: stopped at Close,
		// its entry in the runtime's heap of timers can stay until the
		// time it was set for (a stall interval), and kept a closed
		// communicator, with its workspace, reachable that long.
		wc := weak.Make(c)
		w.timer = time.AfterFunc(c.cfg.stallInterval(), func() {
			if c := wc.Value(); c != nil {
				c.onStall()
			}
		})
	}
	w.mu.Unlock()
}

// stopWatchdog stops the timer for good (the communicator is closing).
func (c *Communicator) stopWatchdog() {
	w := &c.watch
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

func (c *Communicator) onStall() {
	w := &c.watch
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	seq, start := c.hist.runningCollective()
	if seq == 0 {
		// Nothing is running: look again a stall interval from now, so
		// that a collective starting meanwhile is looked at no later
		// than its own interval's end (the branch below waits for the
		// rest of it).
		w.timer.Reset(c.cfg.stallInterval())
		w.mu.Unlock()
		return
	}
	now := time.Now()
	if w.reported != seq {
		w.reported, w.next = seq, c.cfg.stallInterval()
		w.due = start.time().Add(w.next)
	}
	if now.Before(w.due) {
		w.timer.Reset(w.due.Sub(now))
		w.mu.Unlock()
		return
	}
	w.next = min(2*w.next, maxStallInterval)
	w.due = now.Add(w.next)
	w.timer.Reset(w.next)
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
