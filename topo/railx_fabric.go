package topo

import "fmt"

// RailX port maps for 2D torus and 2D HyperX configurations (RailX,
// the RailX paper's sec. 3.2-3.3).
//
// RailX nodes sit on an X x Y grid. Every node has r rails per dimension,
// each rail a pair of optical ports (+ and -). X-rail a of node (x, y)
// plugs into X-OCS (y, a), which serves row y only; Y-rail b of node
// (x, y) into Y-OCS (x, b), which serves column x only. An OCS can
// therefore only join ports of the same rail within one row (or column),
// and a rail of a row is configured as a ring through the row's nodes: the
// + port of the node at ring position t meets the - port of the node at
// position t+1. A port map is thus fully described, per dimension, by one
// ring order per rail, the same in every row (or column):
//
//   - torus: every rail follows the line order 0, 1, ..., k-1, so the rails
//     are r parallel rings and each node links only to its two neighbours
//     (sec. 3.3.1);
//   - HyperX: rail a follows directed cycle a mod (k-1) of a decomposition
//     of K*_k (DirectedHamiltonianCycles), so every ordered pair of nodes of
//     a row is an arc of some rail and every pair has two direct links
//     (Lemma 3.1, sec. 3.3.2). This needs r >= k-1 rails; with more, rails
//     reuse the cycles and a pair gets between 2*floor(r/(k-1)) and
//     2*ceil(r/(k-1)) links.
//
// A dimension of size 1 has no circuits.

// RailXKind is the logical configuration of a RailX fabric's switches.
type RailXKind string

// RailX configurations.
const (
	// RailXTorus connects every rail of a row (column) as the same ring
	// through the row in line order: a 2D torus with r parallel links per
	// neighbour pair.
	RailXTorus RailXKind = "torus"
	// RailXHyperX connects the rails of a row (column) as a Hamiltonian
	// decomposition: every pair of nodes of a row is linked directly (an
	// all-to-all row, a 2D HyperX over the grid).
	RailXHyperX RailXKind = "hyperx"
)

// Dimensions of a RailX grid.
const (
	// DimX is the dimension along a row (x varies, y fixed).
	DimX = 0
	// DimY is the dimension along a column (y varies, x fixed).
	DimY = 1
)

// RailXFabric is the port map of a RailX fabric: which node port joins
// which. Node (x, y) has id y*X + x.
type RailXFabric struct {
	// Kind is the configuration (torus or hyperx).
	Kind RailXKind `json:"kind"`
	// X is the number of nodes per row, Y the number of rows.
	X int `json:"x"`
	Y int `json:"y"`
	// Rails is the number of rails per dimension.
	Rails int `json:"rails"`
	// RingsX[a] is the cyclic order of x positions that X-rail a follows
	// in every row: the + port of rail a at x = RingsX[a][t] is joined to
	// the - port of rail a at x = RingsX[a][(t+1) mod X]. Nil if X = 1.
	RingsX [][]int `json:"rings_x"`
	// RingsY[b] is the same for Y-rail b along every column. Nil if Y = 1.
	RingsY [][]int `json:"rings_y"`

	pos [2][][]int // pos[dim][rail][coordinate] = index in the ring
}

// RailXLink is one optical circuit of a RailX fabric: the + port of rail
// Rail (of dimension Dim) of node From is joined to the - port of the same
// rail of node To.
type RailXLink struct {
	// Dim is DimX or DimY, Rail the rail within that dimension.
	Dim  int `json:"dim"`
	Rail int `json:"rail"`
	// From's + port is joined to To's - port (node ids).
	From int `json:"from"`
	To   int `json:"to"`
}

// NewRailXFabric returns the port map of an x by y RailX grid (y = 1 for
// a single row) with the given rails per dimension. HyperX needs at least
// k-1 rails for a dimension of k nodes, and k must not be 4 or 6 (no
// directed Hamiltonian decomposition exists; see
// DirectedHamiltonianCycles).
func NewRailXFabric(kind RailXKind, x, y, rails int) (*RailXFabric, error) {
	if kind == "" {
		kind = RailXTorus
	}
	if kind != RailXTorus && kind != RailXHyperX {
		return nil, fmt.Errorf("RailX: kind %q: want %q or %q", kind, RailXTorus, RailXHyperX)
	}
	if x < 1 || y < 1 || x > maxRingNodes || y > maxRingNodes {
		return nil, fmt.Errorf("RailX: grid %dx%d: want 1..%d nodes per dimension", x, y, maxRingNodes)
	}
	if rails < 1 || rails > maxRingNodes {
		return nil, fmt.Errorf("RailX: %d rails per dimension: want 1..%d", rails, maxRingNodes)
	}
	f := &RailXFabric{Kind: kind, X: x, Y: y, Rails: rails}
	var err error
	if f.RingsX, err = railRings(kind, x, rails, "X"); err != nil {
		return nil, err
	}
	if f.RingsY, err = railRings(kind, y, rails, "Y"); err != nil {
		return nil, err
	}
	for d, rings := range [][][]int{f.RingsX, f.RingsY} {
		f.pos[d] = make([][]int, len(rings))
		for a, ring := range rings {
			p := make([]int, len(ring))
			for t, v := range ring {
				p[v] = t
			}
			f.pos[d][a] = p
		}
	}
	return f, nil
}

// railRings returns the ring of every rail of a dimension of k nodes.
func railRings(kind RailXKind, k, rails int, dim string) ([][]int, error) {
	if k < 2 {
		return nil, nil
	}
	var cycles [][]int
	switch kind {
	case RailXTorus:
		line := make([]int, k)
		for i := range line {
			line[i] = i
		}
		cycles = [][]int{line}
	case RailXHyperX:
		if rails < k-1 {
			return nil, fmt.Errorf("RailX HyperX: a %s dimension of %d nodes needs at least %d rails to link every pair, have %d", dim, k, k-1, rails)
		}
		var err error
		if cycles, err = DirectedHamiltonianCycles(k); err != nil {
			return nil, fmt.Errorf("RailX HyperX along %s: %w", dim, err)
		}
	}
	out := make([][]int, rails)
	for a := range out {
		out[a] = cycles[a%len(cycles)]
	}
	return out, nil
}

// Nodes returns the number of nodes, X*Y.
func (f *RailXFabric) Nodes() int { return f.X * f.Y }

// Node returns the id of the node at (x, y).
func (f *RailXFabric) Node(x, y int) int { return y*f.X + x }

// Coord returns the position of node id.
func (f *RailXFabric) Coord(node int) (x, y int) { return node % f.X, node / f.X }

// size returns the number of nodes along dimension dim.
func (f *RailXFabric) size(dim int) int {
	if dim == DimX {
		return f.X
	}
	return f.Y
}

// Peer returns the node whose port is joined to the + port (plus) or the
// - port (!plus) of rail rail of dimension dim of node, or -1 if that port
// has no circuit (a dimension of one node) or an argument is out of range.
func (f *RailXFabric) Peer(node, dim, rail int, plus bool) int {
	if node < 0 || node >= f.Nodes() || dim < DimX || dim > DimY || rail < 0 || rail >= f.Rails {
		return -1
	}
	k := f.size(dim)
	if k < 2 {
		return -1
	}
	x, y := f.Coord(node)
	c := x
	if dim == DimY {
		c = y
	}
	ring := f.RingsX
	if dim == DimY {
		ring = f.RingsY
	}
	t := f.pos[dim][rail][c]
	if plus {
		c = ring[rail][(t+1)%k]
	} else {
		c = ring[rail][(t+k-1)%k]
	}
	if dim == DimX {
		return f.Node(c, y)
	}
	return f.Node(x, c)
}

// Links returns every circuit of the fabric: dimension X first, row by
// row, rail by rail, in ring order; then dimension Y, column by column.
func (f *RailXFabric) Links() []RailXLink {
	var out []RailXLink
	for dim, rings := range [][][]int{f.RingsX, f.RingsY} {
		k := f.size(dim)
		lines := f.Y
		if dim == DimY {
			lines = f.X
		}
		for line := 0; line < lines; line++ {
			for a, ring := range rings {
				for t := 0; t < k; t++ {
					from, to := ring[t], ring[(t+1)%k]
					l := RailXLink{Dim: dim, Rail: a}
					if dim == DimX {
						l.From, l.To = f.Node(from, line), f.Node(to, line)
					} else {
						l.From, l.To = f.Node(line, from), f.Node(line, to)
					}
					out = append(out, l)
				}
			}
		}
	}
	return out
}

// arcRails returns the rails of dimension dim whose ring has the arc
// from -> to (coordinates along dim).
func (f *RailXFabric) arcRails(dim, from, to int) []int {
	k := f.size(dim)
	if k < 2 {
		return nil
	}
	rings := f.RingsX
	if dim == DimY {
		rings = f.RingsY
	}
	var out []int
	for a, ring := range rings {
		if ring[(f.pos[dim][a][from]+1)%k] == to {
			out = append(out, a)
		}
	}
	return out
}
