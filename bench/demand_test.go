package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/internal/pyvenv"
	"github.com/occl/occl/topo"
)

func TestParseDemand(t *testing.T) {
	d, err := ParseDemand("zipf:1", 4)
	if err != nil {
		t.Fatal(err)
	}
	if d.Weights[3][0] != 1 || d.Weights[0][3] != 0.25 {
		t.Fatalf("zipf:1 weights %v", d.Weights)
	}
	// 4*4*10 elements spread by weight: entry (2, 0) gets 1 / (4 * (1 + 1/2
	// + 1/3 + 1/4)) of them, rounded down.
	c := d.Counts(10)
	if c[2][0] != 19 { // 160 / (4 * 25/12)
		t.Fatalf("counts %v", c)
	}
	u, _ := ParseDemand("uniform", 3)
	if got := u.Counts(7); got[1][2] != 7 || got[0][0] != 7 {
		t.Fatalf("uniform counts %v", got)
	}
	file := filepath.Join(t.TempDir(), "m.json")
	os.WriteFile(file, []byte(`[[0,1],[2,0]]`), 0o644)
	if m, err := ParseDemand(file, 2); err != nil || m.Weights[1][0] != 2 {
		t.Fatalf("matrix file: %v %v", m, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`[[0,-1],[2,0]]`), 0o644)
	for _, spec := range []string{"zipf:x", "zipf:-1", "nope", file + "x", bad} {
		if _, err := ParseDemand(spec, 2); err == nil {
			t.Errorf("ParseDemand(%q) accepted", spec)
		}
	}
	if _, err := ParseDemand(file, 3); err == nil {
		t.Error("2x2 matrix accepted for 3 ranks")
	}
	zero := filepath.Join(t.TempDir(), "zero.json")
	os.WriteFile(zero, []byte(`[[0,0],[0,0]]`), 0o644)
	if _, err := ParseDemand(zero, 2); err == nil {
		t.Error("all-zero matrix accepted")
	}
}

// TestSkewedAllToAllV checks a skewed AllToAllV through the runner on a
// fabric with circuits, with the delegated schedule forced.
func TestSkewedAllToAllV(t *testing.T) {
	top, err := topo.FromSpec("hosts=2x2,nics=host,ocs_ports=2,circuits=0-1")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDemand("zipf:1.2", 4)
	if err != nil {
		t.Fatal(err)
	}
	comms := commtest.Local(t, 4, comm.WithTopology(top), comm.WithAlgorithm(algo.AlgoDelegated))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := make([]Result, 4)
	commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
		run, err := NewRunner(c, Config{Op: AllToAllV, DType: algo.Float32, Iters: 2, Check: true, Demand: d}, 1<<16)
		if err != nil {
			return err
		}
		for _, size := range []int{0, 100, 1 << 16} {
			if results[r], err = run.Run(ctx, size); err != nil {
				return err
			}
			if results[r].Wrong != 0 {
				return fmt.Errorf("%d bytes: %d wrong", size, results[r].Wrong)
			}
		}
		return nil
	})
	if res := results[0]; res.Algo != "delegated" || res.Skew != "zipf:1.2" || res.PredictedUS <= 0 {
		t.Fatalf("result %+v", res)
	}
}

// TestPeerSkewCounts: gloo_bench.py spreads an alltoallv's elements over
// the pairs as Demand.Counts does, so that compare.py's alltoallv columns
// move the same bytes between the same ranks.
func TestPeerSkewCounts(t *testing.T) {
	pyvenv.Require(t)
	points := skewPoints()
	var script strings.Builder
	script.WriteString("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport gloo_bench as g\nout = []\n")
	for _, p := range points {
		fmt.Fprintf(&script, "out.append(g.skew_counts(g.parse_skew(%q), %d, %d))\n", p.skew, p.n, p.per)
	}
	script.WriteString("print(json.dumps(out))\n")
	dir, err := filepath.Abs("peers")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pyvenv.System, "-c", script.String(), dir)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("gloo_bench.skew_counts: %v", err)
	}
	var got [][][]int
	if err := json.Unmarshal(b, &got); err != nil || len(got) != len(points) {
		t.Fatalf("gloo_bench.skew_counts printed %q (%v)", b, err)
	}
	for i, p := range points {
		d, err := ParseDemand(p.skew, p.n)
		if err != nil {
			t.Fatal(err)
		}
		if want := d.Counts(p.per); !reflect.DeepEqual(got[i], want) {
			t.Errorf("%s, %d ranks, %d per pair: gloo_bench spreads %v, occl-bench %v", p.skew, p.n, p.per, got[i], want)
		}
	}
}

// TestGlooBenchAllToAllV runs gloo_bench.py's skewed all-to-all (torch's
// all_to_all_single with split sizes on Gloo) on 3 processes, with every
// result checked against the senders' patterns, as compare.py's alltoallv
// column runs it.
func TestGlooBenchAllToAllV(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torch in 3 processes")
	}
	pyvenv.Require(t, "torch")
	script, err := filepath.Abs(filepath.Join("peers", "gloo_bench.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pyvenv.System, script, "-np", "3", "-op", "alltoallv", "-skew", "zipf:1",
		"-b", "48", "-e", "3M", "-f", "16", "-n", "2", "-w", "1", "-t", "0", "-c", "1", "-json", "-timeout", "120")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gloo_bench.py: %v\n%s", err, stderr.String())
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Op    string `json:"op"`
			Bytes int    `json:"bytes"`
			Wrong int    `json:"wrong"`
			Skew  string `json:"skew"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		if r.Op != "alltoallv" || r.Skew != "zipf:1" || r.Wrong != 0 {
			t.Errorf("row %s: want alltoallv, zipf:1, 0 wrong", line)
		}
		rows++
	}
	if rows != 5 {
		t.Errorf("%d rows, want 5 (48 B to 3 MiB by 16):\n%s", rows, out)
	}
}

// skewPoint is a skewed all-to-all's demand (Demand's spec) on n ranks
// with per elements per pair in its uniform form.
type skewPoint struct {
	skew   string
	n, per int
}

// skewPoints are the demands the peers' skew counts are checked on.
func skewPoints() []skewPoint {
	var points []skewPoint
	for _, skew := range []string{"uniform", "zipf:1", "zipf:0.5", "zipf:2"} {
		for _, n := range []int{2, 3, 4, 8} {
			for _, per := range []int{4, 16, 256, 4096, 1 << 20, 4 << 20} {
				points = append(points, skewPoint{skew, n, per})
			}
		}
	}
	return points
}

// TestMPIBenchSkewCounts: mpi_bench.c spreads an alltoallv's elements over
// the pairs as Demand.Counts does (skew_counts in bench/peers/skew.h,
// built here with gcc alone, without MPI), so that compare.py's alltoallv
// columns move the same bytes between the same ranks.
func TestMPIBenchSkewCounts(t *testing.T) {
	points := skewPoints()
	var src strings.Builder
	src.WriteString("#include \"skew.h\"\n#include <stdio.h>\n#include <stdlib.h>\nstatic void show(double zipf, size_t n, size_t pc) {\n" +
		"\tint *c = malloc(n * n * sizeof *c);\n\tif (!c || skew_counts(zipf, n, pc, c) != 0) { puts(\"error\"); exit(1); }\n" +
		"\tfor (size_t i = 0; i < n * n; i++) printf(\"%d \", c[i]);\n\tputs(\"\");\n\tfree(c);\n}\nint main(void) {\n")
	for _, p := range points {
		zipf := "-1"
		if p.skew != "uniform" {
			zipf = strings.TrimPrefix(p.skew, "zipf:")
		}
		fmt.Fprintf(&src, "\tshow(%s, %d, %d);\n", zipf, p.n, p.per)
	}
	lines := runPeersC(t, src.String(), len(points))
	for i, p := range points {
		d, err := ParseDemand(p.skew, p.n)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, row := range d.Counts(p.per) {
			for _, v := range row {
				want = append(want, fmt.Sprint(v))
			}
		}
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("%s, %d ranks, %d per pair: mpi_bench spreads %v, occl-bench %v", p.skew, p.n, p.per, got, want)
		}
	}
}

// runPeersC ends main in the C program src, builds it with gcc alone (C99,
// warnings as errors) with bench/peers on its include path for the headers
// that mpi_bench.c shares with it, runs it and returns the lines of its
// standard output, which must be n. Without gcc the test is skipped.
func runPeersC(t *testing.T, src string, n int) []string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: this test builds a header of bench/peers (apt-get install -y gcc)")
	}
	dir := t.TempDir()
	peers, err := filepath.Abs("peers")
	if err != nil {
		t.Fatal(err)
	}
	file, bin := filepath.Join(dir, "prog.c"), filepath.Join(dir, "prog")
	if err := os.WriteFile(file, []byte(src+"\treturn 0;\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I", peers, "-o", bin, file, "-lm").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != n {
		t.Fatalf("%s printed %d lines, want %d:\n%s", bin, len(lines), n, out)
	}
	return lines
}
