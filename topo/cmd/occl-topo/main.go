// Command occl-topo prints, as indented JSON, what occl's topology
// builders make, so that people and tests can inspect them:
//
//	occl-topo railx -nodes 7 [-dims 2] [-kind torus|hyperx] [-rails N] [-mesh M]
//	occl-topo kring -nodes 32 -k 3 -gpus-per-node 4 -tp 16 -faults 3,4,17 [-tor P]
//	occl-topo railonly -domains 4 -k 8
//	occl-topo railopt -hosts 4 -gpus 8
//	occl-topo hamiltonian -n 9
//	occl-topo alloc -x 8 -y 8 -faults 1:2,3:4
//	occl-topo show FILE|SPEC
//	occl-topo without -failed 4,5 [-topology] FILE|SPEC
//	occl-topo discover
//
// The builders (railx, kring, railonly, railopt) and without take
// -topology to print the full topology instead, in the format
// OCCL_TOPO=FILE reads. They and show take -dot to print the topology as a Graphviz graph (dot.go), and
// -svg FILE to render that graph with Graphviz's dot into an SVG file. Exit
// status: 0 on success, 1 when the arguments are well formed but invalid
// (the error says why), 2 on a usage error (unknown subcommand or flag).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/occl/occl/topo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: occl-topo <command> [flags]

Print topologies built by occl's topo package as JSON.

commands:
  railx        RailX rails: Hamiltonian rings per rail and the port map
  kring        InfinitePOD K-hop rings, fault bypass, TP groups, waste
  railonly     rail-only fabric: rails, HB domains, forwarding ranks
  railopt      rail-optimized cluster
  hamiltonian  Hamiltonian decomposition of the complete graph K_n / K*_n
  alloc        largest fault-free allocation of a RailX grid (Alg. 2)
  show FILE|SPEC  load and validate a topology file or spec, print a summary
  without      the survivors of failed ranks: ranks kept, idle, their ring
  discover     describe this machine (NUMA nodes, NICs, RDMA devices)

Builders and without take -topology to print the whole topology (for
OCCL_TOPO=FILE). Builders, show and without take -dot to print it as a Graphviz graph, and -svg FILE
to render that graph into an SVG file (needs Graphviz's dot).
Run 'occl-topo <command> -h' for a command's flags.
Exit status: 0 ok, 1 invalid arguments, 2 usage error.
`

// A command defines its flags on fs and returns what to do with the
// positional arguments once the flags are parsed.
type command func(fs *flag.FlagSet) func(args []string) (any, error)

var commands = map[string]command{
	"railx":       railxCmd,
	"kring":       kringCmd,
	"railonly":    railonlyCmd,
	"railopt":     railoptCmd,
	"hamiltonian": hamiltonianCmd,
	"alloc":       allocCmd,
	"show":        showCmd,
	"without":     withoutCmd,
	"discover":    discoverCmd,
}

// run executes occl-topo with args (without the program name) and returns
// the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "occl-topo: unknown command %q\n\n%s", name, usage)
		return 2
	}
	fs := flag.NewFlagSet("occl-topo "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	do := cmd(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	out, err := do(fs.Args())
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "occl-topo %s: %v\n", name, err)
			fs.Usage()
			return 2
		}
		fmt.Fprintf(stderr, "occl-topo %s: %v\n", name, err)
		return 1
	}
	if raw, ok := out.(rawJSON); ok {
		stdout.Write(append(raw, '\n'))
		return 0
	}
	if text, ok := out.(rawText); ok {
		stdout.Write(text)
		return 0
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "occl-topo %s: %v\n", name, err)
		return 1
	}
	return 0
}

// usageError is a malformed command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// rawJSON is output that is JSON already (a topology).
type rawJSON []byte

// rawText is output printed as it is (a Graphviz graph; empty after -svg).
type rawText []byte

// setUsage gives fs a usage message: a description and the flags.
func setUsage(fs *flag.FlagSet, synopsis, text string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s %s\n\n%s\nflags:\n", fs.Name(), synopsis, text)
		fs.PrintDefaults()
	}
}

// noArgs rejects positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", args[0])}
	}
	return nil
}

// classFlags adds -hbd, -eps and -ocs bandwidth flags.
type classFlags struct{ hbd, eps, ocs *string }

func addClassFlags(fs *flag.FlagSet) classFlags {
	return classFlags{
		hbd: fs.String("hbd", "", "HB-domain / intra-host bandwidth, e.g. 900GB/s (default 20GB/s)"),
		eps: fs.String("eps", "", "packet-network bandwidth per NIC, e.g. 400Gb/s (default 12.5GB/s)"),
		ocs: fs.String("ocs", "", "optical circuit bandwidth, e.g. 800Gb/s (default 12.5GB/s)"),
	}
}

func (c classFlags) classes() (topo.LinkClasses, error) {
	var lc topo.LinkClasses
	for _, f := range []struct {
		v   string
		dst *topo.LinkParams
		n   string
	}{{*c.hbd, &lc.HBD, "hbd"}, {*c.eps, &lc.EPS, "eps"}, {*c.ocs, &lc.OCS, "ocs"}} {
		if f.v == "" {
			continue
		}
		bw, err := topo.ParseBandwidth(f.v)
		if err != nil {
			return lc, fmt.Errorf("-%s: %w", f.n, err)
		}
		f.dst.Bandwidth = bw
	}
	return lc, nil
}

// parseInts parses "3,4,17" (empty: none).
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.Atoi(part)
		if err != nil {
			return nil, fmt.Errorf("-%s: %q is not an integer (want a comma-separated list such as 3,4,17)", flagName, part)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseGridFaults parses "1:2,3:4" as (x, y) pairs.
func parseGridFaults(s string) ([]topo.GridFault, error) {
	var out []topo.GridFault
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, ":")
		x, err1 := strconv.Atoi(a)
		y, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("-faults: %q is not X:Y (want a comma-separated list such as 1:2,3:4)", part)
		}
		out = append(out, topo.GridFault{X: x, Y: y})
	}
	return out, nil
}

// railx

type railxPorts struct {
	Node   int   `json:"node"`
	Coord  []int `json:"coord"`
	XPlus  []int `json:"x_plus,omitempty"`
	XMinus []int `json:"x_minus,omitempty"`
	YPlus  []int `json:"y_plus,omitempty"`
	YMinus []int `json:"y_minus,omitempty"`
}

type railxOut struct {
	Kind        topo.RailXKind `json:"kind"`
	Dims        int            `json:"dims"`
	NodesPerDim int            `json:"nodes_per_dim"`
	Nodes       int            `json:"nodes"`
	Rails       int            `json:"rails"`
	Mesh        int            `json:"mesh"`
	Chips       int            `json:"chips"`
	Circuits    int            `json:"circuits"`
	RingsX      [][]int        `json:"rings_x"`
	RingsY      [][]int        `json:"rings_y,omitempty"`
	Ports       []railxPorts   `json:"ports"`
	NodeRing    []int          `json:"node_ring"`
}

func railxCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[flags]", `RailX ("RailX: A Flexible, Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM Training Systems"): nodes on a grid, r rails per dimension, each rail a
ring through a row (X) or column (Y). torus: every rail follows the line order;
hyperx: rail a follows directed Hamiltonian cycle a mod (k-1), so every pair of
nodes of a row is linked directly (needs -rails >= nodes-1; nodes != 4, 6).
Prints the ring of every rail (x positions for X rails, y for Y rails) and, per
node, the peer node of each rail's + and - port (node id = y*nodes + x).
`)
	nodes := fs.Int("nodes", 5, "nodes per dimension")
	dims := fs.Int("dims", 2, "dimensions: 1 (one row) or 2 (a grid)")
	kind := fs.String("kind", "torus", "configuration: torus or hyperx")
	rails := fs.Int("rails", 0, "rails per dimension (0: nodes-1, rounded up to a multiple of -mesh)")
	mesh := fs.Int("mesh", 1, "chips per node edge (a node is mesh x mesh chips)")
	full := fs.Bool("topology", false, "print the full topology instead")
	pf := addPictureFlags(fs)
	cf := addClassFlags(fs)
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		if *dims != 1 && *dims != 2 {
			return nil, fmt.Errorf("-dims %d: want 1 or 2", *dims)
		}
		lc, err := cf.classes()
		if err != nil {
			return nil, err
		}
		cfg := topo.RailXConfig{Kind: topo.RailXKind(*kind), X: *nodes, Y: 1, Rails: *rails, Mesh: *mesh, Classes: lc}
		if *dims == 2 {
			cfg.Y = *nodes
		}
		t, f, err := topo.BuildRailX(cfg)
		if err != nil {
			return nil, err
		}
		if pf.wanted() {
			return pf.render(t)
		}
		if *full {
			return rawJSON(t.JSON()), nil
		}
		out := railxOut{Kind: f.Kind, Dims: *dims, NodesPerDim: *nodes, Nodes: f.Nodes(), Rails: f.Rails,
			Mesh: *mesh, Chips: len(t.Ranks), Circuits: len(t.Circuits), RingsX: f.RingsX, RingsY: f.RingsY}
		for n := 0; n < f.Nodes(); n++ {
			x, y := f.Coord(n)
			p := railxPorts{Node: n, Coord: []int{x, y}}
			for a := 0; a < f.Rails; a++ {
				if f.X > 1 {
					p.XPlus = append(p.XPlus, f.Peer(n, topo.DimX, a, true))
					p.XMinus = append(p.XMinus, f.Peer(n, topo.DimX, a, false))
				}
				if f.Y > 1 {
					p.YPlus = append(p.YPlus, f.Peer(n, topo.DimY, a, true))
					p.YMinus = append(p.YMinus, f.Peer(n, topo.DimY, a, false))
				}
			}
			out.Ports = append(out.Ports, p)
		}
		for i, r := range t.Ring {
			if i == 0 || t.Ranks[r].Host != t.Ranks[t.Ring[i-1]].Host {
				out.NodeRing = append(out.NodeRing, t.Ranks[r].Host)
			}
		}
		return out, nil
	}
}

// kring

type kringOut struct {
	Nodes       int     `json:"nodes"`
	K           int     `json:"k"`
	GPUsPerNode int     `json:"gpus_per_node"`
	TP          int     `json:"tp,omitempty"`
	Faults      []int   `json:"faults"`
	Segments    [][]int `json:"segments"`
	Broken      bool    `json:"broken"`
	// Placement (when -tp is given).
	NodesPerGroup int     `json:"nodes_per_group,omitempty"`
	TPGroups      [][]int `json:"tp_groups,omitempty"`
	HealthyGPUs   int     `json:"healthy_gpus"`
	PlacedGPUs    int     `json:"placed_gpus"`
	WastedGPUs    int     `json:"wasted_gpus"`
	// ToR-aware placement (when -tor is given).
	NodesPerToR       int   `json:"nodes_per_tor,omitempty"`
	Line              []int `json:"line,omitempty"`
	JobGPUs           int   `json:"job_gpus,omitempty"`
	Constraints       *int  `json:"constraints,omitempty"`
	MaxConstraints    int   `json:"max_constraints,omitempty"`
	IsolatedPieces    int   `json:"isolated_pieces,omitempty"`
	AlignedDomains    int   `json:"aligned_domains,omitempty"`
	CrossDomainGroups *int  `json:"cross_domain_groups,omitempty"`
}

func kringCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[flags]", `InfinitePOD ("InfinitePOD: Building Datacenter-Scale High-Bandwidth Domain for LLM with Optical Circuit Switching Transceivers"): nodes on a line, node i linked to
i+-1..i+-K. Failed nodes are bypassed over backup links; K or more consecutive
failures split the line into segments (each closes into a ring). With -tp,
places TP groups of consecutive healthy nodes (Alg. 2) and counts wasted GPUs;
with -tor, deploys the line across ToRs and places under DCN constraints
(Alg. 3-5).
`)
	nodes := fs.Int("nodes", 32, "nodes on the line")
	k := fs.Int("k", 2, "hop reach K of a node's links")
	gpn := fs.Int("gpus-per-node", 4, "GPUs per node R (K <= R)")
	tp := fs.Int("tp", 0, "TP group size in GPUs, a multiple of -gpus-per-node (0: no placement)")
	faults := fs.String("faults", "", "failed nodes, e.g. 3,4,17")
	tor := fs.Int("tor", 0, "nodes per ToR: deploy the line across ToRs and place ToR-aware (needs -tp)")
	domain := fs.Int("domain", 0, "nodes per aggregation domain for -tor (0: one domain)")
	job := fs.Int("job", 0, "GPUs the job needs for -tor (0: all the line holds)")
	full := fs.Bool("topology", false, "print the full topology (of the TP groups if -tp, else of the segments)")
	pf := addPictureFlags(fs)
	cf := addClassFlags(fs)
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		fl, err := parseInts("faults", *faults)
		if err != nil {
			return nil, err
		}
		lc, err := cf.classes()
		if err != nil {
			return nil, err
		}
		if *gpn < 1 {
			return nil, fmt.Errorf("-gpus-per-node %d: want at least 1", *gpn)
		}
		if *tor != 0 && *tp == 0 {
			return nil, fmt.Errorf("-tor %d needs -tp (ToR-aware placement places TP groups)", *tor)
		}
		out := kringOut{Nodes: *nodes, K: *k, GPUsPerNode: *gpn, TP: *tp, Faults: fl}
		if out.Faults == nil {
			out.Faults = []int{}
		}
		segs, err := topo.KHopSegments(*nodes, *k, fl)
		if err != nil {
			return nil, err
		}
		out.Segments = segs
		out.Broken = len(segs) > 1
		var rings [][]int
		switch {
		case *tor != 0:
			p, err := topo.PlaceTPGroupsToR(topo.ToRPlacementConfig{Nodes: *nodes, K: *k, GPUsPerNode: *gpn, TP: *tp, Faults: fl, NodesPerToR: *tor, NodesPerDomain: *domain, JobGPUs: *job})
			if err != nil {
				return nil, err
			}
			// Segments of the deployed line, not of node order.
			if out.Segments, err = topo.KHopLineSegments(*nodes, *k, p.Line, fl); err != nil {
				return nil, err
			}
			out.Broken = len(out.Segments) > 1
			out.NodesPerGroup, out.TPGroups = p.NodesPerGroup, p.Groups
			out.HealthyGPUs, out.PlacedGPUs, out.WastedGPUs = p.HealthyGPUs, p.PlacedGPUs, p.WastedGPUs
			out.NodesPerToR, out.Line, out.JobGPUs = *tor, p.Line, p.JobGPUs
			out.Constraints, out.MaxConstraints = &p.Constraints, p.MaxConstraints
			out.IsolatedPieces, out.AlignedDomains, out.CrossDomainGroups = p.IsolatedPieces, p.AlignedDomains, &p.CrossDomainGroups
			rings = p.Groups
		case *tp != 0:
			p, err := topo.PlaceTPGroups(*nodes, *k, *gpn, *tp, fl)
			if err != nil {
				return nil, err
			}
			out.NodesPerGroup, out.TPGroups = p.NodesPerGroup, p.Groups
			out.HealthyGPUs, out.PlacedGPUs, out.WastedGPUs = p.HealthyGPUs, p.PlacedGPUs, p.WastedGPUs
			rings = p.Groups
		default:
			for _, s := range segs {
				out.HealthyGPUs += len(s) * *gpn
			}
		}
		if *full || pf.wanted() {
			if rings != nil && len(rings) == 0 {
				return nil, fmt.Errorf("no TP group of %d GPUs fits, so there is no topology to print", *tp)
			}
			t, err := topo.BuildKRing(topo.KRingConfig{Nodes: *nodes, K: *k, GPUsPerNode: *gpn, Faults: fl, NodesPerToR: *tor, Classes: lc}, rings)
			if err != nil {
				return nil, err
			}
			if pf.wanted() {
				return pf.render(t)
			}
			return rawJSON(t.JSON()), nil
		}
		return out, nil
	}
}

// railonly

type railonlyOut struct {
	Domains       int     `json:"domains"`
	K             int     `json:"k"`
	Ranks         int     `json:"ranks"`
	Hosts         int     `json:"hosts"`
	RailOnly      bool    `json:"rail_only"`
	DomainRanks   [][]int `json:"domain_ranks"`
	Rails         [][]int `json:"rails"`
	Forwarders    [][]int `json:"forwarders,omitempty"`
	ForwarderNote string  `json:"forwarders_note,omitempty"`
}

func railonlyCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[flags]", `Rail-only fabric ("How to Build Low-cost Networks for Large Language Models (without Sacrificing Performance)?"): HB domains of K GPUs; GPU i of every
domain sits on rail i; no path across rails of different domains. With -routes,
forwarders[src][dst] is the rank that carries src's message to dst across the
rail network (src itself when no forwarding is needed).
`)
	domains := fs.Int("domains", 4, "HB domains")
	k := fs.Int("k", 8, "GPUs (and rails) per domain")
	hpd := fs.Int("hosts-per-domain", 1, "hosts a domain spans (divides -k)")
	routes := fs.Bool("routes", false, "print the forwarding rank of every (src, dst) pair")
	full := fs.Bool("topology", false, "print the full topology instead")
	pf := addPictureFlags(fs)
	cf := addClassFlags(fs)
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		lc, err := cf.classes()
		if err != nil {
			return nil, err
		}
		t, err := topo.BuildRailOnly(topo.RailOnlyConfig{Domains: *domains, GPUsPerDomain: *k, HostsPerDomain: *hpd, Classes: lc})
		if err != nil {
			return nil, err
		}
		if pf.wanted() {
			return pf.render(t)
		}
		if *full {
			return rawJSON(t.JSON()), nil
		}
		out := railonlyOut{Domains: *domains, K: *k, Ranks: len(t.Ranks), Hosts: len(t.Hosts), RailOnly: t.RailOnly}
		out.DomainRanks = make([][]int, *domains)
		out.Rails = make([][]int, *k)
		for g, rk := range t.Ranks {
			d := t.Hosts[rk.Host].HBDomain
			out.DomainRanks[d] = append(out.DomainRanks[d], g)
			out.Rails[rk.Rail] = append(out.Rails[rk.Rail], g)
		}
		if *routes {
			const maxRoutes = 1024
			if len(t.Ranks) > maxRoutes {
				return nil, fmt.Errorf("-routes prints a %d x %d table; at most %d ranks", len(t.Ranks), len(t.Ranks), maxRoutes)
			}
			out.Forwarders = make([][]int, len(t.Ranks))
			for s := range t.Ranks {
				out.Forwarders[s] = make([]int, len(t.Ranks))
				for d := range t.Ranks {
					out.Forwarders[s][d] = topo.RailOnlyForwarder(*k, s, d)
				}
			}
		}
		return out, nil
	}
}

// railopt

type railoptOut struct {
	Hosts int     `json:"hosts"`
	GPUs  int     `json:"gpus"`
	Ranks int     `json:"ranks"`
	NICs  int     `json:"nics"`
	Rails [][]int `json:"rails"`
}

func railoptCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[flags]", `Rail-optimized cluster: hosts of GPUs, one packet-network NIC per GPU on
rail = local rank, every NIC reachable from every NIC. Prints the ranks of
every rail.
`)
	hosts := fs.Int("hosts", 4, "hosts")
	gpus := fs.Int("gpus", 8, "GPUs per host")
	numa := fs.Int("numa", 1, "NUMA nodes per host the GPUs spread over")
	full := fs.Bool("topology", false, "print the full topology instead")
	pf := addPictureFlags(fs)
	cf := addClassFlags(fs)
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		lc, err := cf.classes()
		if err != nil {
			return nil, err
		}
		t, err := topo.BuildRailOptimized(topo.RailOptConfig{Hosts: *hosts, GPUsPerHost: *gpus, NUMANodes: *numa, Classes: lc})
		if err != nil {
			return nil, err
		}
		if pf.wanted() {
			return pf.render(t)
		}
		if *full {
			return rawJSON(t.JSON()), nil
		}
		out := railoptOut{Hosts: len(t.Hosts), GPUs: *gpus, Ranks: len(t.Ranks), NICs: len(t.NICs), Rails: make([][]int, *gpus)}
		for r, rk := range t.Ranks {
			out.Rails[rk.Rail] = append(out.Rails[rk.Rail], r)
		}
		return out, nil
	}
}

// hamiltonian

type hamiltonianOut struct {
	N          int     `json:"n"`
	Directed   [][]int `json:"directed"`
	Undirected [][]int `json:"undirected,omitempty"`
}

func hamiltonianCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[flags]", fmt.Sprintf(`Hamiltonian decomposition of the complete graph on n nodes (RailX Lemma 3.1):
directed: n-1 directed Hamiltonian cycles using every ordered pair once (every n
except 4 and 6; even n up to %d); undirected (odd n): Walecki's (n-1)/2 cycles
using every edge once.
`, topo.MaxDirectedDecomposition))
	n := fs.Int("n", 9, "nodes")
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		d, err := topo.DirectedHamiltonianCycles(*n)
		if err != nil {
			return nil, err
		}
		out := hamiltonianOut{N: *n, Directed: d}
		if *n%2 == 1 {
			if out.Undirected, err = topo.WaleckiCycles(*n); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// alloc

func allocCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[flags]", `Largest fault-free sub-grid of an X x Y RailX grid (RailX Alg. 2): every
failed node's row or column is disabled; prints the kept rows (y) and columns
(x) and the size.
`)
	x := fs.Int("x", 8, "columns (nodes per row)")
	y := fs.Int("y", 8, "rows")
	faults := fs.String("faults", "", "failed nodes as X:Y pairs, e.g. 1:2,3:4")
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		fl, err := parseGridFaults(*faults)
		if err != nil {
			return nil, err
		}
		return topo.LargestAllocation(*x, *y, fl)
	}
}

// show

type showOut struct {
	Name         string                             `json:"name,omitempty"`
	Hosts        int                                `json:"hosts"`
	Ranks        int                                `json:"ranks"`
	RanksPerHost int                                `json:"ranks_per_host"`
	HBDomains    int                                `json:"hb_domains"`
	NICs         int                                `json:"nics"`
	OCSPorts     int                                `json:"ocs_ports"`
	Circuits     int                                `json:"circuits"`
	RailOnly     bool                               `json:"rail_only"`
	Classes      map[topo.LinkClass]topo.LinkParams `json:"classes"`
	Ring         []int                              `json:"ring,omitempty"`
}

func showCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "[-dot | -svg FILE.svg] FILE|SPEC", `Load a topology file (the format -topology prints and OCCL_TOPO=FILE reads)
or build one from an OCCL_TOPO spec such as hosts=4x2,nics=host,ocs_ports=2,circuits=0-1/2-3,
validate it and print a summary: counts, link classes and the ring order.
`)
	pf := addPictureFlags(fs)
	return func(args []string) (any, error) {
		if len(args) != 1 {
			return nil, usageError{"want exactly one FILE or SPEC"}
		}
		t, err := topo.FromSpec(args[0])
		if err != nil {
			return nil, err
		}
		if pf.wanted() {
			return pf.render(t)
		}
		out := showOut{Name: t.Name, Hosts: len(t.Hosts), Ranks: len(t.Ranks), RanksPerHost: t.Uniformity(),
			NICs: len(t.NICs), Circuits: len(t.Circuits), RailOnly: t.RailOnly, Classes: t.Classes, Ring: t.Ring}
		domains := map[int]bool{}
		for h, host := range t.Hosts {
			if host.HBDomain >= 0 {
				domains[host.HBDomain] = true
			} else {
				domains[-1-h] = true
			}
		}
		out.HBDomains = len(domains)
		for _, n := range t.NICs {
			if n.Class == topo.OCS {
				out.OCSPorts++
			}
		}
		return out, nil
	}
}

// without

type withoutOut struct {
	Ranks     []int `json:"ranks"`
	Idle      []int `json:"idle"`
	Hosts     int   `json:"hosts"`
	HBDomains int   `json:"hb_domains"`
	Circuits  int   `json:"circuits"`
	Ring      []int `json:"ring,omitempty"`
}

func withoutCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "-failed R,R,... [-topology | -dot | -svg FILE.svg] FILE|SPEC", `Load a topology file or spec and print what survives the failed ranks
(Topology.Without): the ranks that keep working, numbered as in the file, the
healthy ranks left idle, and the survivors' topology (a summary, or whole with
-topology): a K-hop line bypasses failed nodes over backup links, a RailX grid
keeps its largest fault-free allocation.
`)
	failed := fs.String("failed", "", "failed ranks, e.g. 4,5")
	full := fs.Bool("topology", false, "print the survivors' whole topology")
	pf := addPictureFlags(fs)
	return func(args []string) (any, error) {
		if len(args) != 1 {
			return nil, usageError{"want exactly one FILE or SPEC"}
		}
		ranks, err := parseInts("failed", *failed)
		if err != nil {
			return nil, err
		}
		t, err := topo.FromSpec(args[0])
		if err != nil {
			return nil, err
		}
		s, err := t.Without(ranks)
		if err != nil {
			return nil, err
		}
		switch {
		case pf.wanted():
			return pf.render(s.Topology)
		case *full:
			return rawJSON(s.Topology.JSON()), nil
		}
		out := withoutOut{Ranks: s.Ranks, Idle: s.Idle, Hosts: len(s.Topology.Hosts), Circuits: len(s.Topology.Circuits), Ring: s.Topology.Ring}
		domains := map[int]bool{}
		for h, host := range s.Topology.Hosts {
			if host.HBDomain >= 0 {
				domains[host.HBDomain] = true
			} else {
				domains[-1-h] = true
			}
		}
		out.HBDomains = len(domains)
		return out, nil
	}
}

// discover

func discoverCmd(fs *flag.FlagSet) func([]string) (any, error) {
	setUsage(fs, "", `Describe this machine as occl discovers it: NUMA nodes and their CPUs,
network interfaces, RDMA devices.
`)
	return func(args []string) (any, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		return topo.Discover(), nil
	}
}
