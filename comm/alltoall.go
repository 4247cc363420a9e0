package comm

import (
	"context"
	"encoding/binary"
	"math"
	"sync"

	"github.com/occl/occl/algo"
)

// slotCounts holds the exchanged counts, apart from the schedules' slots.
const slotCounts = algo.SlotCaller

// AllToAll sends block j of send to rank j and receives rank j's block into
// block j of recv. send and recv have the same length, a multiple of
// Size(). Passing the same buffer twice is allowed (in place), on every
// rank or on none, as with MPI_IN_PLACE: in place no block is lent to its
// receiver (see WithSingleCopy) and blocks above a piece of the in-place
// exchange (512 KiB) go in pieces, where out of place they are lent whole.
// A mix is an error, reported on every rank as a mismatch where the ranks
// cut a block differently (a lent block of more than 512 KiB), and not
// detected where they do not.
func (c *Communicator) AllToAll(ctx context.Context, send, recv Buffer) error {
	if small(len(recv.b)) {
		if per, err := c.checkAllToAll(send, recv); err == nil && c.takeAlone(ctx, len(recv.b)) {
			tag := TrafficTag(ctx)
			return c.runTaken(ctx, "AllToAll", algo.OpAllToAll, send.dt, 0, 0, per, func(ctx context.Context, p *opPeers) error {
				return p.c.uniformAllToAll(ctx, p, send.b, recv.b, tag)
			})
		}
	}
	return wait(c.postAllToAll(ctx, send, recv))
}

// AllToAllAsync is the non-blocking form of AllToAll.
func (c *Communicator) AllToAllAsync(ctx context.Context, send, recv Buffer) *Request {
	return c.issue(c.postAllToAll(ctx, send, recv))
}

// checkAllToAll checks AllToAll's arguments and returns the elements of
// a block.
func (c *Communicator) checkAllToAll(send, recv Buffer) (per int, err error) {
	err = checkPair(send, recv)
	per = send.Len() / c.size // one division: tens of cycles
	if err == nil && (len(send.b) != len(recv.b) || per*c.size != send.Len()) {
		err = invalidf("send has %d elements and recv %d; both must be the same multiple of %d", send.Len(), recv.Len(), c.size)
	}
	if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
		err = invalidf("send and recv buffers overlap")
	}
	return per, err
}

// postAllToAll checks AllToAll's arguments and makes its request, unissued (see post).
func (c *Communicator) postAllToAll(ctx context.Context, send, recv Buffer) *Request {
	const name = "AllToAll"
	per, err := c.checkAllToAll(send, recv)
	if err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpAllToAll, send.dt, 0, 0, per, allToAllOp)
	r.args.send, r.args.recv, r.args.tag = send, recv, TrafficTag(ctx)
	return r
}

func allToAllOp(ctx context.Context, p *opPeers, a *opArgs) error {
	return p.c.uniformAllToAll(ctx, p, a.send.b, a.recv.b, a.tag)
}

// uniformAllToAll runs an AllToAll of send into recv, in blocks of the
// elements p.hdr counts, whose traffic is tagged tag: directly where it
// can (directAllToAll), else by the chosen schedule.
func (c *Communicator) uniformAllToAll(ctx context.Context, p *opPeers, send, recv []byte, tag string) error {
	nb := int(p.hdr.Count) * DType(p.hdr.DType).Size() // the block, without a division
	c.traffic.record(tag, c.size, nil, nb)
	offs, lens := c.worker.blocks(c.size, nb)
	if ok, err := c.directAllToAll(ctx, p, send, offs, lens, recv, offs, lens, nb); ok {
		return err
	}
	return c.allToAll(ctx, p, send, offs, lens, recv, offs, lens, nb)
}

// AllToAllV is AllToAll with a count and displacement per peer, in
// elements: sendCounts[j] elements from send[sendDispls[j]:] go to rank j,
// and recvCounts[j] elements from rank j land at recv[recvDispls[j]:].
// recvCounts[j] on this rank must equal sendCounts[this rank] on rank j.
// In place (the same buffer twice), as for AllToAll, on every rank or
// none.
func (c *Communicator) AllToAllV(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) error {
	if !small(len(send.b)) || !small(len(recv.b)) {
		return wait(c.postAllToAllV(ctx, send, sendCounts, sendDispls, recv, recvCounts, recvDispls))
	}
	// Small buffers: run alone, without a request, if the communicator
	// is idle (see takeAlone), as AllToAll does; else post the blocks
	// laid out here.
	v := vblocks.Get().(*vBlocks)
	if err := c.checkAllToAllV(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, v); err != nil {
		vblocks.Put(v)
		return wait(c.failedRequest(allToAllVName, err))
	}
	if !c.takeAlone(ctx, largestBlock(-1, v.slens, v.rlens)) {
		return wait(c.postLaidOutAllToAllV(ctx, send, recv, v))
	}
	tag := TrafficTag(ctx)
	err := c.runTaken(ctx, allToAllVName, algo.OpAllToAllV, send.dt, 0, 0, 0, func(ctx context.Context, p *opPeers) error {
		return p.c.allToAllV(ctx, p, send.b, recv.b, v, tag)
	})
	vblocks.Put(v)
	return err
}

// AllToAllVAsync is the non-blocking form of AllToAllV.
func (c *Communicator) AllToAllVAsync(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) *Request {
	return c.issue(c.postAllToAllV(ctx, send, sendCounts, sendDispls, recv, recvCounts, recvDispls))
}

const allToAllVName = "AllToAllV"

// postAllToAllV checks AllToAllV's arguments and makes its request, unissued (see post).
func (c *Communicator) postAllToAllV(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) *Request {
	v := vblocks.Get().(*vBlocks)
	if err := c.checkAllToAllV(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, v); err != nil {
		vblocks.Put(v)
		return c.failedRequest(allToAllVName, err)
	}
	return c.postLaidOutAllToAllV(ctx, send, recv, v)
}

// postLaidOutAllToAllV makes the request of an AllToAllV whose checked
// blocks v lays out, unissued (see post); the request gives v back.
func (c *Communicator) postLaidOutAllToAllV(ctx context.Context, send, recv Buffer, v *vBlocks) *Request {
	r := c.postColl(ctx, allToAllVName, algo.OpAllToAllV, send.dt, 0, 0, 0, allToAllVOp)
	r.args.send, r.args.recv, r.args.v, r.args.tag = send, recv, v, TrafficTag(ctx)
	return r
}

// checkAllToAllV checks AllToAllV's arguments and lays its blocks out in
// v, in bytes.
func (c *Communicator) checkAllToAllV(send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int, v *vBlocks) error {
	err := checkPair(send, recv)
	if err == nil {
		v.soffs, v.slens, err = c.vLayout("send", send, sendCounts, sendDispls, v.soffs, v.slens)
	}
	if err == nil {
		v.roffs, v.rlens, err = c.vLayout("recv", recv, recvCounts, recvDispls, v.roffs, v.rlens)
	}
	if err == nil && sendCounts[c.rank] != recvCounts[c.rank] {
		err = invalidf("this rank sends itself %d elements and receives %d from itself", sendCounts[c.rank], recvCounts[c.rank])
	}
	if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
		err = invalidf("send and recv buffers overlap")
	}
	return err
}

func allToAllVOp(ctx context.Context, p *opPeers, a *opArgs) error {
	return p.c.allToAllV(ctx, p, a.send.b, a.recv.b, a.v, a.tag)
}

// allToAllV runs an AllToAllV whose blocks v lays out, its traffic
// recorded under tag.
func (c *Communicator) allToAllV(ctx context.Context, p *opPeers, send, recv []byte, v *vBlocks, tag string) error {
	c.traffic.record(tag, c.size, v.slens, 0)
	if ok, err := c.directAllToAll(ctx, p, send, v.soffs, v.slens, recv, v.roffs, v.rlens, -1); ok {
		return err
	}
	return c.allToAll(ctx, p, send, v.soffs, v.slens, recv, v.roffs, v.rlens, -1)
}

// vBlocks are an AllToAllV's block offsets and lengths in bytes, made when
// it is issued (the caller's counts are its own again once the call
// returns) and given back to vblocks when it completes (see
// Request.finish and Request.free).
type vBlocks struct {
	soffs, slens, roffs, rlens []int
}

// vblocks recycles the blocks of AllToAllV operations.
var vblocks = sync.Pool{New: func() any { return new(vBlocks) }}

// allToAll runs the exchange: the pairwise exchange, or the route the
// cost model chooses on a fabric where all-to-alls are routed. For
// AllToAll, uniform is the block size in bytes; for AllToAllV it is -1
// and the block sizes are in slens and rlens.
func (c *Communicator) allToAll(ctx context.Context, p *opPeers, send []byte, soffs, slens []int, recv []byte, roffs, rlens []int, uniform int) error {
	args := algo.Args{Peers: p, WS: &c.worker.ws, Src: send, Dst: recv, SendOffs: soffs, SendLens: slens, RecvOffs: roffs, RecvLens: rlens}
	a, op := algo.AlgoPairwise, algo.OpAllToAllV
	if uniform >= 0 {
		op = algo.OpAllToAll
	}
	if c.routable() {
		var bytes [][]int
		if uniform >= 0 {
			bytes = c.lay().routes.uniform(c.size, uniform)
		} else {
			var err error
			if bytes, err = c.exchangeCounts(ctx, p, slens, rlens); err != nil {
				return err
			}
		}
		if route := c.cachedRoute(uniform, bytes); route != nil {
			a, args.Route, args.Matrix = route.Algorithm, route, bytes
		}
		c.chose(ctx, c.lay(), op, a, len(send), bytes)
	} else if c.size > 1 {
		c.chose(ctx, c.lay(), op, a, len(send), nil)
	}
	w := allToAllWaits(len(send), c.links.shm, c.links.lends(), uniform, slens, rlens)
	return c.worker.run(c.worker.op.schedule(ctx, w), op, a, &args)
}

// largestBlock returns the largest block of an all-to-all: uniform for
// AllToAll, the largest of slens and rlens for AllToAllV (uniform -1).
func largestBlock(uniform int, slens, rlens []int) int {
	if uniform >= 0 {
		return uniform
	}
	n := 0
	for i := range slens {
		n = max(n, slens[i])
	}
	for i := range rlens {
		n = max(n, rlens[i])
	}
	return n
}

// routable reports whether all-to-alls may take a topology-aware route:
// the topology admits a routed schedule and no unrouted one is forced.
func (c *Communicator) routable() bool {
	return c.lay().model != nil && algo.RoutesAllToAll(c.lay().topo, c.cfg.algo)
}

// cachedRoute is allToAllRoute through the layout's cache, which the
// worker alone uses: an MoE layer runs its all-to-alls (dispatch and
// combine, forward and backward) on the same matrix, and an AllToAll of
// one size always has the same, so the cost model's choice is made once.
// Every rank sees the same operations in the same order, so every rank's
// cache answers alike.
func (c *Communicator) cachedRoute(uniform int, bytes [][]int) *algo.Route {
	cache := c.lay().routes
	key := matrixKey(uniform, bytes)
	if r, ok := cache.get(key); ok {
		return r
	}
	r := c.allToAllRoute(bytes)
	cache.put(key, r)
	return r
}

// allToAllRoute returns the route of the all-to-all of the byte matrix:
// the forced schedule's if it applies, else the cost model's choice; nil
// for the pairwise exchange.
func (c *Communicator) allToAllRoute(bytes [][]int) *algo.Route {
	return c.lay().model.ChooseRoute(bytes, c.cfg.algo)
}

// exchangeCounts gathers every rank's send and receive sizes in bytes and
// returns the byte matrix, the worker's (see workerState.matrix): row i is
// what rank i sends to each rank. Every
// rank checks the whole matrix, so a send that does not match its
// receive is reported by all ranks alike instead of leaving some waiting.
func (c *Communicator) exchangeCounts(ctx context.Context, p *opPeers, slens, rlens []int) ([][]int, error) {
	n := c.size
	all := c.worker.ws.Get(slotCounts, 16*n*n)
	// This rank's counts go straight into its place in the gathered
	// buffer.
	mine := all[16*n*c.rank : 16*n*(c.rank+1)]
	for j := range n {
		binary.LittleEndian.PutUint64(mine[8*j:], uint64(slens[j]))
		binary.LittleEndian.PutUint64(mine[8*(n+j):], uint64(rlens[j]))
	}
	if err := allGatherBytes(ctx, p, mine, all); err != nil {
		return nil, err
	}
	get := func(rank, k int) uint64 { return binary.LittleEndian.Uint64(all[16*n*rank+8*k:]) }
	out := c.worker.matrix(n)
	for i := range out {
		for j := range out[i] {
			sent, expected := get(i, j), get(j, n+i)
			if sent != expected || sent > uint64(math.MaxInt) {
				return nil, invalidf("AllToAllV: rank %d sends %d bytes to rank %d, which expects %d", i, sent, j, expected)
			}
			out[i][j] = int(sent)
		}
	}
	return out, nil
}

// PredictAllToAllV returns the cost model's time in seconds for an
// all-to-all with schedule a in which rank s sends bytes[s][d] bytes to
// rank d, and whether the model covers it (a communicator with a topology,
// a schedule that fits it, a byte matrix of Size() rows of Size()
// non-negative entries). It returns 0, false for what the model does not
// cover.
func (c *Communicator) PredictAllToAllV(a algo.Algorithm, bytes [][]int) (float64, bool) {
	if c.lay().model == nil || !c.byteMatrix(bytes) {
		return 0, false
	}
	return c.lay().model.PredictAllToAll(a, bytes)
}

// AllToAllAlgorithm returns the schedule an all-to-all of the byte matrix
// (rank s sends bytes[s][d] bytes to rank d) runs with; the pairwise
// exchange (algo.AlgoPairwise) for a matrix that is not Size() rows of
// Size() non-negative entries, which no all-to-all runs.
func (c *Communicator) AllToAllAlgorithm(bytes [][]int) algo.Algorithm {
	if !c.routable() || !c.byteMatrix(bytes) {
		return algo.AlgoPairwise
	}
	if r := c.allToAllRoute(bytes); r != nil {
		return r.Algorithm
	}
	return algo.AlgoPairwise
}

// byteMatrix reports whether bytes is a byte matrix of an all-to-all of
// c: Size() rows of Size() non-negative entries, which the cost model
// indexes without checking.
func (c *Communicator) byteMatrix(bytes [][]int) bool {
	if len(bytes) != c.size {
		return false
	}
	for _, row := range bytes {
		if len(row) != c.size {
			return false
		}
		for _, b := range row {
			if b < 0 {
				return false
			}
		}
	}
	return true
}

// routeCache remembers the last few all-to-all routes of a layout, keyed by
// their byte matrix (pairwise: a nil route), and the last uniform matrix.
type routeCache struct {
	keys   [4]uint64
	routes [4]*algo.Route
	used   int
	next   int
	block  int // size of the cached uniform matrix's blocks, -1: none
	matrix [][]int
}

func newRouteCache() *routeCache { return &routeCache{block: -1} }

func (rc *routeCache) get(key uint64) (*algo.Route, bool) {
	for i := range rc.used {
		if rc.keys[i] == key {
			return rc.routes[i], true
		}
	}
	return nil, false
}

func (rc *routeCache) put(key uint64, r *algo.Route) {
	rc.keys[rc.next], rc.routes[rc.next] = key, r
	rc.next = (rc.next + 1) % len(rc.keys)
	rc.used = min(rc.used+1, len(rc.keys))
}

// uniform returns the n by n matrix of block-byte blocks, reusing the last
// one when the size repeats.
func (rc *routeCache) uniform(n, block int) [][]int {
	if rc.block != block {
		rc.matrix, rc.block = algo.UniformBytes(n, block), block
	}
	return rc.matrix
}

// matrixKey hashes a byte matrix (FNV-1a over its entries); uniform
// matrices by their block size alone.
func matrixKey(uniform int, bytes [][]int) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(v uint64) { h = (h ^ v) * prime }
	if uniform >= 0 {
		mix(uint64(uniform) | 1<<63)
		return h
	}
	for _, row := range bytes {
		for _, v := range row {
			mix(uint64(v))
		}
	}
	return h
}
