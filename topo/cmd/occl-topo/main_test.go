package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/occl/occl/topo"
)

// runJSON runs occl-topo, wants exit status 0 and decodes stdout into out.
func runJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("occl-topo %v: exit %d, stderr %s", args, code, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("occl-topo %v: %v\n%s", args, err, stdout.String())
	}
}

// runErr runs occl-topo, wants exit status code and returns stderr.
func runErr(t *testing.T, code int, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if got := run(args, &stdout, &stderr); got != code {
		t.Fatalf("occl-topo %v: exit %d, want %d; stderr %s", args, got, code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("occl-topo %v failed but printed %s", args, stdout.String())
	}
	return stderr.String()
}

// runTopology runs a builder with -topology and parses the result as
// OCCL_TOPO=FILE would.
func runTopology(t *testing.T, args ...string) *topo.Topology {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append(args, "-topology"), &stdout, &stderr); code != 0 {
		t.Fatalf("occl-topo %v -topology: exit %d, %s", args, code, stderr.String())
	}
	top, err := topo.Parse(stdout.Bytes())
	if err != nil {
		t.Fatalf("occl-topo %v -topology: %v", args, err)
	}
	return top
}

func TestUsage(t *testing.T) {
	if s := runErr(t, 2); !strings.Contains(s, "usage: occl-topo") || !strings.Contains(s, "hamiltonian") {
		t.Fatalf("no-argument usage: %s", s)
	}
	if s := runErr(t, 2, "frobnicate"); !strings.Contains(s, `unknown command "frobnicate"`) || !strings.Contains(s, "commands:") {
		t.Fatalf("unknown command: %s", s)
	}
	if s := runErr(t, 0, "-h"); !strings.Contains(s, "commands:") {
		t.Fatalf("-h: %s", s)
	}
	for name := range commands {
		if s := runErr(t, 0, name, "-h"); !strings.Contains(s, "usage: occl-topo "+name) {
			t.Errorf("%s -h: %s", name, s)
		}
	}
	if s := runErr(t, 2, "railx", "-bogus"); !strings.Contains(s, "bogus") {
		t.Fatalf("unknown flag: %s", s)
	}
	if s := runErr(t, 2, "railx", "extra"); !strings.Contains(s, `unexpected argument "extra"`) {
		t.Fatalf("extra argument: %s", s)
	}
	runErr(t, 2, "kring", "-nodes", "many")
}

func TestRailXHyperX(t *testing.T) {
	var out struct {
		Kind     string  `json:"kind"`
		Nodes    int     `json:"nodes"`
		Rails    int     `json:"rails"`
		Circuits int     `json:"circuits"`
		RingsX   [][]int `json:"rings_x"`
		RingsY   [][]int `json:"rings_y"`
		Ports    []struct {
			Node   int   `json:"node"`
			Coord  []int `json:"coord"`
			XPlus  []int `json:"x_plus"`
			XMinus []int `json:"x_minus"`
			YPlus  []int `json:"y_plus"`
			YMinus []int `json:"y_minus"`
		} `json:"ports"`
		NodeRing []int `json:"node_ring"`
	}
	runJSON(t, &out, "railx", "-nodes", "7", "-kind", "hyperx")
	if out.Kind != "hyperx" || out.Nodes != 49 || out.Rails != 6 || len(out.RingsX) != 6 || len(out.RingsY) != 6 || out.Circuits != 2*49*6 {
		t.Fatalf("%+v", out)
	}
	for _, ring := range append(out.RingsX, out.RingsY...) {
		if s := sortedCopy(ring); !reflect.DeepEqual(s, []int{0, 1, 2, 3, 4, 5, 6}) {
			t.Fatalf("ring %v is not Hamiltonian", ring)
		}
	}
	// Every node reaches every other node of its row through an X port
	// and of its column through a Y port: all-to-all per dimension.
	for _, p := range out.Ports {
		x, y := p.Coord[0], p.Coord[1]
		row, col := map[int]int{}, map[int]int{}
		for _, v := range append(append([]int{}, p.XPlus...), p.XMinus...) {
			if v/7 != y {
				t.Fatalf("node %d: X port to %d outside its row", p.Node, v)
			}
			row[v]++
		}
		for _, v := range append(append([]int{}, p.YPlus...), p.YMinus...) {
			if v%7 != x {
				t.Fatalf("node %d: Y port to %d outside its column", p.Node, v)
			}
			col[v]++
		}
		if len(row) != 6 || len(col) != 6 {
			t.Fatalf("node %d reaches %d of its row, %d of its column", p.Node, len(row), len(col))
		}
		for v, n := range row {
			if n != 2 {
				t.Fatalf("node %d has %d links to %d, want 2 (Lemma 3.1)", p.Node, n, v)
			}
		}
	}
	if s := sortedCopy(out.NodeRing); len(s) != 49 || s[0] != 0 || s[48] != 48 {
		t.Fatalf("node ring %v", out.NodeRing)
	}
}

func TestRailXTopologyAndErrors(t *testing.T) {
	top := runTopology(t, "railx", "-nodes", "4", "-kind", "torus", "-rails", "4", "-mesh", "2", "-ocs", "400Gb/s")
	if len(top.Hosts) != 16 || len(top.Ranks) != 64 || len(top.Ring) != 64 || top.Classes[topo.OCS].Bandwidth != 50e9 {
		t.Fatalf("%d hosts, %d ranks, ring %d, ocs %g", len(top.Hosts), len(top.Ranks), len(top.Ring), top.Classes[topo.OCS].Bandwidth)
	}
	one := runTopology(t, "railx", "-nodes", "9", "-dims", "1", "-kind", "hyperx")
	if len(one.Hosts) != 9 || len(one.Circuits) != 9*8 {
		t.Fatalf("1D hyperx: %d hosts, %d circuits", len(one.Hosts), len(one.Circuits))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"railx", "-nodes", "6", "-kind", "hyperx"}, "Tillson"},
		{[]string{"railx", "-nodes", "7", "-kind", "hyperx", "-rails", "3"}, "rails"},
		{[]string{"railx", "-dims", "3"}, "-dims"},
		{[]string{"railx", "-kind", "dragonfly"}, "kind"},
		{[]string{"railx", "-nodes", "0"}, "grid"},
		{[]string{"railx", "-mesh", "2", "-rails", "3"}, "multiple"},
		{[]string{"railx", "-eps", "fast"}, "bandwidth"},
	} {
		if s := runErr(t, 1, c.args...); !strings.Contains(s, c.want) {
			t.Errorf("%v: %s (want %q)", c.args, s, c.want)
		}
	}
}

type kringJSON struct {
	Nodes             int     `json:"nodes"`
	Faults            []int   `json:"faults"`
	Segments          [][]int `json:"segments"`
	Broken            bool    `json:"broken"`
	NodesPerGroup     int     `json:"nodes_per_group"`
	TPGroups          [][]int `json:"tp_groups"`
	HealthyGPUs       int     `json:"healthy_gpus"`
	PlacedGPUs        int     `json:"placed_gpus"`
	WastedGPUs        int     `json:"wasted_gpus"`
	Line              []int   `json:"line"`
	Constraints       *int    `json:"constraints"`
	MaxConstraints    int     `json:"max_constraints"`
	CrossDomainGroups *int    `json:"cross_domain_groups"`
}

func TestKRing(t *testing.T) {
	var out kringJSON
	runJSON(t, &out, "kring", "-nodes", "32", "-k", "3", "-gpus-per-node", "4", "-tp", "16", "-faults", "3,4,17")
	failed := map[int]bool{3: true, 4: true, 17: true}
	// One segment (no 3 consecutive failures) holding every healthy node.
	if out.Broken || len(out.Segments) != 1 || len(out.Segments[0]) != 29 {
		t.Fatalf("segments %v", out.Segments)
	}
	for i, v := range out.Segments[0] {
		if failed[v] || (i > 0 && v-out.Segments[0][i-1] > 3) {
			t.Fatalf("segment %v: node %d", out.Segments[0], v)
		}
	}
	// TP groups: 4 consecutive healthy nodes each, no failed node.
	if out.NodesPerGroup != 4 || len(out.TPGroups) != 7 {
		t.Fatalf("groups %v", out.TPGroups)
	}
	pos := map[int]int{}
	for i, v := range out.Segments[0] {
		pos[v] = i
	}
	for _, g := range out.TPGroups {
		for j, v := range g {
			if failed[v] || (j > 0 && pos[v] != pos[g[j-1]]+1) {
				t.Fatalf("group %v", g)
			}
		}
	}
	if out.HealthyGPUs != 116 || out.PlacedGPUs != 112 || out.WastedGPUs != 4 {
		t.Fatalf("GPUs: %+v", out)
	}
	// K consecutive failures break the line.
	var broken kringJSON
	runJSON(t, &broken, "kring", "-nodes", "16", "-k", "2", "-faults", "5,6")
	if !broken.Broken || !reflect.DeepEqual(broken.Segments, [][]int{{0, 1, 2, 3, 4}, {7, 8, 9, 10, 11, 12, 13, 14, 15}}) || broken.HealthyGPUs != 56 {
		t.Fatalf("broken line: %+v", broken)
	}
}

func TestKRingToR(t *testing.T) {
	var out kringJSON
	runJSON(t, &out, "kring", "-nodes", "64", "-k", "2", "-gpus-per-node", "4", "-tp", "16", "-tor", "4", "-domain", "16")
	if out.Constraints == nil || *out.Constraints != 20 || out.MaxConstraints != 20 || *out.CrossDomainGroups != 0 || len(out.TPGroups) != 16 || len(out.Line) != 64 {
		t.Fatalf("%+v", out)
	}
	// Line neighbours are under different ToRs.
	for i := 1; i < len(out.Line); i++ {
		if out.Line[i]/4 == out.Line[i-1]/4 {
			t.Fatalf("line %v", out.Line)
		}
	}
	top := runTopology(t, "kring", "-nodes", "64", "-k", "2", "-gpus-per-node", "4", "-tp", "16", "-tor", "4", "-faults", "9")
	if len(top.Ranks)%16 != 0 || len(top.Ring) != len(top.Ranks) {
		t.Fatalf("%d ranks, ring %d", len(top.Ranks), len(top.Ring))
	}
	for _, h := range top.Hosts {
		if h.Name == "node9" || h.ToR < 0 {
			t.Fatalf("host %+v", h)
		}
	}
}

func TestKRingTopologyAndErrors(t *testing.T) {
	top := runTopology(t, "kring", "-nodes", "10", "-k", "2", "-gpus-per-node", "2", "-faults", "4")
	if len(top.Hosts) != 9 || len(top.Ranks) != 18 || len(top.Circuits) != 8 {
		t.Fatalf("%d hosts, %d ranks, %d circuits", len(top.Hosts), len(top.Ranks), len(top.Circuits))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kring", "-tp", "6"}, "multiple"},
		{[]string{"kring", "-faults", "3,x"}, "not an integer"},
		{[]string{"kring", "-faults", "40"}, "outside"},
		{[]string{"kring", "-tor", "4"}, "needs -tp"},
		{[]string{"kring", "-k", "5", "-tp", "16"}, "K <= R"},
		{[]string{"kring", "-gpus-per-node", "0"}, "gpus-per-node"},
		{[]string{"kring", "-tp", "16", "-tor", "4", "-job", "100000"}, "holds only"},
		{[]string{"kring", "-nodes", "4", "-tp", "32", "-topology"}, "no TP group"},
	} {
		if s := runErr(t, 1, c.args...); !strings.Contains(s, c.want) {
			t.Errorf("%v: %s (want %q)", c.args, s, c.want)
		}
	}
}

func TestRailOnly(t *testing.T) {
	var out struct {
		Domains     int     `json:"domains"`
		Ranks       int     `json:"ranks"`
		RailOnly    bool    `json:"rail_only"`
		DomainRanks [][]int `json:"domain_ranks"`
		Rails       [][]int `json:"rails"`
		Forwarders  [][]int `json:"forwarders"`
	}
	runJSON(t, &out, "railonly", "-domains", "4", "-k", "8", "-routes")
	if out.Ranks != 32 || !out.RailOnly || len(out.Rails) != 8 || len(out.DomainRanks) != 4 {
		t.Fatalf("%+v", out)
	}
	for i, rail := range out.Rails {
		if !reflect.DeepEqual(rail, []int{i, 8 + i, 16 + i, 24 + i}) {
			t.Fatalf("rail %d: %v", i, rail)
		}
	}
	for s := 0; s < 32; s++ {
		for d := 0; d < 32; d++ {
			f := out.Forwarders[s][d]
			if s/8 == d/8 || s%8 == d%8 {
				if f != s {
					t.Fatalf("(%d,%d): forwarder %d, want src", s, d, f)
				}
			} else if f/8 != s/8 || f%8 != d%8 {
				t.Fatalf("(%d,%d): forwarder %d not in src's domain on dst's rail", s, d, f)
			}
		}
	}
	top := runTopology(t, "railonly", "-domains", "2", "-k", "4", "-hosts-per-domain", "2")
	if !top.RailOnly || len(top.Hosts) != 4 || top.Hosts[1].HBDomain != 0 || top.Hosts[2].HBDomain != 1 {
		t.Fatalf("%+v", top.Hosts)
	}
	runErr(t, 1, "railonly", "-k", "8", "-hosts-per-domain", "3")
	runErr(t, 1, "railonly", "-domains", "0")
	runErr(t, 1, "railonly", "-domains", "64", "-k", "32", "-routes")
}

func TestRailOpt(t *testing.T) {
	var out struct {
		Ranks int     `json:"ranks"`
		NICs  int     `json:"nics"`
		Rails [][]int `json:"rails"`
	}
	runJSON(t, &out, "railopt", "-hosts", "4", "-gpus", "8")
	if out.Ranks != 32 || out.NICs != 32 || len(out.Rails) != 8 || !reflect.DeepEqual(out.Rails[3], []int{3, 11, 19, 27}) {
		t.Fatalf("%+v", out)
	}
	top := runTopology(t, "railopt", "-hosts", "2", "-gpus", "4", "-eps", "100Gb/s", "-hbd", "900GB/s")
	if top.RailOnly || top.Classes[topo.EPS].Bandwidth != 12.5e9 || top.Classes[topo.HBD].Bandwidth != 900e9 {
		t.Fatalf("classes %+v", top.Classes)
	}
	runErr(t, 1, "railopt", "-hosts", "0")
	runErr(t, 1, "railopt", "-numa", "9")
}

func TestHamiltonian(t *testing.T) {
	for _, n := range []int{9, 10, 2} {
		var out struct {
			N          int     `json:"n"`
			Directed   [][]int `json:"directed"`
			Undirected [][]int `json:"undirected"`
		}
		runJSON(t, &out, "hamiltonian", "-n", itoa(n))
		if err := topo.VerifyDecomposition(n, out.Directed, true); err != nil {
			t.Fatalf("n=%d directed: %v", n, err)
		}
		if n%2 == 1 {
			if err := topo.VerifyDecomposition(n, out.Undirected, false); err != nil {
				t.Fatalf("n=%d undirected: %v", n, err)
			}
		} else if out.Undirected != nil {
			t.Fatalf("n=%d: undirected cycles for even n", n)
		}
	}
	if s := runErr(t, 1, "hamiltonian", "-n", "6"); !strings.Contains(s, "Tillson") {
		t.Fatalf("n=6: %s", s)
	}
	runErr(t, 1, "hamiltonian", "-n", "0")
}

func TestAlloc(t *testing.T) {
	var out topo.Allocation
	runJSON(t, &out, "alloc", "-x", "8", "-y", "8", "-faults", "1:2,3:4")
	// Two isolated faults: one row and one column go, (8-1)(8-1).
	if out.Size != 49 || len(out.DisabledRows)+len(out.DisabledCols) != 2 {
		t.Fatalf("%+v", out)
	}
	keeps := func(x, y int) bool {
		return contains(out.Cols, x) && contains(out.Rows, y)
	}
	if keeps(1, 2) || keeps(3, 4) {
		t.Fatalf("allocation keeps a fault: %+v", out)
	}
	runJSON(t, &out, "alloc", "-x", "4", "-y", "3")
	if out.Size != 12 {
		t.Fatalf("no faults: %+v", out)
	}
	runErr(t, 1, "alloc", "-faults", "1-2")
	runErr(t, 1, "alloc", "-x", "4", "-faults", "4:0")
}

func TestShow(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"railx", "-nodes", "5", "-kind", "hyperx", "-mesh", "2", "-topology"}, &stdout, &stderr); code != 0 {
		t.Fatal(stderr.String())
	}
	file := filepath.Join(t.TempDir(), "railx.json")
	if err := os.WriteFile(file, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Hosts        int                                `json:"hosts"`
		Ranks        int                                `json:"ranks"`
		RanksPerHost int                                `json:"ranks_per_host"`
		NICs         int                                `json:"nics"`
		OCSPorts     int                                `json:"ocs_ports"`
		Circuits     int                                `json:"circuits"`
		Classes      map[topo.LinkClass]topo.LinkParams `json:"classes"`
		Ring         []int                              `json:"ring"`
	}
	runJSON(t, &out, "show", file)
	if out.Hosts != 25 || out.Ranks != 100 || out.RanksPerHost != 4 || out.NICs != 400 || out.OCSPorts != 400 || out.Circuits != 200 || len(out.Ring) != 100 || out.Classes[topo.OCS].Bandwidth == 0 {
		t.Fatalf("%+v", out)
	}
	if s := runErr(t, 1, "show", filepath.Join(t.TempDir(), "missing.json")); !strings.Contains(s, "missing.json") {
		t.Fatalf("missing file: %s", s)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"hosts":[{}],"ranks":[{"host":3}]}`), 0o644)
	if s := runErr(t, 1, "show", bad); !strings.Contains(s, "out of range") {
		t.Fatalf("invalid file: %s", s)
	}
	runErr(t, 2, "show")
	runErr(t, 2, "show", "a", "b")

	// A spec instead of a file.
	runJSON(t, &out, "show", "hosts=4x2,nics=host,ocs_ports=2,circuits=0-1/2-3/0-2")
	if out.Hosts != 4 || out.Ranks != 8 || out.RanksPerHost != 2 || out.NICs != 12 || out.OCSPorts != 8 || out.Circuits != 3 {
		t.Fatalf("spec: %+v", out)
	}
	if s := runErr(t, 1, "show", "hosts=2x2,bogus=1"); !strings.Contains(s, `unknown key "bogus"`) {
		t.Fatalf("bad spec: %s", s)
	}
}

func TestDiscover(t *testing.T) {
	var out struct {
		HostID string `json:"host_id"`
	}
	runJSON(t, &out, "discover")
	if out.HostID == "" {
		t.Fatal("no host id")
	}
}

func sortedCopy(s []int) []int {
	c := append([]int(nil), s...)
	sort.Ints(c)
	return c
}

func contains(s []int, v int) bool {
	for _, w := range s {
		if w == v {
			return true
		}
	}
	return false
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestWithout(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, args ...string) string {
		var stdout, stderr bytes.Buffer
		if code := run(append(args, "-topology"), &stdout, &stderr); code != 0 {
			t.Fatal(stderr.String())
		}
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	type summary struct {
		Ranks     []int `json:"ranks"`
		Idle      []int `json:"idle"`
		Hosts     int   `json:"hosts"`
		HBDomains int   `json:"hb_domains"`
		Circuits  int   `json:"circuits"`
		Ring      []int `json:"ring"`
	}
	// node2 of a 6-node line fails (ranks 4 and 5, one is enough): with
	// K = 2 its neighbours meet over the backup link, with K = 1 the line
	// splits in two.
	for _, c := range []struct {
		k                 string
		domains, circuits int
		failed            string
	}{{"2", 1, 4, "5"}, {"1", 2, 3, "4,5"}} {
		file := write("kring"+c.k+".json", "kring", "-nodes", "6", "-k", c.k, "-gpus-per-node", "2")
		var out summary
		runJSON(t, &out, "without", "-failed", c.failed, file)
		if len(out.Ranks) != 10 || out.Hosts != 5 || out.HBDomains != c.domains || out.Circuits != c.circuits || len(out.Ring) != 10 {
			t.Fatalf("K=%s: %+v", c.k, out)
		}
		if c.failed == "5" && (len(out.Idle) != 1 || out.Idle[0] != 4) {
			t.Fatalf("K=%s: idle %v, want node2's other rank 4", c.k, out.Idle)
		}
	}
	// The centre of a 3x3 RailX torus: a row or column goes.
	grid := write("railx.json", "railx", "-nodes", "3", "-dims", "2")
	var out summary
	runJSON(t, &out, "without", "-failed", "4", grid)
	if len(out.Ranks) != 6 || len(out.Idle) != 2 || out.Hosts != 6 {
		t.Fatalf("railx: %+v", out)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"without", "-failed", "4", "-topology", grid}, &stdout, &stderr); code != 0 {
		t.Fatal(stderr.String())
	}
	if top, err := topo.Parse(stdout.Bytes()); err != nil || len(top.Ranks) != 6 {
		t.Fatalf("railx -topology: %v", err)
	}
	if s := runErr(t, 1, "without", "-failed", "9", grid); !strings.Contains(s, "failed rank 9") {
		t.Fatalf("rank out of range: %s", s)
	}
	if s := runErr(t, 1, "without", "-failed", "x", grid); !strings.Contains(s, "-failed") {
		t.Fatalf("bad list: %s", s)
	}
	runErr(t, 2, "without")
}
