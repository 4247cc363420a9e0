package algo

import (
	"context"
	"fmt"
	"sync"

	"github.com/occl/occl/internal/memcopy"
)

// Route is the path of every block of an all-to-all through Phases
// phases: Hop(src, dst, k) is the rank holding block (src, dst) at the
// start of phase k, from Hop(src, dst, 0) = src to Hop(src, dst, Phases) =
// dst.
type Route struct {
	// Algorithm is the schedule family the route implements.
	Algorithm Algorithm
	// Phases is the number of communication phases.
	Phases int
	n      int
	hops   []int32
}

// NewRoute returns a route over n ranks with the given number of phases in
// which every block goes straight to its destination in phase 0.
func NewRoute(a Algorithm, n, phases int) *Route {
	r := &Route{Algorithm: a, Phases: phases, n: n, hops: make([]int32, n*n*(phases+1))}
	for s := 0; s < n; s++ {
		for d := 0; d < n; d++ {
			r.Set(s, d, d)
		}
	}
	return r
}

// Size is the number of ranks.
func (r *Route) Size() int { return r.n }

// Hop returns the rank holding block (src, dst) at the start of phase k.
func (r *Route) Hop(src, dst, k int) int {
	return int(r.hops[(src*r.n+dst)*(r.Phases+1)+k])
}

// Set routes block (src, dst) through the given ranks: the block moves from
// src to via[0] in phase 0, to via[1] in phase 1, and so on; the remaining
// phases hold it at the last rank given, which must be dst unless via
// names a rank for every phase.
func (r *Route) Set(src, dst int, via ...int) {
	base := (src*r.n + dst) * (r.Phases + 1)
	r.hops[base] = int32(src)
	at := src
	for k := 1; k <= r.Phases; k++ {
		if k-1 < len(via) {
			at = via[k-1]
		}
		r.hops[base+k] = int32(at)
	}
}

// Validate checks that every block starts at its source, ends at its
// destination and visits only ranks that exist.
func (r *Route) Validate() error {
	for s := 0; s < r.n; s++ {
		for d := 0; d < r.n; d++ {
			if r.Hop(s, d, 0) != s || r.Hop(s, d, r.Phases) != d {
				return fmt.Errorf("route: block %d->%d goes from %d to %d", s, d, r.Hop(s, d, 0), r.Hop(s, d, r.Phases))
			}
			for k := 0; k <= r.Phases; k++ {
				if h := r.Hop(s, d, k); h < 0 || h >= r.n {
					return fmt.Errorf("route: block %d->%d: hop %d is rank %d of %d", s, d, k, h, r.n)
				}
			}
		}
	}
	return nil
}

// Flows returns the traffic of phase k: bytes from rank a to rank b,
// summed over blocks, for a != b.
func (r *Route) Flows(k int, bytes [][]int) map[[2]int]int {
	out := map[[2]int]int{}
	for s := 0; s < r.n; s++ {
		for d := 0; d < r.n; d++ {
			a, b := r.Hop(s, d, k), r.Hop(s, d, k+1)
			if a != b && bytes[s][d] > 0 {
				out[[2]int{a, b}] += bytes[s][d]
			}
		}
	}
	return out
}

// block is one block a rank handles in a phase.
type block struct{ src, dst int }

// AllToAllRouted runs the all-to-all that route describes on this rank.
// bytes[s][d] is the size of block (s, d) on every rank; this rank's
// blocks are at send[sendOffs[d]:] and land at recv[recvOffs[s]:]. send
// and recv must not overlap. Staging uses SlotRoutedPack(k) and
// SlotRoutedStage(k) for every phase k.
//
// # Routed all-to-all
//
// The engine under every topology-aware all-to-all (delegated, rail
// forwarding, X-then-Y): a Route gives, for every block (source rank,
// destination rank), the rank that holds it at the start of each of a few
// phases, ending at the destination. Planners (pure functions of the
// topology and the byte matrix) make Routes; this file runs one.
//
// Every rank knows the whole byte matrix (AllToAll: uniform; AllToAllV:
// the communicator exchanges the counts first), so every rank derives the
// same messages without further negotiation.
//
//	phase k = 0 .. K-1, on rank r:
//	  for every peer b != r: send, as one message, the blocks with
//	    hop k = r and hop k+1 = b, in (source, destination) order
//	  for every peer a != r: receive the blocks with hop k = a and
//	    hop k+1 = r; those whose destination is r go to the output, the
//	    others wait in a staging buffer for a later phase
//	  blocks with hop k = hop k+1 stay where they are
//
// All messages of a phase are in flight at once (one goroutine per peer
// and direction), so traffic of one phase that uses different links (an
// optical circuit, the packet network, the intra-host fabric) moves in
// parallel; a phase ends when this rank has sent and received all of its
// messages. When every message a rank sends in a phase fits in its
// connection's eager limit, the rank sends them all and then receives, on
// the caller's goroutine, as the pairwise exchange does: a small routed
// all-to-all starts no goroutine, and with its bookkeeping in the
// Workspace it allocates nothing. A message of a single block is sent from and received into
// the caller's buffers directly; messages of several blocks are packed
// into and unpacked from staging buffers (one local copy).
//
// Communication steps: K (one per phase), each up to p-1 messages per rank
// in each direction. Message step labels: the phase number.
//
// Bytes on the wire: every block crosses one link per hop that changes
// rank, so a route of h changing hops costs h times its bytes. The cost
// model (Model.PredictRoute) charges each phase the time of its slowest
// link or NIC.
func AllToAllRouted(ctx context.Context, p Peers, ws *Workspace, route *Route, bytes [][]int, send []byte, sendOffs []int, recv []byte, recvOffs []int) error {
	n, me := p.Size(), p.Rank()
	if route.Size() != n || len(bytes) != n {
		return fmt.Errorf("routed all-to-all: rank %d: route for %d ranks and %d-row matrix on %d ranks", me, route.Size(), len(bytes), n)
	}
	memcopy.Deliver(recv[recvOffs[me]:recvOffs[me]+bytes[me][me]], send[sendOffs[me]:sendOffs[me]+bytes[me][me]])
	sc := ws.routedScratch(n)
	// held[s*n+d] is where block (s, d) is while this rank holds it and it
	// is not yet at its destination.
	held := sc.held
	for d := 0; d < n; d++ {
		if d != me {
			held[me*n+d] = send[sendOffs[d] : sendOffs[d]+bytes[me][d]]
		}
	}
	out, in := sc.out, sc.in
	for k := 0; k < route.Phases; k++ {
		for i := range out {
			out[i], in[i] = out[i][:0], in[i][:0]
		}
		outBytes, inBytes := 0, 0
		for s := 0; s < n; s++ {
			for d := 0; d < n; d++ {
				a, b := route.Hop(s, d, k), route.Hop(s, d, k+1)
				if a == b || bytes[s][d] == 0 {
					continue
				}
				switch me {
				case a:
					out[b] = append(out[b], block{s, d})
					outBytes += bytes[s][d]
				case b:
					in[a] = append(in[a], block{s, d})
					inBytes += bytes[s][d]
				}
			}
		}
		pack := ws.Get(SlotRoutedPack(k), outBytes)
		stage := ws.Get(SlotRoutedStage(k), inBytes)
		if err := routedPhase(ctx, p, k, sc, bytes, pack, stage, recv, recvOffs); err != nil {
			return err
		}
	}
	return nil
}

// routedScratch is what a routed all-to-all keeps between its phases, in
// its Workspace so that a run of them allocates nothing: where every block
// is (held), the blocks of each message out and in, and the messages.
type routedScratch struct {
	held             [][]byte
	out, in          [][]block
	sendMsg, recvMsg [][]byte
	direct           []bool
}

// routedScratch returns the workspace's routed all-to-all scratch for n
// ranks, with no block held.
func (w *Workspace) routedScratch(n int) *routedScratch {
	sc := w.routed
	if sc == nil || len(sc.out) != n {
		sc = &routedScratch{held: make([][]byte, n*n), out: make([][]block, n), in: make([][]block, n),
			sendMsg: make([][]byte, n), recvMsg: make([][]byte, n), direct: make([]bool, n)}
		w.routed = sc
	}
	clear(sc.held)
	return sc
}

// routedPhase exchanges the messages of phase k, whose blocks are in
// sc.out and sc.in. When every message this rank sends fits in its
// connection's eager limit (as for the pairwise exchange, see
// eagerAllToAll), it sends them all and then receives, on the caller's
// goroutine: no send waits for its receiver, so this cannot deadlock, and
// a small all-to-all costs no goroutine. Otherwise every message has its
// goroutine.
func routedPhase(ctx context.Context, p Peers, k int, sc *routedScratch, bytes [][]int, pack, stage, recv []byte, recvOffs []int) error {
	n, me := p.Size(), p.Rank()
	held, out, in := sc.held, sc.out, sc.in
	step := uint32(k + 1)
	// Outgoing messages: packed (or a lone block) before any is sent, so
	// that the held slices are not read while receives of this phase
	// replace them.
	off := 0
	for b := 0; b < n; b++ {
		sc.sendMsg[b] = nil
		blocks := out[b]
		if len(blocks) == 0 {
			continue
		}
		var msg []byte
		if len(blocks) == 1 {
			msg = held[blocks[0].src*n+blocks[0].dst]
		} else {
			start := off
			for _, bl := range blocks {
				off += memcopy.Copy(pack[off:], held[bl.src*n+bl.dst])
			}
			msg = pack[start:off]
		}
		for _, bl := range blocks {
			held[bl.src*n+bl.dst] = nil
		}
		// Blocks of no bytes are not routed, so a message is never empty:
		// nil marks a peer this rank sends nothing to.
		sc.sendMsg[b] = msg
	}
	// Incoming messages: a lone block for this rank lands in the output,
	// everything else in the staging buffer.
	off = 0
	for a := 0; a < n; a++ {
		sc.recvMsg[a], sc.direct[a] = nil, false
		blocks := in[a]
		if len(blocks) == 0 {
			continue
		}
		if len(blocks) == 1 && blocks[0].dst == me {
			bl := blocks[0]
			sc.recvMsg[a], sc.direct[a] = recv[recvOffs[bl.src]:recvOffs[bl.src]+bytes[bl.src][me]], true
			continue
		}
		start := off
		for _, bl := range blocks {
			held[bl.src*n+bl.dst] = stage[off : off+bytes[bl.src][bl.dst]]
			off += bytes[bl.src][bl.dst]
		}
		sc.recvMsg[a] = stage[start:off]
	}
	if eagerMessages(p, sc.sendMsg) {
		for b, msg := range sc.sendMsg {
			if msg != nil {
				if err := p.Send(ctx, b, step, msg); err != nil {
					return fmt.Errorf("routed all-to-all: rank %d phase %d: send to rank %d: %w", me, k, b, err)
				}
			}
		}
		for a, msg := range sc.recvMsg {
			if msg != nil {
				if err := p.Recv(ctx, a, step, msg); err != nil {
					return fmt.Errorf("routed all-to-all: rank %d phase %d: recv from rank %d: %w", me, k, a, err)
				}
				sc.deliver(me, a, recv, recvOffs)
			}
		}
		return nil
	}
	g := newGroup(ctx)
	defer g.cancel()
	var wg sync.WaitGroup
	for b, msg := range sc.sendMsg {
		if msg == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer RecoverTo(g.fail)
			if err := p.Send(g.ctx, b, step, msg); err != nil {
				g.fail(fmt.Errorf("routed all-to-all: rank %d phase %d: send to rank %d: %w", me, k, b, err))
			}
		}()
	}
	for a, msg := range sc.recvMsg {
		if msg == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer RecoverTo(g.fail)
			if err := p.Recv(g.ctx, a, step, msg); err != nil {
				g.fail(fmt.Errorf("routed all-to-all: rank %d phase %d: recv from rank %d: %w", me, k, a, err))
				return
			}
			sc.deliver(me, a, recv, recvOffs)
		}()
	}
	wg.Wait()
	return g.err
}

// deliver copies the blocks for rank me of the staged message received
// from rank a into the output; a direct message landed there already.
// Different messages' blocks are different held entries, so the receives
// of a phase may deliver at once.
func (sc *routedScratch) deliver(me, a int, recv []byte, recvOffs []int) {
	if sc.direct[a] {
		return
	}
	n := len(sc.out)
	for _, bl := range sc.in[a] {
		if bl.dst == me {
			i := bl.src*n + bl.dst
			memcopy.Deliver(recv[recvOffs[bl.src]:], sc.held[i])
			sc.held[i] = nil
		}
	}
}
