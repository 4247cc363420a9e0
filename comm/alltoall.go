package comm

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/occl/occl/algo"
)

// stepCounts labels the exchange of AllToAllV's counts that precedes a
// topology-aware all-to-all, apart from the exchange's own steps.
const stepCounts = 1 << 24

// slotCounts holds the exchanged counts.
const slotCounts = 15

// AllToAll sends block j of send to rank j and receives rank j's block into
// block j of recv. send and recv have the same length, a multiple of
// Size(). Passing the same buffer twice is allowed (in place).
func (c *Communicator) AllToAll(ctx context.Context, send, recv Buffer) error {
	return wait(c.AllToAllAsync(ctx, send, recv))
}

// AllToAllAsync is the non-blocking form of AllToAll.
func (c *Communicator) AllToAllAsync(ctx context.Context, send, recv Buffer) *Request {
	const name = "AllToAll"
	err := checkPair(send, recv)
	if err == nil && (len(send.b) != len(recv.b) || send.Len()%c.size != 0) {
		err = invalidf("send has %d elements and recv %d; both must be the same multiple of %d", send.Len(), recv.Len(), c.size)
	}
	if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
		err = invalidf("send and recv buffers overlap")
	}
	if err != nil {
		return c.failedRequest(name, err)
	}
	nb := len(send.b) / c.size
	c.traffic.record(TrafficTag(ctx), c.size, nil, nb)
	return c.submit(ctx, name, collHeader(algo.OpAllToAll, send.dt, 0, 0, send.Len()/c.size), func(ctx context.Context, p *opPeers) error {
		offs, lens := c.blocks(nb)
		return c.allToAll(ctx, p, send.b, offs, lens, recv.b, offs, lens, nb)
	})
}

// AllToAllV is AllToAll with a count and displacement per peer, in
// elements: sendCounts[j] elements from send[sendDispls[j]:] go to rank j,
// and recvCounts[j] elements from rank j land at recv[recvDispls[j]:].
// recvCounts[j] on this rank must equal sendCounts[this rank] on rank j.
func (c *Communicator) AllToAllV(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) error {
	return wait(c.AllToAllVAsync(ctx, send, sendCounts, sendDispls, recv, recvCounts, recvDispls))
}

// AllToAllVAsync is the non-blocking form of AllToAllV.
func (c *Communicator) AllToAllVAsync(ctx context.Context, send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int) *Request {
	const name = "AllToAllV"
	err := checkPair(send, recv)
	var soffs, slens, roffs, rlens []int
	if err == nil {
		soffs, slens, err = c.vLayout("send", send, sendCounts, sendDispls)
	}
	if err == nil {
		roffs, rlens, err = c.vLayout("recv", recv, recvCounts, recvDispls)
	}
	if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
		err = invalidf("send and recv buffers overlap")
	}
	if err != nil {
		return c.failedRequest(name, err)
	}
	c.traffic.record(TrafficTag(ctx), c.size, slens, 0)
	return c.submit(ctx, name, collHeader(algo.OpAllToAllV, send.dt, 0, 0, 0), func(ctx context.Context, p *opPeers) error {
		return c.allToAll(ctx, p, send.b, soffs, slens, recv.b, roffs, rlens, -1)
	})
}

// allToAll runs the exchange, staging the input when it is also the output.
// For AllToAll, uniform is the block size in bytes; for AllToAllV it is -1
// and the block sizes are in slens and rlens.
func (c *Communicator) allToAll(ctx context.Context, p *opPeers, send []byte, soffs, slens []int, recv []byte, roffs, rlens []int, uniform int) error {
	if same(send, recv) && len(send) > 0 {
		tmp := c.ws.Get(slotInput, len(send))
		copy(tmp, send)
		send = tmp
	}
	if !c.routable() {
		return algo.AllToAllPairwise(ctx, p, send, soffs, slens, recv, roffs, rlens)
	}
	var bytes [][]int
	if uniform >= 0 {
		bytes = algo.UniformBytes(c.size, uniform)
	} else {
		var err error
		if bytes, err = c.exchangeCounts(ctx, p, slens); err != nil {
			return err
		}
		for j := range rlens {
			if bytes[j][c.rank] != rlens[j] {
				return invalidf("AllToAllV: rank %d sends %d bytes to rank %d, which expects %d", j, bytes[j][c.rank], c.rank, rlens[j])
			}
		}
	}
	route := c.allToAllRoute(bytes)
	if route == nil {
		return algo.AllToAllPairwise(ctx, p, send, soffs, slens, recv, roffs, rlens)
	}
	return algo.AllToAllRouted(ctx, p, &c.ws, route, bytes, send, soffs, recv, roffs)
}

// routable reports whether all-to-alls may take a topology-aware route:
// the topology has optical circuits, is rail-only, or places hosts on a
// grid, and no other schedule is forced.
func (c *Communicator) routable() bool {
	if c.lay().model == nil {
		return false
	}
	if f := c.cfg.algo; f == algo.AlgoPairwise {
		return false
	}
	t := c.lay().topo
	if len(t.Circuits) > 0 || t.RailOnly {
		return true
	}
	for _, h := range t.Hosts {
		if len(h.Coord) == 2 {
			return true
		}
	}
	return false
}

// allToAllRoute returns the route of the all-to-all of the byte matrix:
// the forced schedule's if it applies, else the cost model's choice; nil
// for the pairwise exchange.
func (c *Communicator) allToAllRoute(bytes [][]int) *algo.Route {
	if f := c.cfg.algo; algo.Supports(algo.OpAllToAllV, f) && f != algo.AlgoAuto {
		if r := c.lay().model.AllToAllRoute(f, bytes); r != nil {
			return r
		}
	}
	_, r, _ := c.lay().model.ChooseAllToAll(bytes)
	return r
}

// exchangeCounts gathers every rank's send sizes in bytes: row j of the
// result is what rank j sends to each rank.
func (c *Communicator) exchangeCounts(ctx context.Context, p *opPeers, slens []int) ([][]int, error) {
	n := c.size
	buf := c.ws.Get(slotCounts, 8*n*n)
	offs, lens := c.blocks(8 * n)
	for j, l := range slens {
		binary.LittleEndian.PutUint64(buf[offs[c.rank]+8*j:], uint64(l))
	}
	if err := algo.AllGatherRing(ctx, algo.SubPeers(p, c.allRanks(), stepCounts), buf, offs, lens, 0); err != nil {
		return nil, err
	}
	out := make([][]int, n)
	for i := range out {
		out[i] = make([]int, n)
		for j := range out[i] {
			v := binary.LittleEndian.Uint64(buf[offs[i]+8*j:])
			if v > uint64(math.MaxInt) {
				return nil, invalidf("AllToAllV: rank %d announced a block of %d bytes", i, v)
			}
			out[i][j] = int(v)
		}
	}
	return out, nil
}

// allRanks returns 0 .. Size()-1.
func (c *Communicator) allRanks() []int {
	out := make([]int, c.size)
	for i := range out {
		out[i] = i
	}
	return out
}

// PredictAllToAllV returns the cost model's time in seconds for an
// all-to-all with schedule a in which rank s sends bytes[s][d] bytes to
// rank d, and whether the model covers it (a communicator with a topology,
// a schedule that fits it).
func (c *Communicator) PredictAllToAllV(a algo.Algorithm, bytes [][]int) (float64, bool) {
	if c.lay().model == nil {
		return 0, false
	}
	return c.lay().model.PredictAllToAll(a, bytes)
}

// AllToAllAlgorithm returns the schedule an all-to-all of the byte matrix
// runs with.
func (c *Communicator) AllToAllAlgorithm(bytes [][]int) algo.Algorithm {
	if !c.routable() || len(bytes) != c.size {
		return algo.AlgoPairwise
	}
	if r := c.allToAllRoute(bytes); r != nil {
		return r.Algorithm
	}
	return algo.AlgoPairwise
}
