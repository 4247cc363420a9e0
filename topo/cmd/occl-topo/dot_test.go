package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/occl/occl/internal/svgtest"
	"github.com/occl/occl/topo"
)

// dotGraph is a graph as topologyDOT writes it, read back line by line.
type dotGraph struct {
	clusters map[string][]string // cluster -> enclosing clusters, outermost first
	nodes    map[string][]string // node -> enclosing clusters, outermost first
	attrs    map[string]string   // node -> its attribute list
	edges    []dotEdge
}

type dotEdge struct {
	a, b  string
	class string
	id    string
	attrs string
}

var (
	dotSubgraph = regexp.MustCompile(`^subgraph "([^"]+)" \{$`)
	dotNode     = regexp.MustCompile(`^"([^"]+)" \[(.*)\];$`)
	dotEdgeLine = regexp.MustCompile(`^"([^"]+)" -- "([^"]+)" \[(.*)\];$`)
	dotClass    = regexp.MustCompile(`(?:^|, )class=(\w+)`)
	dotID       = regexp.MustCompile(`(?:^|, )id="([^"]+)"`)
)

// parseDOT reads topologyDOT's output: one statement per line, subgraphs
// opened by `subgraph "name" {` and closed by `}`.
func parseDOT(t *testing.T, text string) dotGraph {
	t.Helper()
	g := dotGraph{clusters: map[string][]string{}, nodes: map[string][]string{}, attrs: map[string]string{}}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) < 2 || lines[0] != `graph "occl" {` || lines[len(lines)-1] != "}" {
		t.Fatalf("not an undirected graph named occl:\n%s", text)
	}
	var stack []string
	for _, line := range lines[1 : len(lines)-1] {
		line = strings.TrimSpace(line)
		switch {
		case line == "}":
			if len(stack) == 0 {
				t.Fatalf("unbalanced } in:\n%s", text)
			}
			stack = stack[:len(stack)-1]
		case dotSubgraph.MatchString(line):
			name := dotSubgraph.FindStringSubmatch(line)[1]
			if _, dup := g.clusters[name]; dup {
				t.Fatalf("subgraph %s twice", name)
			}
			g.clusters[name] = append([]string(nil), stack...)
			stack = append(stack, name)
		case dotEdgeLine.MatchString(line):
			m := dotEdgeLine.FindStringSubmatch(line)
			e := dotEdge{a: m[1], b: m[2], attrs: m[3]}
			if c := dotClass.FindStringSubmatch(m[3]); c != nil {
				e.class = c[1]
			}
			if id := dotID.FindStringSubmatch(m[3]); id != nil {
				e.id = id[1]
			}
			g.edges = append(g.edges, e)
		case dotNode.MatchString(line) && !strings.HasPrefix(line, "graph ") && !strings.HasPrefix(line, "node ") && !strings.HasPrefix(line, "edge "):
			m := dotNode.FindStringSubmatch(line)
			if _, dup := g.nodes[m[1]]; dup {
				t.Fatalf("node %s twice", m[1])
			}
			g.nodes[m[1]] = append([]string(nil), stack...)
			g.attrs[m[1]] = m[2]
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed subgraphs %v", stack)
	}
	for _, e := range g.edges {
		for _, n := range []string{e.a, e.b} {
			if _, ok := g.nodes[n]; !ok {
				t.Errorf("edge %s -- %s (%s) ends at undeclared node %s", e.a, e.b, e.class, n)
			}
		}
	}
	return g
}

// edgesOf returns the edges of a class as sorted "a--b" strings.
func (g dotGraph) edgesOf(class string) []string {
	var out []string
	for _, e := range g.edges {
		if e.class == class {
			out = append(out, e.a+"--"+e.b)
		}
	}
	sort.Strings(out)
	return out
}

func sortedStrings(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// runDOT runs occl-topo with -dot and returns the graph and the topology
// the same arguments print with -topology (show: the spec itself).
func runDOT(t *testing.T, args ...string) (dotGraph, *topo.Topology) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append(append([]string{args[0]}, "-dot"), args[1:]...), &stdout, &stderr); code != 0 {
		t.Fatalf("occl-topo %v -dot: exit %d, %s", args, code, stderr.String())
	}
	var top *topo.Topology
	if args[0] == "show" {
		var err error
		if top, err = topo.FromSpec(args[len(args)-1]); err != nil {
			t.Fatal(err)
		}
	} else {
		top = runTopology(t, args...)
	}
	return parseDOT(t, stdout.String()), top
}

// checkDOT checks a graph against the topology's own lists: a cluster per
// host (inside its HB domain's cluster when the domain has several hosts)
// holding a node per rank and per NIC of the host; an edge from every rank
// to its NIC and to every port it drives; an edge with id circuit<i> per
// circuit between its two ports; an edge from every packet-network NIC to
// an electrical switch; nothing else of those kinds.
func checkDOT(t *testing.T, g dotGraph, top *topo.Topology) {
	t.Helper()
	domainHosts := map[int]int{}
	for _, h := range top.Hosts {
		if h.HBDomain >= 0 {
			domainHosts[h.HBDomain]++
		}
	}
	var wantClusters []string
	for h, host := range top.Hosts {
		name := "cluster_host" + strconv.Itoa(h)
		wantClusters = append(wantClusters, name)
		outer, ok := g.clusters[name]
		if !ok {
			t.Errorf("no cluster for host %d", h)
			continue
		}
		want := ""
		if host.HBDomain >= 0 && domainHosts[host.HBDomain] > 1 {
			want = "cluster_hbd" + strconv.Itoa(host.HBDomain)
			if !containsString(wantClusters, want) {
				wantClusters = append(wantClusters, want)
			}
		}
		if last(outer) != want {
			t.Errorf("host %d (HB domain %d) is inside %v, want %q", h, host.HBDomain, outer, want)
		}
	}
	var gotClusters []string
	for c := range g.clusters {
		gotClusters = append(gotClusters, c)
	}
	if got, want := sortedStrings(gotClusters), sortedStrings(wantClusters); !equalStrings(got, want) {
		t.Errorf("clusters %v, want %v", got, want)
	}
	var wantNIC, wantPort, wantOCS []string
	for r, rk := range top.Ranks {
		n := "rank" + strconv.Itoa(r)
		if in := last(g.nodes[n]); in != "cluster_host"+strconv.Itoa(rk.Host) {
			t.Errorf("rank %d of host %d is in %q", r, rk.Host, in)
		}
		if !strings.Contains(g.attrs[n], fmt.Sprintf(`label="rank %d\nlocal %d"`, r, rk.LocalRank)) {
			t.Errorf("rank %d: attributes %s", r, g.attrs[n])
		}
		if rk.NIC >= 0 {
			wantNIC = append(wantNIC, n+"--nic"+strconv.Itoa(rk.NIC))
		}
		for _, p := range rk.Ports {
			wantPort = append(wantPort, n+"--nic"+strconv.Itoa(p))
		}
	}
	epsNICs := 0
	for i, nic := range top.NICs {
		n := "nic" + strconv.Itoa(i)
		if in := last(g.nodes[n]); in != "cluster_host"+strconv.Itoa(nic.Host) {
			t.Errorf("NIC %d of host %d is in %q", i, nic.Host, in)
		}
		if !strings.Contains(g.attrs[n], "class="+string(nic.Class)) {
			t.Errorf("NIC %d (%s): attributes %s", i, nic.Class, g.attrs[n])
		}
		if nic.Class == topo.EPS {
			epsNICs++
		}
	}
	ids := map[string]string{}
	for _, e := range g.edges {
		if e.class == "ocs" {
			ids[e.id] = e.a + "--" + e.b
		}
	}
	for i, c := range top.Circuits {
		e := fmt.Sprintf("nic%d--nic%d", c.A, c.B)
		wantOCS = append(wantOCS, e)
		if got := ids["circuit"+strconv.Itoa(i)]; got != e {
			t.Errorf("circuit %d (%s): edge with its id is %q", i, e, got)
		}
	}
	for _, c := range []struct {
		class string
		want  []string
	}{{"nic", wantNIC}, {"port", wantPort}, {"ocs", wantOCS}} {
		if got, want := g.edgesOf(c.class), sortedStrings(c.want); !equalStrings(got, want) {
			t.Errorf("%s edges:\n got %v\nwant %v", c.class, got, want)
		}
	}
	eps := g.edgesOf("eps")
	if len(eps) != epsNICs {
		t.Errorf("%d eps edges for %d packet-network NICs: %v", len(eps), epsNICs, eps)
	}
	for _, e := range g.edges {
		if e.class == "eps" && !strings.Contains(g.attrs[e.b], "class=switch") {
			t.Errorf("eps edge %s -- %s does not end at a switch", e.a, e.b)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDOTDelegatedFabric checks the graph of the delegated all-to-all's
// fabric (a shared packet NIC and two owned OCS ports per host, four
// circuits) against the topology: hosts, ranks, ports, circuits, and one
// packet switch on rail 0 with no spine.
func TestDOTDelegatedFabric(t *testing.T) {
	g, top := runDOT(t, "show", delegatedSpec)
	checkDOT(t, g, top)
	if len(top.Circuits) != 4 || len(g.edgesOf("ocs")) != 4 {
		t.Fatalf("want 4 circuits, topology has %d, graph %v", len(top.Circuits), g.edgesOf("ocs"))
	}
	if got := g.edgesOf("eps"); !equalStrings(got, []string{"nic0--rail0", "nic1--rail0", "nic2--rail0", "nic3--rail0"}) {
		t.Errorf("eps edges %v, want every host's NIC on the rail 0 switch", got)
	}
	if _, ok := g.nodes["spine"]; ok {
		t.Errorf("a single switch got a spine")
	}
}

// TestDOTRailX checks a 3x3 RailX grid: 9 hosts with their coordinates,
// every chip's ports, the 18 circuits coloured by rail, no packet network,
// and the rows laid out one under the other.
func TestDOTRailX(t *testing.T) {
	g, top := runDOT(t, "railx", "-nodes", "3", "-rails", "1")
	checkDOT(t, g, top)
	if len(top.Circuits) != 18 {
		t.Fatalf("3x3 torus with one rail per dimension: %d circuits, want 18", len(top.Circuits))
	}
	for _, e := range g.edges {
		if e.class != "ocs" {
			continue
		}
		a, _ := strconv.Atoi(strings.TrimPrefix(e.a, "nic"))
		rail := top.NICs[a].Rail
		if !strings.Contains(e.attrs, fmt.Sprintf("color=%q", railColors[rail%len(railColors)])) || !strings.Contains(e.attrs, fmt.Sprintf("rail %d", rail)) {
			t.Errorf("circuit %s -- %s on rail %d: %s", e.a, e.b, rail, e.attrs)
		}
	}
	if len(g.edgesOf("eps")) != 0 || len(g.edgesOf("uplink")) != 0 {
		t.Errorf("RailX has no packet network, graph has %v %v", g.edgesOf("eps"), g.edgesOf("uplink"))
	}
	if !strings.Contains(g.attrs["rank4"], "rank 4") {
		t.Errorf("rank4: %s", g.attrs["rank4"])
	}
	invisible := 0
	for _, e := range g.edges {
		if strings.Contains(e.attrs, "style=invis") {
			invisible++
		}
	}
	if invisible != 6 { // 3 columns x 2 pairs of adjacent rows
		t.Errorf("%d invisible row edges, want 6", invisible)
	}
}

// TestDOTSwitches checks the electrical switches: a rail-optimized cluster
// has a switch per rail joined by a spine; a rail-only fabric has the rail
// switches and no spine, and its multi-host HB domains are clusters around
// their hosts; InfinitePOD nodes deployed across ToRs hang off their ToR.
func TestDOTSwitches(t *testing.T) {
	g, top := runDOT(t, "railopt", "-hosts", "3", "-gpus", "4")
	checkDOT(t, g, top)
	if got := g.edgesOf("uplink"); !equalStrings(got, []string{"rail0--spine", "rail1--spine", "rail2--spine", "rail3--spine"}) {
		t.Errorf("railopt uplinks %v", got)
	}
	for r, rk := range top.Ranks {
		want := fmt.Sprintf("nic%d--rail%d", rk.NIC, rk.Rail)
		if !containsString(g.edgesOf("eps"), want) {
			t.Errorf("rank %d: no edge %s", r, want)
		}
	}

	g, top = runDOT(t, "railonly", "-domains", "2", "-k", "4", "-hosts-per-domain", "2")
	checkDOT(t, g, top)
	if _, ok := g.nodes["spine"]; ok || len(g.edgesOf("uplink")) != 0 {
		t.Errorf("rail-only fabric got a spine")
	}
	if _, ok := g.clusters["cluster_hbd1"]; !ok {
		t.Errorf("no cluster for HB domain 1: %v", g.clusters)
	}

	g, top = runDOT(t, "kring", "-nodes", "8", "-k", "2", "-gpus-per-node", "2", "-tp", "4", "-tor", "2")
	checkDOT(t, g, top)
	var want []string
	for i, nic := range top.NICs {
		if nic.Class == topo.EPS {
			want = append(want, fmt.Sprintf("nic%d--tor%d", i, top.Hosts[nic.Host].ToR))
		}
	}
	if len(want) == 0 {
		t.Fatalf("kring -tor has no packet-network NICs")
	}
	if got := g.edgesOf("eps"); !equalStrings(got, sortedStrings(want)) {
		t.Errorf("NICs to ToRs %v, want %v", got, want)
	}
	if len(g.edgesOf("uplink")) != 4 {
		t.Errorf("uplinks %v, want the 4 ToRs on the spine", g.edgesOf("uplink"))
	}

	// Hosts on ToRs with no packet NIC of their own hang off the ToR as a
	// whole (an edge from the host's cluster).
	noNIC := &topo.Topology{
		Hosts:    []topo.Host{{Name: "a", HBDomain: -1, ToR: 0}, {Name: "b", HBDomain: -1, ToR: 1}},
		Ranks:    []topo.Rank{{Host: 0, NIC: -1, Rail: -1, Ports: []int{0}}, {Host: 1, NIC: -1, Rail: -1, Ports: []int{1}}},
		NICs:     []topo.NIC{{Host: 0, Rail: -1, Class: topo.OCS}, {Host: 1, Rail: -1, Class: topo.OCS}},
		Circuits: []topo.Circuit{{A: 0, B: 1}},
		Classes:  topo.DefaultClasses(),
	}
	if err := noNIC.Validate(); err != nil {
		t.Fatal(err)
	}
	g = parseDOT(t, string(topologyDOT(noNIC)))
	checkDOT(t, g, noNIC)
	if got := g.edgesOf("tor"); !equalStrings(got, []string{"rank0--tor0", "rank1--tor1"}) {
		t.Errorf("ToR edges %v", got)
	}
	for _, e := range g.edges {
		if e.class == "tor" && !strings.Contains(e.attrs, `ltail="cluster_host`) {
			t.Errorf("ToR edge %s -- %s does not leave the host's cluster: %s", e.a, e.b, e.attrs)
		}
	}
}

// TestDOTQuoting checks that names with quotes and backslashes stay inside
// their DOT strings.
func TestDOTQuoting(t *testing.T) {
	top := topo.Uniform(2, 1)
	top.Name = `a "quoted" \ name`
	top.Hosts[1].Name = `b"c`
	text := string(topologyDOT(top))
	if !strings.Contains(text, `label="a \"quoted\" \\ name\n`) || !strings.Contains(text, `label="host 1: b\"c"`) {
		t.Fatalf("names not escaped:\n%s", text)
	}
	checkDOT(t, parseDOT(t, text), top)
}

// delegatedSpec is the fabric of the README's delegated all-to-all
// measurement: 4 hosts of 2 ranks, one packet NIC per host, two OCS ports
// per host, the circuits -circuits auto placed (0-1, 2-3, 0-2, 1-3).
const delegatedSpec = "hosts=4x2,nics=host,ocs_ports=2,circuits=0-1/2-3/0-2/1-3"

// pictures are the README's topology pictures and the commands that make
// them (run from the repository root as go run ./topo/cmd/occl-topo ...).
var pictures = []struct {
	file string
	args []string
}{
	{"docs/topo-railx.svg", []string{"railx", "-nodes", "3", "-rails", "1", "-svg", "docs/topo-railx.svg"}},
	{"docs/topo-delegated.svg", []string{"show", "-svg", "docs/topo-delegated.svg", delegatedSpec}},
}

// requireDot fails the test under OCCL_TEST_REQUIRE_PYTHON=1 (CI installs
// Graphviz) and skips it otherwise when dot is missing.
func requireDot(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("OCCL_TEST_REQUIRE_PYTHON") == "1" {
			t.Fatalf("Graphviz's dot is not on PATH (apt-get install graphviz): %v", err)
		}
		t.Skipf("Graphviz's dot is not on PATH (apt-get install graphviz): %v", err)
	}
}

// svgDoc is what the test reads of an SVG file: the root element, every
// <title> and every group's id.
type svgDoc struct {
	root   string
	titles []string
	ids    []string
	gen    string // the generator comment (Graphviz's version)
}

func readSVG(t *testing.T, data []byte) svgDoc {
	t.Helper()
	doc, err := svgtest.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	d := svgDoc{root: doc.Root, titles: doc.Titles, ids: doc.GroupIDs}
	for _, c := range doc.Comments {
		if strings.HasPrefix(c, "Generated by graphviz") {
			d.gen = c
		}
	}
	return d
}

// TestTopologyPictures re-generates the README's topology pictures with
// the documented commands into a temporary directory, checks that each is
// valid SVG with a cluster per host and an edge per circuit (by Graphviz's
// <title> elements and the circuit ids), that the README names the
// command, and that the committed file matches: byte for byte when it was
// made by the same Graphviz version, else by the same set of titles and
// ids (Graphviz's coordinates differ between versions).
func TestTopologyPictures(t *testing.T) {
	requireDot(t)
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pictures {
		cmd := "go run ./topo/cmd/occl-topo " + strings.Join(p.args, " ")
		cmd = strings.Replace(cmd, delegatedSpec, "'"+delegatedSpec+"'", 1)
		if !bytes.Contains(readme, []byte(cmd)) {
			t.Errorf("README does not give the command %q", cmd)
		}
		if !bytes.Contains(readme, []byte("("+p.file+")")) {
			t.Errorf("README does not link %s", p.file)
		}
		out := filepath.Join(t.TempDir(), filepath.Base(p.file))
		args := append([]string(nil), p.args...)
		for i, a := range args {
			if a == p.file {
				args[i] = out
			}
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
			t.Fatalf("occl-topo %v: exit %d, stdout %q, stderr %s", args, code, stdout.String(), stderr.String())
		}
		fresh, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		doc := readSVG(t, fresh)
		var top *topo.Topology
		if args[0] == "show" {
			top, _ = topo.FromSpec(args[len(args)-1])
		} else {
			top = runTopology(t, args[:len(args)-2]...)
		}
		for h := range top.Hosts {
			if !containsString(doc.titles, "cluster_host"+strconv.Itoa(h)) {
				t.Errorf("%s: no cluster for host %d", p.file, h)
			}
		}
		for r := range top.Ranks {
			if !containsString(doc.titles, "rank"+strconv.Itoa(r)) {
				t.Errorf("%s: no node for rank %d", p.file, r)
			}
		}
		for i, c := range top.Circuits {
			if !containsString(doc.titles, fmt.Sprintf("nic%d--nic%d", c.A, c.B)) || !containsString(doc.ids, "circuit"+strconv.Itoa(i)) {
				t.Errorf("%s: no edge for circuit %d (%d-%d)", p.file, i, c.A, c.B)
			}
		}
		committed, err := os.ReadFile(filepath.Join("../../..", p.file))
		if err != nil {
			t.Fatalf("the committed picture: %v", err)
		}
		old := readSVG(t, committed)
		if old.gen == doc.gen {
			if !bytes.Equal(committed, fresh) {
				t.Errorf("%s differs from what %q makes now (same %s): run it again", p.file, cmd, doc.gen)
			}
			continue
		}
		t.Logf("%s was made by %q, this machine has %q: comparing titles and ids", p.file, old.gen, doc.gen)
		if !equalStrings(sortedStrings(old.titles), sortedStrings(doc.titles)) || !equalStrings(sortedStrings(old.ids), sortedStrings(doc.ids)) {
			t.Errorf("%s has other nodes and edges than what %q makes now: run it again", p.file, cmd)
		}
	}
}

// TestSVGWithoutDot checks that -svg without Graphviz fails with a message
// that says what to install, and writes no file.
func TestSVGWithoutDot(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	out := filepath.Join(dir, "x.svg")
	s := runErr(t, 1, "show", "-svg", out, delegatedSpec)
	if !strings.Contains(s, "apt-get install graphviz") {
		t.Errorf("stderr %q does not say to install graphviz", s)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written without dot", out)
	}
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
