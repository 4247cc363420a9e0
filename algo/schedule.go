package algo

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/topo"
)

// Schedule describes one schedule family as data: the collectives it
// implements, the fabrics it applies to, and for each collective how to
// run it, what the cost model predicts for it and whether the size rules
// pick it when there is no cost model. Every schedule is described once,
// in the table Schedules returns; choosing (Select, Choose, Model.Choose)
// and running (Run) go through that table alone.
type Schedule struct {
	// Algorithm identifies the schedule.
	Algorithm Algorithm
	// Name is the lower-case name String and ParseAlgorithm use
	// (OCCL_ALGO).
	Name string
	// Summary is a one-line description.
	Summary string
	// Applies reports whether the schedule can run on a fabric described
	// by t (nil: one host, or no description); nil means everywhere.
	Applies func(t *topo.Topology) bool
	// Impls are the collectives the schedule implements.
	Impls []Impl
}

// Impl is a schedule's implementation of one collective.
type Impl struct {
	// Op is the collective.
	Op Collective
	// Run runs the collective. It takes its input from Args.Src and
	// leaves its output in Args.Dst, in place or not alike.
	Run func(ctx context.Context, a *Args) error
	// Cost predicts the time in seconds of the collective on a buffer of
	// n bytes (the full buffer: AllReduce's vector, AllGather's output,
	// ReduceScatter's input, AllToAll's send buffer), and false where the
	// model cannot predict it. Nil: the cost model does not cover it.
	Cost func(m *Model, n int) (float64, bool)
	// Route plans a routed all-to-all of the byte matrix on t, or returns
	// nil if the route does not fit t.
	Route func(t *topo.Topology, bytes [][]int) *Route
	// MatrixCost predicts an unrouted all-to-all of the byte matrix.
	MatrixCost func(m *Model, bytes [][]int) float64
	// BySize reports whether the size rules (used without a cost model)
	// pick the schedule for a buffer of n bytes over p ranks. The first
	// schedule of the table whose BySize accepts them is chosen. Nil:
	// never by size.
	BySize func(n, p int) bool
}

// Args is everything a schedule needs to run one operation; the
// communicator fills it the same way for every schedule of a collective.
// Every collective reads Peers and WS; besides:
//
//	AllReduce      Src, Dst (the vector), DType, Op, Chunk, Ring, Hosts
//	Broadcast      Dst, Src (root only), Root, Chunk
//	Reduce         Src, Dst (root only), DType, Op, Root, Chunk
//	AllGather      Src (Block bytes), Dst (Size() blocks), Block, Chunk, Ring, Hosts
//	ReduceScatter  Src (Size() blocks), Dst (Block bytes), Block, DType, Op, Chunk, Ring, Hosts
//	Gather         Src (Block bytes), Dst (root only, Size() blocks), Block, Root
//	Scatter        Src (root only, Size() blocks), Dst (Block bytes), Block, Root
//	AllToAll(V)    Src, Dst, SendOffs, SendLens, RecvOffs, RecvLens; Route and
//	               Matrix for a routed schedule
//	Barrier        nothing more
type Args struct {
	// Peers are the ranks of the operation.
	Peers Peers
	// WS provides staging buffers.
	WS *Workspace
	// Src is the input (read only) and Dst the output. They may be the
	// same memory (in place); for AllGather Src may be this rank's block
	// of Dst, for ReduceScatter Dst may be this rank's block of Src, and
	// the schedule then overwrites the rest of Src. Off the root, Broadcast
	// has no Src and Reduce and Gather no Dst; Scatter has no Src.
	Src, Dst []byte
	// DType and Op describe the elements and the reduction.
	DType DType
	Op    Op
	// Root is the root rank of rooted collectives.
	Root int
	// Chunk is the pipelining chunk size in bytes.
	Chunk int
	// Crowded says that the ranks of this rank's host outnumber its
	// cores: a copy a rank leaves to another then costs a core that is
	// busy anyway (see broadcastTree).
	Crowded bool
	// Hosts are every host's ranks in local-rank order, nil without a
	// topology.
	Hosts [][]int
	// Ring is the order of the ranks along the topology's ring (every hop
	// a physical link); rings run in rank order if it does not cover
	// every rank.
	Ring []int
	// Block is the size in bytes of one rank's block (AllGather,
	// ReduceScatter, Gather, Scatter).
	Block int
	// SendOffs, SendLens, RecvOffs and RecvLens place every peer's block
	// in Src and Dst (AllToAll, AllToAllV).
	SendOffs, SendLens, RecvOffs, RecvLens []int
	// Route and Matrix are the route and the byte matrix of a routed
	// all-to-all.
	Route  *Route
	Matrix [][]int
}

var (
	schedules []*Schedule
	byAlgo    [numAlgorithms]*Schedule
	impls     [len(collectiveNames)][numAlgorithms]*Impl
)

// Schedules returns the table of schedules, in the order in which the
// choice considers them (on equal predicted times, and for the size
// rules, the earlier wins). The caller must not modify it.
func Schedules() []*Schedule { return schedules }

// Lookup returns the schedule of a, or nil for AlgoAuto and unknown
// values.
func Lookup(a Algorithm) *Schedule {
	if !a.Valid() {
		return nil
	}
	return byAlgo[a]
}

// Impl returns the implementation of collective c, or nil if s does not
// implement it.
func (s *Schedule) Impl(c Collective) *Impl {
	if !c.Valid() {
		return nil
	}
	return impls[c][s.Algorithm]
}

// implOf returns a's implementation of c, or nil.
func implOf(c Collective, a Algorithm) *Impl {
	if !c.Valid() || !a.Valid() {
		return nil
	}
	return impls[c][a]
}

// Applicable reports whether a implements c and applies to the fabric t
// (nil: one host, or no description).
func Applicable(c Collective, a Algorithm, t *topo.Topology) bool {
	if implOf(c, a) == nil {
		return false
	}
	ap := byAlgo[a].Applies
	return ap == nil || ap(t)
}

// register adds the schedules to the table.
func register(ss ...*Schedule) {
	for _, s := range ss {
		if !s.Algorithm.Valid() || s.Algorithm == AlgoAuto || byAlgo[s.Algorithm] != nil {
			panic(fmt.Sprintf("algo: schedule %q registered as %d", s.Name, s.Algorithm))
		}
		schedules = append(schedules, s)
		byAlgo[s.Algorithm] = s
		for i := range s.Impls {
			im := &s.Impls[i]
			if !im.Op.Valid() || impls[im.Op][s.Algorithm] != nil {
				panic(fmt.Sprintf("algo: schedule %q implements %v twice", s.Name, im.Op))
			}
			impls[im.Op][s.Algorithm] = im
		}
	}
}

// Run runs collective c with schedule a. AlgoAuto, or a schedule that does
// not implement c, runs the size rules' choice; a collective nothing
// implements is an error. Schedules read args and do not change it; it is
// passed by pointer so that the table's layers of adapters do not copy it
// at every call (35 words each time: about a tenth of a small operation's
// time on one rank, BenchmarkMachinery in comm).
func Run(ctx context.Context, c Collective, a Algorithm, args *Args) error {
	im := implOf(c, a)
	if im == nil {
		if im = implOf(c, Select(c, len(args.Dst), args.Peers.Size(), AlgoAuto)); im == nil {
			return fmt.Errorf("algo: rank %d: no schedule implements %v", args.Peers.Rank(), c)
		}
	}
	return im.Run(ctx, args)
}

// same reports whether a and b are the same memory.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// input returns a's input for schedules that take a separate one, nil when
// the operation is in place.
func (a *Args) input() []byte {
	if same(a.Src, a.Dst) {
		return nil
	}
	return a.Src
}

// ring returns the peers a flat ring runs on and the order of the ranks
// along it (nil: rank order).
func (a *Args) ring() (Peers, []int) {
	if len(a.Ring) == a.Peers.Size() {
		return a.WS.Sub(SubRing, a.Peers, a.Ring, 0), a.Ring
	}
	return a.Peers, nil
}

// blockLayout returns per-rank byte offsets and lengths for Size() equal
// blocks of a.Block, in ring order (nil: rank order), kept in the
// workspace.
func (a *Args) blockLayout(order []int) (offs, lens []int) {
	n := a.Peers.Size()
	offs, lens = a.WS.Ints(IntsBlocks, n), a.WS.Ints(IntsBlockLens, n)
	for i := range offs {
		r := i
		if order != nil {
			r = order[i]
		}
		offs[i], lens[i] = r*a.Block, a.Block
	}
	return offs, lens
}

// The collectives' shared parts: each wraps a schedule's kernel with what
// every schedule of the collective does alike (the input copies of
// in-place kernels, the cases with nothing to exchange).

// allReduce runs an AllReduce kernel that reads src (nil: in place) and
// leaves the result in data.
func allReduce(k func(ctx context.Context, a *Args, src, data []byte) error) func(context.Context, *Args) error {
	return func(ctx context.Context, a *Args) error {
		src := a.input()
		if a.Peers.Size() == 1 || len(a.Dst) == 0 {
			if src != nil {
				memcopy.Copy(a.Dst, src)
			}
			return nil
		}
		return k(ctx, a, src, a.Dst)
	}
}

// inPlace adapts a kernel that works in place on data to one that also
// takes a separate input.
func inPlace(k func(ctx context.Context, a *Args, data []byte) error) func(ctx context.Context, a *Args, src, data []byte) error {
	return func(ctx context.Context, a *Args, src, data []byte) error {
		if src != nil {
			memcopy.Copy(data, src)
		}
		return k(ctx, a, data)
	}
}

// allGather runs an AllGather kernel on the output, which holds this
// rank's block.
func allGather(k func(ctx context.Context, a *Args) error) func(context.Context, *Args) error {
	return func(ctx context.Context, a *Args) error {
		me := a.Peers.Rank()
		memcopy.Copy(a.Dst[me*a.Block:(me+1)*a.Block], a.Src)
		if a.Peers.Size() == 1 || a.Block == 0 {
			return nil
		}
		return k(ctx, a)
	}
}

// reduceScatter runs a ReduceScatter kernel that reads src (nil: in place)
// and reduces into data, then copies this rank's block of data to the
// output. In place, data is the input itself; otherwise private scratch.
func reduceScatter(k func(ctx context.Context, a *Args, src, data []byte) error) func(context.Context, *Args) error {
	return func(ctx context.Context, a *Args) error {
		me, nb := a.Peers.Rank(), a.Block
		data, src := a.Src, []byte(nil)
		if nb == 0 || !same(a.Dst, a.Src[me*nb:(me+1)*nb]) {
			// Reduce out of place into scratch, leaving the input untouched.
			data, src = a.WS.Get(SlotInput, len(a.Src)), a.Src
		}
		if nb > 0 && a.Peers.Size() > 1 {
			if err := k(ctx, a, src, data); err != nil {
				return err
			}
		} else if src != nil {
			memcopy.Copy(data, src)
		}
		memcopy.Copy(a.Dst, data[me*nb:(me+1)*nb])
		return nil
	}
}

// allToAll runs an all-to-all kernel on a private copy of the input when
// the operation is in place.
func allToAll(k func(ctx context.Context, a *Args, send []byte) error) func(context.Context, *Args) error {
	return func(ctx context.Context, a *Args) error {
		send := a.Src
		if same(a.Src, a.Dst) && len(a.Src) > 0 {
			send = a.WS.Get(SlotInput, len(a.Src))
			memcopy.Copy(send, a.Src)
		}
		return k(ctx, a, send)
	}
}

// Predicates of Schedule.Applies.

// described holds on any described fabric.
func described(t *topo.Topology) bool { return t != nil }

// uniformHosts holds when every host has the same number of ranks.
func uniformHosts(t *topo.Topology) bool { return t != nil && t.Uniformity() > 0 }

// routedFabric holds on fabrics where a routed all-to-all can beat the
// pairwise exchange: optical circuits, rail-only, or hosts on a grid.
func routedFabric(t *topo.Topology) bool {
	if t == nil {
		return false
	}
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

// upTo returns a size rule accepting buffers of at most *max bytes (read
// when applied, so retuning the threshold takes effect).
func upTo(max *int) func(n, p int) bool { return func(n, _ int) bool { return n <= *max } }

// always is the size rule of a collective's fallback schedule.
func always(int, int) bool { return true }

// reduceByChain is the chain Reduce's size rule, ahead of the tree's:
// above ReduceChainMinBytes, up to ReduceChainMaxRanks ranks. There every
// rank reduces the vector once, all at the same time, where the tree's
// root reduces it once per level while its children wait and the ring
// adds a gather to its reduce-scatter; between two ranks the chain is the
// tree's one stream of chunks, which the ring's two half-size steps
// (faster on paper by half a reduction) trailed at every size. Measured on
// 2 cores, 3-4 rotating rounds, chain / tree / ring / Open MPI's vader
// (whose tuned Reduce is a pipelined chain there too), microseconds: 2
// processes 1 MiB 126 / 128 / - / 149, 16 MiB 2659 / 2648 / - / 2993, TCP
// 1 MiB 213 / 219, 16 MiB 3705 / 3640 (and in an earlier set, tree / ring
// / vader: 1 MiB 159 / 205 / 181, 16 MiB 2793 / 3805 / 3208, TCP 1 MiB 238
// / 384, 16 MiB 4472 / 5995); 3 processes 128 KiB
// 47.6 / 69.5 / - / 37.6, 256 KiB 85.4 / 130 / - / 80.0, 1 MiB 323 / 556
// / 618 / 351, 4 MiB 1673 / 2469 / 2691 / 1953, 16 MiB 7846 / 13986 /
// 11986 / 8919; 4 processes 256 KiB 160 / 176 / - / 134, 1 MiB 558 / 502
// / 862 / 661, 16 MiB 13655 / 13994 / 14927 / 15275. The chain's last
// chunk reaches the root p-1 chunks after its first, which bounds the
// ranks it is chosen for (not measured past 4 here).
func reduceByChain(n, p int) bool {
	return n > ReduceChainMinBytes && p <= ReduceChainMaxRanks
}
