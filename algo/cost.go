package algo

import (
	"math"
	"math/bits"

	"github.com/occl/occl/topo"
)

// Defaults of an uncalibrated model.
const (
	// DefaultStepOverhead is the software cost of one communication step:
	// a few microseconds of scheduling, system calls and wake-ups.
	DefaultStepOverhead = 5e-6
	// DefaultReduceBandwidth is how fast a rank combines received data
	// into its buffer (bytes of input per second; memory bound).
	DefaultReduceBandwidth = 5e9
)

// Model predicts schedule times on a topology.
type Model struct {
	t     *topo.Topology
	hosts [][]int
	// StepOverhead is added to every step, in seconds.
	StepOverhead float64
	// ReduceBandwidth is the rate of the reduction kernel in bytes per
	// second. Pipelined (ring) steps overlap reduction with transfer;
	// the others add it.
	ReduceBandwidth float64
}

// NewModel returns a model of t.
func NewModel(t *topo.Topology) *Model {
	return &Model{t: t, hosts: t.HostRanks(), StepOverhead: DefaultStepOverhead, ReduceBandwidth: DefaultReduceBandwidth}
}

// reduceTime is the time to combine n received bytes.
func (m *Model) reduceTime(n float64) float64 {
	if m.ReduceBandwidth <= 0 {
		return 0
	}
	return n / m.ReduceBandwidth
}

// Hosts returns the ranks of every host in local-rank order.
func (m *Model) Hosts() [][]int { return m.hosts }

// Uniform reports whether every host has the same number of ranks, which
// the hierarchical and 2D schedules need.
func (m *Model) Uniform() bool { return m.t.Uniformity() > 0 }

type flow struct {
	src, dst int
	bytes    float64
}

// stepTime is the time of one step in which flows run at once.
func (m *Model) stepTime(flows []flow) float64 {
	load := map[int]float64{}
	for _, f := range flows {
		p := m.t.Path(f.src, f.dst)
		if p.SrcNIC >= 0 {
			load[2*p.SrcNIC] += f.bytes
		}
		if p.DstNIC >= 0 {
			load[2*p.DstNIC+1] += f.bytes
		}
	}
	worst := 0.0
	for _, f := range flows {
		if f.src == f.dst || f.bytes == 0 {
			continue
		}
		p := m.t.Path(f.src, f.dst)
		if p.Class == topo.None {
			return math.Inf(1)
		}
		busy := f.bytes / p.Bandwidth
		for _, nic := range []int{2 * p.SrcNIC, 2*p.DstNIC + 1} {
			if nic < 0 {
				continue
			}
			bw := m.t.Classes[p.Class].Bandwidth
			if n := m.t.NICs[nic/2]; n.Bandwidth > 0 {
				bw = n.Bandwidth
			}
			busy = max(busy, load[nic]/bw)
		}
		worst = max(worst, p.Latency+m.StepOverhead+busy)
	}
	return worst
}

// ringTime is steps steps of a ring over each group at once, every rank
// sending bytes to the next in its group; with reduce, every step also
// combines the bytes received, overlapped with the transfer (the ring is
// pipelined).
func (m *Model) ringTime(groups [][]int, steps int, bytes float64, reduce bool) float64 {
	if steps <= 0 {
		return 0
	}
	var flows []flow
	for _, g := range groups {
		for i, r := range g {
			if len(g) > 1 {
				flows = append(flows, flow{r, g[(i+1)%len(g)], bytes})
			}
		}
	}
	t := m.stepTime(flows)
	if reduce {
		t = max(t, m.reduceTime(bytes))
	}
	return float64(steps) * t
}

// ringAllReduce is a ring reduce-scatter plus allgather of bytes per group.
func (m *Model) ringAllReduce(groups [][]int, n int, bytes float64) float64 {
	per := bytes / float64(n)
	return m.ringTime(groups, n-1, per, true) + m.ringTime(groups, n-1, per, false)
}

// AllReduce predicts the time of AllReduce of n bytes with schedule a, and
// whether a applies to this topology.
func (m *Model) AllReduce(a Algorithm, n int) (float64, bool) { return m.Predict(OpAllReduce, a, n) }

// AllGather predicts the time of AllGather of n output bytes with schedule
// a.
func (m *Model) AllGather(a Algorithm, n int) (float64, bool) { return m.Predict(OpAllGather, a, n) }

// ReduceScatter predicts the time of ReduceScatter of n input bytes with
// schedule a: AllGather's steps in reverse, reducing what arrives.
func (m *Model) ReduceScatter(a Algorithm, n int) (float64, bool) {
	return m.Predict(OpReduceScatter, a, n)
}

// Predict returns the model's time for collective c with schedule a on n
// bytes (the full buffer), or false if the model does not cover it: the
// schedule's Impl.Cost from the table.
func (m *Model) Predict(c Collective, a Algorithm, n int) (float64, bool) {
	im := implOf(c, a)
	if im == nil || im.Cost == nil {
		return 0, false
	}
	return im.Cost(m, n)
}

// Choose returns the schedule with the lowest predicted time for c on n
// bytes (the full buffer: AllReduce's vector, AllGather's output,
// ReduceScatter's input), and that time: of the schedules in the table
// that implement c and have a cost, the first with the lowest time
// (AlgoAuto if none can be predicted). AllToAll is ChooseAllToAll's choice
// for n bytes split evenly. Collectives the model does not cover get
// Select's choice and a time of 0.
func (m *Model) Choose(c Collective, n int) (Algorithm, float64) {
	if c == OpAllToAll {
		p := len(m.t.Ranks)
		a, _, t := m.ChooseAllToAll(UniformBytes(p, n/p))
		return a, t
	}
	best, bestT, covered := AlgoAuto, math.Inf(1), false
	for _, s := range schedules {
		im := s.Impl(c)
		if im == nil || im.Cost == nil {
			continue
		}
		covered = true
		if t, ok := im.Cost(m, n); ok && t < bestT {
			best, bestT = s.Algorithm, t
		}
	}
	if !covered {
		return Select(c, n, len(m.t.Ranks), AlgoAuto), 0
	}
	return best, bestT
}

// Candidates returns every schedule of the table that implements c with
// its predicted time on n bytes (ok false where the model cannot predict
// it), in table order: what Choose chose from.
func (m *Model) Candidates(c Collective, n int) []Prediction {
	var out []Prediction
	for _, s := range schedules {
		if im := s.Impl(c); im != nil && im.Cost != nil {
			t, ok := im.Cost(m, n)
			out = append(out, Prediction{Algorithm: s.Algorithm, Seconds: t, OK: ok})
		}
	}
	return out
}

// Prediction is the cost model's time for one schedule.
type Prediction struct {
	// Algorithm is the schedule.
	Algorithm Algorithm
	// Seconds is the predicted time (+Inf: a flow has no path).
	Seconds float64
	// OK is false where the model cannot predict the schedule (it does
	// not fit the topology).
	OK bool
}

// ringCollective is a ring AllGather (or, reducing, ReduceScatter) of n
// bytes along the topology's ring: p-1 steps of n/p.
func (m *Model) ringCollective(n int, reduce bool) float64 {
	N := len(m.t.Ranks)
	return m.ringTime([][]int{m.t.RingOrder()}, N-1, float64(n)/float64(N), reduce)
}

// allReduceHierarchical is an intra-host reduce-scatter and allgather (L-1
// steps of n/L each) around an inter-host ring of the n/L segment.
func (m *Model) allReduceHierarchical(n int) (float64, bool) {
	if !m.Uniform() {
		return 0, false
	}
	S := float64(n)
	H, L := len(m.hosts), len(m.hosts[0])
	local := m.ringTime(m.hosts, L-1, S/float64(L), true) + m.ringTime(m.hosts, L-1, S/float64(L), false)
	return local + m.ringAllReduce(m.rails(), H, S/float64(L)), true
}

// allReduceGateway is the intra-host tree reduce and broadcast around a
// ring allreduce among the gateways.
func (m *Model) allReduceGateway(n int) (float64, bool) {
	S := float64(n)
	H := len(m.hosts)
	gws := make([]int, H)
	levels := 0
	for i, h := range m.hosts {
		gws[i] = h[0]
		levels = max(levels, bits.Len(uint(len(h)-1)))
	}
	reduce := float64(levels) * (m.stepTime(m.treeFlows(S)) + m.reduceTime(S))
	bcast := float64(levels) * m.stepTime(m.treeFlows(S))
	return reduce + bcast + m.ringAllReduce([][]int{gws}, H, S), true
}

// allReduce2D is RailX's 2[T_R(X, n/2) + T_R(Y, n/(2X))], both dimensions
// busy at once.
func (m *Model) allReduce2D(n int) (float64, bool) {
	if !m.Uniform() {
		return 0, false
	}
	S := float64(n)
	H, L := len(m.hosts), len(m.hosts[0])
	rails := m.rails()
	half := S / 2
	// Phase 1: reduce-scatter, A along X (hosts), B along Y (rails).
	p1 := max(m.ringTime(m.hosts, L-1, half/float64(L), true), m.ringTime(rails, H-1, half/float64(H), true))
	// Phase 2: allreduce of A's segment along Y, B's along X.
	p2 := max(m.ringAllReduce(rails, H, half/float64(L)), m.ringAllReduce(m.hosts, L, half/float64(H)))
	// Phase 3: allgather, as phase 1 without reduction.
	p3 := max(m.ringTime(m.hosts, L-1, half/float64(L), false), m.ringTime(rails, H-1, half/float64(H), false))
	return p1 + p2 + p3, true
}

// allGatherHierarchical is a rail phase, then a host phase.
func (m *Model) allGatherHierarchical(n int) (float64, bool) {
	if !m.Uniform() {
		return 0, false
	}
	N, S := len(m.t.Ranks), float64(n)
	H, L := len(m.hosts), len(m.hosts[0])
	return m.ringTime(m.rails(), H-1, S/float64(N), false) + m.ringTime(m.hosts, L-1, S/float64(L), false), true
}

// reduceScatterHierarchical is a host phase, then a rail phase, reducing.
func (m *Model) reduceScatterHierarchical(n int) (float64, bool) {
	if !m.Uniform() {
		return 0, false
	}
	N, S := len(m.t.Ranks), float64(n)
	H, L := len(m.hosts), len(m.hosts[0])
	return m.ringTime(m.hosts, L-1, S/float64(L), true) + m.ringTime(m.rails(), H-1, S/float64(N), true), true
}

// halvingDoubling models recursive halving-doubling (halving) or recursive
// doubling (full vector every step), with the fold and unfold of the ranks
// beyond the largest power of two.
func (m *Model) halvingDoubling(N int, S float64, halving bool) float64 {
	pof2 := 1
	for pof2*2 <= N {
		pof2 *= 2
	}
	rem := N - pof2
	// Virtual rank v maps to a real rank as the schedules do.
	real := func(v int) int {
		if v < rem {
			return 2*v + 1
		}
		return v + rem
	}
	total := 0.0
	if rem > 0 {
		var fold []flow
		for r := 0; r < 2*rem; r += 2 {
			fold = append(fold, flow{r, r + 1, S})
		}
		total += 2*m.stepTime(fold) + m.reduceTime(S)
	}
	size := S
	for d := 1; d < pof2; d *= 2 {
		if halving {
			size /= 2
		}
		var flows []flow
		for v := 0; v < pof2; v++ {
			flows = append(flows, flow{real(v), real(v ^ d), size})
		}
		t := m.stepTime(flows)
		if halving {
			t *= 2 // the matching allgather step
		}
		total += t + m.reduceTime(size)
	}
	return total
}

// rails returns, for every local rank, the ranks with that local rank on
// every host.
func (m *Model) rails() [][]int {
	L := len(m.hosts[0])
	out := make([][]int, L)
	for l := range out {
		for _, h := range m.hosts {
			out[l] = append(out[l], h[l])
		}
	}
	return out
}

// treeFlows is one level of the intra-host trees, approximated by every
// non-gateway rank sending to its host's gateway.
func (m *Model) treeFlows(S float64) []flow {
	var flows []flow
	for _, h := range m.hosts {
		if len(h) > 1 {
			flows = append(flows, flow{h[1], h[0], S})
		}
	}
	return flows
}
