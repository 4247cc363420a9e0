package topo

import "fmt"

// RailX topology builder (RailX: A Flexible, Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM Training Systems; the paper's sec. 3.2,
// Figure 6).
//
// A RailX node is an m x m mesh of chips; a chip on the node's edge has n
// optical ports on that edge, so each edge has r = m*n ports and a node
// has r rails per dimension, each a (+, -) port pair: X-rail a leaves the
// node from the east edge (+, chip (m-1, a div n)) and the west edge (-,
// chip (0, a div n)); Y-rail b from the north edge (+, chip (b div n,
// m-1)) and the south edge (-, chip (b div n, 0)). Steps:
//
//  1. the port map (railx_fabric.go) gives every rail's ring per row and
//     column, torus or HyperX;
//  2. every node becomes a Host with Coord = its (column, row), every chip
//     a Rank (local rank = cy*m + cx) driving the ports of its edges
//     (Rank.Ports), every port an OCS NIC named like "x3+";
//  3. every ring arc becomes a Circuit from the + port of one node to the -
//     port of the next on the same rail;
//  4. Topology.Ring follows a Hamiltonian ring of the node grid
//     (GridHamiltonianCycle) and crosses between nodes over circuits at the
//     chips that drive them (HamiltonianRingOrder's choice, made here from
//     the port map directly, without scanning all circuits).
//
// For R = 128 (a 64 x 64 grid), m = 7 and n = 9 this is the paper's
// 200,704-chip RailX: 4,096 hosts, 1,032,192 ports, 516,096 circuits.
// The work is linear in the number of ports.

// RailXConfig describes a RailX fabric.
type RailXConfig struct {
	// Kind is torus (the default) or hyperx.
	Kind RailXKind `json:"kind"`
	// X is the number of nodes per row, Y the number of rows (0 or 1: a
	// single row).
	X int `json:"x"`
	Y int `json:"y"`
	// Rails is r, the rails per dimension; it must be a multiple of Mesh.
	// 0 means max(X, Y) - 1 (what HyperX needs) rounded up to a multiple of
	// Mesh, at least Mesh.
	Rails int `json:"rails"`
	// Mesh is m, the chips per node edge (a node is m x m chips); 0 means
	// 1.
	Mesh int `json:"mesh"`
	// Cols and Rows, if set, are the physical column (x) and row (y) of the
	// grid's columns and rows (Host.Coord), for a fabric built on an
	// allocation of a larger grid (LargestAllocation); they must have X
	// and Y distinct non-negative entries.
	Cols []int `json:"cols,omitempty"`
	Rows []int `json:"rows,omitempty"`
	// Classes are the link parameters (zero fields: DefaultClasses); chips
	// of one node talk over HBD (the mesh), nodes over OCS.
	Classes LinkClasses `json:"classes"`
}

// normalize fills defaults and checks the configuration.
func (c *RailXConfig) normalize() error {
	if c.Kind == "" {
		c.Kind = RailXTorus
	}
	if c.Y == 0 {
		c.Y = 1
	}
	if c.Mesh == 0 {
		c.Mesh = 1
	}
	if c.X < 1 || c.Y < 1 {
		return fmt.Errorf("RailX: grid %dx%d: want at least one node per dimension", c.X, c.Y)
	}
	if c.Mesh < 1 || c.Mesh > 64 {
		return fmt.Errorf("RailX: mesh %d: want 1..64 chips per node edge", c.Mesh)
	}
	if c.Rails == 0 {
		c.Rails = max(max(c.X, c.Y)-1, 1)
		c.Rails = (c.Rails + c.Mesh - 1) / c.Mesh * c.Mesh
	}
	if c.Rails < 1 || c.Rails%c.Mesh != 0 {
		return fmt.Errorf("RailX: %d rails per dimension over a %dx%d chip mesh: rails must be a positive multiple of %d (r = m*n ports per edge)", c.Rails, c.Mesh, c.Mesh, c.Mesh)
	}
	if _, err := checkProduct("RailX chips", c.X, c.Y, c.Mesh, c.Mesh); err != nil {
		return err
	}
	// Ports: 2 per rail per dimension per node.
	if _, err := checkProduct("RailX ports", c.X, c.Y, 4, c.Rails); err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		ids  []int
		n    int
	}{{"cols", c.Cols, c.X}, {"rows", c.Rows, c.Y}} {
		if l.ids == nil {
			continue
		}
		if len(l.ids) != l.n {
			return fmt.Errorf("RailX: %d %s for a grid of %d", len(l.ids), l.name, l.n)
		}
		seen := map[int]bool{}
		for _, v := range l.ids {
			if v < 0 || seen[v] {
				return fmt.Errorf("RailX: %s %v: want distinct non-negative coordinates", l.name, l.ids)
			}
			seen[v] = true
		}
	}
	return c.Classes.check()
}

// BuildRailX returns the topology of a RailX fabric and its port map. See
// RailXConfig for the parameters and the file comment for the layout.
func BuildRailX(cfg RailXConfig) (*Topology, *RailXFabric, error) {
	if err := cfg.normalize(); err != nil {
		return nil, nil, err
	}
	f, err := NewRailXFabric(cfg.Kind, cfg.X, cfg.Y, cfg.Rails)
	if err != nil {
		return nil, nil, err
	}
	m, r := cfg.Mesh, cfg.Rails
	perEdge := r / m // n, ports per chip edge
	chips := m * m
	nodes := cfg.X * cfg.Y
	active := [2]bool{cfg.X >= 2, cfg.Y >= 2}
	// Port layout inside a node: per active dimension, 2 ports per rail
	// (+ then -).
	var dimOff [2]int
	portsPerNode := 0
	for d := 0; d < 2; d++ {
		dimOff[d] = portsPerNode
		if active[d] {
			portsPerNode += 2 * r
		}
	}
	names := make([]string, portsPerNode)
	owner := make([]int, portsPerNode) // local port -> local rank
	chipPorts := make([][]int, chips)  // local rank -> local ports
	for d := 0; d < 2; d++ {
		if !active[d] {
			continue
		}
		for a := 0; a < r; a++ {
			for s, sign := range []string{"+", "-"} {
				p := dimOff[d] + 2*a + s
				lane := a / perEdge
				var cx, cy int
				switch {
				case d == DimX && s == 0:
					cx, cy = m-1, lane
				case d == DimX:
					cx, cy = 0, lane
				case s == 0:
					cx, cy = lane, m-1
				default:
					cx, cy = lane, 0
				}
				names[p] = fmt.Sprintf("%c%d%s", "xy"[d], a, sign)
				owner[p] = cy*m + cx
				chipPorts[owner[p]] = append(chipPorts[owner[p]], p)
			}
		}
	}
	t := &Topology{
		Name:     fmt.Sprintf("railx-%s %dx%d nodes, %dx%d chips, %d rails", cfg.Kind, cfg.X, cfg.Y, m, m, r),
		Hosts:    make([]Host, nodes),
		Ranks:    make([]Rank, nodes*chips),
		NICs:     make([]NIC, nodes*portsPerNode),
		Circuits: make([]Circuit, 0, nodes*portsPerNode/2),
		Classes:  cfg.Classes.Map(),
	}
	coords := make([]int, 2*nodes)
	portIDs := make([]int, nodes*portsPerNode)
	next := 0
	for node := 0; node < nodes; node++ {
		x, y := f.Coord(node)
		px, py := x, y
		if cfg.Cols != nil {
			px = cfg.Cols[x]
		}
		if cfg.Rows != nil {
			py = cfg.Rows[y]
		}
		coords[2*node], coords[2*node+1] = px, py
		t.Hosts[node] = Host{Name: fmt.Sprintf("node%d.%d", px, py), HBDomain: -1, ToR: -1, Coord: coords[2*node : 2*node+2 : 2*node+2]}
		base := node * portsPerNode
		for p := 0; p < portsPerNode; p++ {
			t.NICs[base+p] = NIC{Host: node, Name: names[p], Rail: p / 2, Class: OCS}
		}
		for l := 0; l < chips; l++ {
			start := next
			for _, p := range chipPorts[l] {
				portIDs[next] = base + p
				next++
			}
			rk := Rank{Host: node, LocalRank: l, NIC: -1, Rail: -1}
			if next > start {
				rk.Ports = portIDs[start:next:next]
			}
			t.Ranks[node*chips+l] = rk
		}
	}
	port := func(node, d, a, sign int) int { return node*portsPerNode + dimOff[d] + 2*a + sign }
	// Circuits, in the order of f.Links(): circuit index of (d, line,
	// rail a, ring step s) is circBase[d] + (line*r + a)*k + s.
	var circBase [2]int
	for d, rings := range [][][]int{f.RingsX, f.RingsY} {
		circBase[d] = len(t.Circuits)
		k, lines := f.size(d), cfg.Y
		if d == DimY {
			lines = cfg.X
		}
		for line := 0; line < lines; line++ {
			for a, ring := range rings {
				for s := 0; s < k; s++ {
					from, to := ring[s], ring[(s+1)%k]
					var nf, nt int
					if d == DimX {
						nf, nt = f.Node(from, line), f.Node(to, line)
					} else {
						nf, nt = f.Node(line, from), f.Node(line, to)
					}
					t.Circuits = append(t.Circuits, Circuit{A: port(nf, d, a, 0), B: port(nt, d, a, 1)})
				}
			}
		}
	}
	// The flat ring: a Hamiltonian ring of nodes, crossing at the chips
	// that drive a circuit between consecutive nodes.
	hosts, err := GridHamiltonianCycle(cfg.X, cfg.Y)
	if err != nil {
		return nil, nil, err
	}
	opts := make([][]ringHop, len(hosts))
	for s := range hosts {
		u, v := hosts[s], hosts[(s+1)%len(hosts)]
		if u == v {
			continue
		}
		ux, uy := f.Coord(u)
		vx, vy := f.Coord(v)
		d, pu, pv := DimX, ux, vx
		if ux == vx {
			d, pu, pv = DimY, uy, vy
		}
		for _, a := range f.arcRails(d, pu, pv) { // u+ -> v-
			opts[s] = addHop(opts[s], ringHop{railxRank(u, chips, owner[dimOff[d]+2*a]), railxRank(v, chips, owner[dimOff[d]+2*a+1])})
		}
		for _, a := range f.arcRails(d, pv, pu) { // v+ -> u-
			opts[s] = addHop(opts[s], ringHop{railxRank(u, chips, owner[dimOff[d]+2*a+1]), railxRank(v, chips, owner[dimOff[d]+2*a])})
		}
	}
	all := make([]int, nodes*chips)
	for i := range all {
		all[i] = i
	}
	hr := make([][]int, nodes)
	for n := range hr {
		hr[n] = all[n*chips : (n+1)*chips]
	}
	if t.Ring, err = ringThroughHosts(hosts, hr, opts); err != nil {
		return nil, nil, fmt.Errorf("RailX: %w", err)
	}
	return t, f, nil
}

// railxRank returns the rank of chip l of node h when every node has
// chips chips.
func railxRank(h, chips, l int) int { return h*chips + l }
