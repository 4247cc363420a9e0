package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/occl/occl/topo"
)

// Graphviz pictures of a topology (-dot, -svg).
//
// The graph is undirected. Every host is a cluster named cluster_host<h>
// (inside a cluster_hbd<d> when several hosts share an HB domain) holding a
// node rank<r> per rank and nic<i> per NIC or OCS port. Outside the hosts
// are the electrical switches the model implies: a ToR switch tor<k> where
// hosts name one, else one switch rail<k> per rail of packet-network NICs
// (eps for NICs on no rail), and a spine joining them unless the fabric is
// rail-only. Every edge carries class= its kind, drawn in its own style:
//
//	nic      rank to the packet-network NIC it sends through   solid, grey
//	port     rank to an OCS port it drives                       solid, grey
//	eps      NIC to its electrical switch                        dashed, green
//	tor      host to its ToR switch                              dashed, green
//	uplink   switch to the spine                                 dashed, bold
//	ocs      an optical circuit between two ports                bold, coloured by rail
//
// A circuit's edge has id circuit<i>, its index in Topology.Circuits.

// railColors colour the circuits of rail k (k mod len).
var railColors = []string{"#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22"}

// edgeStyle is the drawing of each edge kind.
var edgeStyle = map[string]string{
	"nic":    `style=solid, color="#777777"`,
	"port":   `style=solid, color="#777777"`,
	"eps":    `style=dashed, color="#2ca02c"`,
	"tor":    `style=dashed, color="#2ca02c"`,
	"uplink": `style=dashed, color="#2ca02c", penwidth=2`,
}

// dotQuote quotes s as a DOT string; a newline becomes a centred line
// break.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// topologyDOT returns t as a Graphviz graph (see the comment above).
func topologyDOT(t *topo.Topology) []byte {
	var b bytes.Buffer
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	label := t.Name
	if label == "" {
		label = "occl topology"
	}
	summary := fmt.Sprintf("%d hosts, %d ranks, %d NICs and ports, %d circuits", len(t.Hosts), len(t.Ranks), len(t.NICs), len(t.Circuits))
	if t.RailOnly {
		summary += ", rail-only"
	}
	if t.GridOnly {
		summary += ", hosts reach their row and column only"
	}
	grid := gridRows(t)
	rankdir := "LR"
	if grid != nil {
		rankdir = "TB" // rows of the grid one under the other
	}
	w(0, "graph %s {", dotQuote("occl"))
	w(1, "graph [label=%s, labelloc=t, compound=true, newrank=true, rankdir=%s, nodesep=0.15, ranksep=0.5, fontname=Helvetica, fontsize=12];", dotQuote(label+"\n"+summary), rankdir)
	w(1, "node [fontname=Helvetica, fontsize=9, height=0.2, margin=\"0.05,0.02\"];")
	w(1, "edge [fontname=Helvetica, fontsize=8];")

	// Hosts, grouped by multi-host HB domain.
	byDomain := map[int][]int{}
	for h, host := range t.Hosts {
		if host.HBDomain >= 0 {
			byDomain[host.HBDomain] = append(byDomain[host.HBDomain], h)
		}
	}
	hostRanks := t.HostRanks()
	hostNICs := make([][]int, len(t.Hosts))
	for i, n := range t.NICs {
		hostNICs[n.Host] = append(hostNICs[n.Host], i)
	}
	writeHost := func(indent, h int) {
		host := t.Hosts[h]
		name := host.Name
		if name == "" {
			name = "host" + strconv.Itoa(h)
		}
		if len(host.Coord) > 0 {
			name += " " + coordString(host.Coord)
		}
		w(indent, "subgraph %s {", dotQuote("cluster_host"+strconv.Itoa(h)))
		if !strings.HasPrefix(name, "host"+strconv.Itoa(h)) {
			name = fmt.Sprintf("host %d: %s", h, name)
		}
		w(indent+1, "label=%s; style=rounded; color=\"#444444\";", dotQuote(name))
		for _, r := range hostRanks[h] {
			if r < 0 {
				continue
			}
			w(indent+1, "%s [label=%s, shape=box, style=filled, fillcolor=\"#fff2cc\", class=rank];",
				dotQuote("rank"+strconv.Itoa(r)), dotQuote(fmt.Sprintf("rank %d\nlocal %d", r, t.Ranks[r].LocalRank)))
		}
		for _, i := range hostNICs[h] {
			w(indent+1, "%s [label=%s, shape=ellipse, class=%s];", dotQuote("nic"+strconv.Itoa(i)), dotQuote(nicLabel(t, i)), t.NICs[i].Class)
		}
		w(indent, "}")
	}
	seenDomain := map[int]bool{}
	for h, host := range t.Hosts {
		d := host.HBDomain
		if d < 0 || len(byDomain[d]) < 2 {
			writeHost(1, h)
			continue
		}
		if seenDomain[d] {
			continue
		}
		seenDomain[d] = true
		w(1, "subgraph %s {", dotQuote("cluster_hbd"+strconv.Itoa(d)))
		w(2, "label=%s; style=dashed; color=\"#888888\";", dotQuote(fmt.Sprintf("HB domain %d", d)))
		for _, hh := range byDomain[d] {
			writeHost(2, hh)
		}
		w(1, "}")
	}

	// Hosts on a grid: row y+1 below row y, the hosts of a row side by
	// side, by invisible edges from a NIC of each host to a rank of the
	// host below it.
	for y := 0; y+1 < len(grid); y++ {
		for i, h := range grid[y] {
			if i >= len(grid[y+1]) || len(hostNICs[h]) == 0 {
				continue
			}
			below := grid[y+1][i]
			if len(hostRanks[below]) == 0 || hostRanks[below][0] < 0 {
				continue
			}
			w(1, "%s -- %s [style=invis, weight=10];", dotQuote("nic"+strconv.Itoa(hostNICs[h][0])), dotQuote("rank"+strconv.Itoa(hostRanks[below][0])))
		}
	}

	// Electrical switches.
	sw := dotSwitches(t)
	for _, s := range sw.names {
		w(1, "%s [label=%s, shape=box3d, style=filled, fillcolor=\"#d9ead3\", class=switch];", dotQuote(s), dotQuote(sw.labels[s]))
	}
	if sw.spine {
		w(1, "%s [label=%s, shape=box3d, style=filled, fillcolor=\"#b6d7a8\", class=switch];", dotQuote("spine"), dotQuote("spine\npacket network"))
	}

	// Edges: ranks to their NICs and ports.
	for r, rk := range t.Ranks {
		if rk.NIC >= 0 {
			w(1, "%s -- %s [class=nic, %s];", dotQuote("rank"+strconv.Itoa(r)), dotQuote("nic"+strconv.Itoa(rk.NIC)), edgeStyle["nic"])
		}
		for _, p := range rk.Ports {
			w(1, "%s -- %s [class=port, %s];", dotQuote("rank"+strconv.Itoa(r)), dotQuote("nic"+strconv.Itoa(p)), edgeStyle["port"])
		}
	}
	// NICs to their switches, hosts to their ToRs, switches to the spine.
	for i := range t.NICs {
		if s := sw.ofNIC[i]; s != "" {
			w(1, "%s -- %s [class=eps, %s];", dotQuote("nic"+strconv.Itoa(i)), dotQuote(s), edgeStyle["eps"])
		}
	}
	for h, s := range sw.ofHost {
		if s == "" || len(hostRanks[h]) == 0 || hostRanks[h][0] < 0 {
			continue
		}
		w(1, "%s -- %s [class=tor, ltail=%s, %s];", dotQuote("rank"+strconv.Itoa(hostRanks[h][0])), dotQuote(s),
			dotQuote("cluster_host"+strconv.Itoa(h)), edgeStyle["tor"])
	}
	if sw.spine {
		for _, s := range sw.names {
			w(1, "%s -- %s [class=uplink, %s];", dotQuote(s), dotQuote("spine"), edgeStyle["uplink"])
		}
	}
	// Circuits.
	for i, c := range t.Circuits {
		color := "#1f77b4"
		tip := fmt.Sprintf("circuit %d: %s - %s", i, portName(t, c.A), portName(t, c.B))
		if ra, rb := t.NICs[c.A].Rail, t.NICs[c.B].Rail; ra >= 0 && ra == rb {
			color = railColors[ra%len(railColors)]
			tip += fmt.Sprintf(", rail %d", ra)
		}
		w(1, "%s -- %s [id=%s, class=ocs, constraint=false, style=bold, color=%s, tooltip=%s];", dotQuote("nic"+strconv.Itoa(c.A)), dotQuote("nic"+strconv.Itoa(c.B)),
			dotQuote("circuit"+strconv.Itoa(i)), dotQuote(color), dotQuote(tip))
	}
	w(0, "}")
	return b.Bytes()
}

// gridRows returns the hosts by grid row (y), each row by column (x),
// when every host has a 2D coordinate and there are at least two rows;
// else nil.
func gridRows(t *topo.Topology) [][]int {
	rows := map[int][]int{}
	for h, host := range t.Hosts {
		if len(host.Coord) != 2 {
			return nil
		}
		rows[host.Coord[1]] = append(rows[host.Coord[1]], h)
	}
	if len(rows) < 2 {
		return nil
	}
	ys := make([]int, 0, len(rows))
	for y := range rows {
		ys = append(ys, y)
	}
	sort.Ints(ys)
	out := make([][]int, len(ys))
	for i, y := range ys {
		r := rows[y]
		sort.Slice(r, func(a, b int) bool { return t.Hosts[r[a]].Coord[0] < t.Hosts[r[b]].Coord[0] })
		out[i] = r
	}
	return out
}

// coordString formats a grid coordinate as (x,y).
func coordString(c []int) string {
	s := make([]string, len(c))
	for i, v := range c {
		s[i] = strconv.Itoa(v)
	}
	return "(" + strings.Join(s, ",") + ")"
}

// nicLabel is the label of NIC i: its name, class and rail.
func nicLabel(t *topo.Topology, i int) string {
	n := t.NICs[i]
	name := n.Name
	if name == "" {
		name = "nic" + strconv.Itoa(i)
	}
	s := name + "\n" + string(n.Class)
	if n.Rail >= 0 {
		s += " rail " + strconv.Itoa(n.Rail)
	}
	return s
}

// portName names NIC i as host:name for circuit tooltips.
func portName(t *topo.Topology, i int) string {
	n := t.NICs[i]
	name := n.Name
	if name == "" {
		name = "nic" + strconv.Itoa(i)
	}
	return fmt.Sprintf("host %d %s", n.Host, name)
}

// switches are the electrical switches of a topology's picture.
type switches struct {
	names  []string          // sorted: tor<k>, then rail<k>, then eps
	labels map[string]string // name -> label
	ofNIC  []string          // NIC index -> its switch ("" for OCS ports)
	ofHost []string          // host -> its ToR switch ("" for none)
	spine  bool              // a spine joins the switches
}

// dotSwitches works out the electrical switches: a ToR per Host.ToR, else a
// switch per rail of packet-network NICs, and a spine over two or more
// switches unless the fabric is rail-only.
func dotSwitches(t *topo.Topology) switches {
	s := switches{labels: map[string]string{}, ofNIC: make([]string, len(t.NICs)), ofHost: make([]string, len(t.Hosts))}
	add := func(name, label string) string {
		if _, ok := s.labels[name]; !ok {
			s.labels[name] = label
			s.names = append(s.names, name)
		}
		return name
	}
	for h, host := range t.Hosts {
		if host.ToR >= 0 {
			s.ofHost[h] = add("tor"+strconv.Itoa(host.ToR), fmt.Sprintf("ToR %d", host.ToR))
		}
	}
	for i, n := range t.NICs {
		if n.Class != topo.EPS {
			continue
		}
		switch {
		case s.ofHost[n.Host] != "":
			s.ofNIC[i] = s.ofHost[n.Host]
		case n.Rail >= 0:
			s.ofNIC[i] = add("rail"+strconv.Itoa(n.Rail), fmt.Sprintf("rail %d switch\neps", n.Rail))
		default:
			s.ofNIC[i] = add("eps", "packet switch\neps")
		}
	}
	// A NIC on a ToR's host hangs off the ToR: no separate host edge.
	for i, n := range t.NICs {
		if s.ofNIC[i] != "" && s.ofHost[n.Host] != "" {
			s.ofHost[n.Host] = ""
		}
	}
	sort.Slice(s.names, func(a, b int) bool { return switchKey(s.names[a]) < switchKey(s.names[b]) })
	s.spine = len(s.names) > 1 && !t.RailOnly
	return s
}

// switchKey orders switch names: tor<k>, rail<k>, eps, by number.
func switchKey(name string) string {
	for i, p := range []string{"tor", "rail", "eps"} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			n, _ := strconv.Atoi(rest)
			return fmt.Sprintf("%d%09d", i, n)
		}
	}
	return "9" + name
}

// pictureFlags are -dot and -svg, which every builder and show take.
type pictureFlags struct {
	dot *bool
	svg *string
}

func addPictureFlags(fs *flag.FlagSet) pictureFlags {
	return pictureFlags{
		dot: fs.Bool("dot", false, "print the topology as a Graphviz graph instead"),
		svg: fs.String("svg", "", "render the Graphviz graph with dot -Tsvg into this `file` (needs Graphviz)"),
	}
}

// wanted reports whether a picture was asked for.
func (p pictureFlags) wanted() bool { return *p.dot || *p.svg != "" }

// render returns what to print for t: the DOT text, or nothing after
// writing the SVG file.
func (p pictureFlags) render(t *topo.Topology) (any, error) {
	dot := topologyDOT(t)
	if *p.svg == "" {
		return rawText(dot), nil
	}
	svg, err := renderSVG(context.Background(), dot)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(*p.svg, svg, 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", *p.svg, err)
	}
	return rawText(nil), nil
}

// errNoDot is returned when Graphviz is not installed.
var errNoDot = errors.New("rendering SVG needs Graphviz's dot command on PATH (apt-get install graphviz)")

// renderSVG runs dot -Tsvg on a graph.
func renderSVG(ctx context.Context, dot []byte) ([]byte, error) {
	path, err := exec.LookPath("dot")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoDot, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-Tsvg")
	cmd.Stdin = bytes.NewReader(dot)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s -Tsvg: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}
