//go:build linux

package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/internal/pyvenv"
)

// torchCompareRow is the part of a torch_compare.py record the test checks.
type torchCompareRow struct {
	Meta   bool     `json:"meta"`
	Rounds int      `json:"rounds"`
	Impl   string   `json:"impl"`
	Op     string   `json:"op"`
	NP     int      `json:"np"`
	Bytes  int      `json:"bytes"`
	TimeUS float64  `json:"time_us"`
	Wrong  *int     `json:"wrong"`
	OcclUS *float64 `json:"occl_us"`
	GapUS  *float64 `json:"gap_us"`
}

// torchCompareScript is bench/peers/torch_compare.py, relative to this
// package.
const torchCompareScript = "peers/torch_compare.py"

// TestTorchCompare runs bench/peers/torch_compare.py for one round of
// AllReduce and AllToAll at 2 processes up to 1 KiB, and checks its
// records: every implementation (occl through torch.distributed, Gloo
// through it, occl-bench) measured every size of the table with checked
// results, occl's rows carry the times read from its timeline, and the
// table's ratio of Gloo to occl is the one the records give. A run whose
// occl cannot start (a chunk size of 0) must exit with status 1 and say
// why.
func TestTorchCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the occl Python package and runs 9 benchmark commands")
	}
	venv := pyvenv.Venv{Root: ".."}
	python := venv.Python(t)
	out := filepath.Join(t.TempDir(), "torch-compare.jsonl")
	env := []string{"OCCL_LIB="} // no override: the library the package was built with
	mustRunScript(t, python, torchCompareScript, 5*time.Minute, env,
		"--rounds", "1", "--np", "2", "--ops", "allreduce", "alltoall", "--max", "1K", "--iters", "100", "--out", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string][]int{}   // op and impl -> sizes measured
	times := map[string]float64{} // op, impl and size -> time
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r torchCompareRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		if i == 0 {
			if !r.Meta || r.Rounds != 1 {
				t.Fatalf("first line is not the run's description: %s", line)
			}
			continue
		}
		if r.NP != 2 || r.TimeUS <= 0 || r.Wrong == nil || *r.Wrong != 0 {
			t.Errorf("bad record: %s", line)
		}
		if r.Impl == "occl-torch" && (r.OcclUS == nil || *r.OcclUS <= 0 || r.GapUS == nil || *r.GapUS <= 0) {
			t.Errorf("occl's record lacks the times from its timeline: %s", line)
		}
		k := r.Op + " " + r.Impl
		sizes[k] = append(sizes[k], r.Bytes)
		times[fmt.Sprintf("%s %d", k, r.Bytes)] = r.TimeUS
	}
	// gloo_bench.py rounds the smallest all-to-all up to 16 bytes a rank,
	// where occl-bench runs it from one element: the table has the points
	// measured through torch.distributed.
	for _, op := range []string{"allreduce", "alltoall"} {
		want := sizes[op+" occl-torch"]
		if len(want) < 5 || slices.Max(want) != 1024 {
			t.Errorf("%s: occl through torch measured sizes %v, want 5 or more up to 1024", op, want)
		}
		if got := sizes[op+" gloo"]; !slices.Equal(got, want) {
			t.Errorf("%s: gloo measured sizes %v, occl through torch %v", op, got, want)
		}
		for _, n := range want {
			if !slices.Contains(sizes[op+" occl-bench"], n) {
				t.Errorf("%s: occl-bench did not measure %d bytes (it measured %v)", op, n, sizes[op+" occl-bench"])
			}
		}
	}

	// The table, printed again from the file: a line per point, whose
	// fourth to seventh columns are the times and Gloo's ratio to occl.
	table := mustRunScript(t, python, torchCompareScript, time.Minute, env, "--table", out)
	points := 0
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 11 || f[1] != "2" {
			t.Errorf("table line %q: want 11 columns at 2 processes", line)
			continue
		}
		points++
		key := f[0] + " %s " + f[2]
		torch, gloo := times[fmt.Sprintf(key, "occl-torch")], times[fmt.Sprintf(key, "gloo")]
		if want := fmt.Sprintf("%.2fx", gloo/torch); f[6] != want {
			t.Errorf("table line %q: gloo/occl-torch %s, the records give %s", line, f[6], want)
		}
	}
	if want := len(sizes["allreduce occl-torch"]) + len(sizes["alltoall occl-torch"]); points != want {
		t.Errorf("table has %d points, want %d:\n%s", points, want, table)
	}

	// occl refuses a chunk size of 0: its two columns fail, Gloo's runs.
	_, stderr, err := runScript(t, python, torchCompareScript, 5*time.Minute, append(env, "OCCL_CHUNK_SIZE=0"),
		"--rounds", "1", "--np", "2", "--ops", "allreduce", "--max", "8", "--iters", "10", "--out", filepath.Join(t.TempDir(), "fail.jsonl"))
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("with occl failing: %v, want exit status 1\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "2 failures") {
		t.Errorf("with occl failing, the report does not count its two commands:\n%s", stderr)
	}
}
