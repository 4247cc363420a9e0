//go:build linux

package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/internal/pyvenv"
)

// elasticRecord is the part of an elastic_restart.py record the test checks.
type elasticRecord struct {
	Bench           string             `json:"bench"`
	Backend         string             `json:"backend"`
	NP              int                `json:"np"`
	Steps           int                `json:"steps"`
	KillStep        int                `json:"kill_step"`
	KilledRank      int                `json:"killed_rank"`
	Attempt         int                `json:"attempt"`
	ResumedFrom     int                `json:"resumed_from"`
	Losses          int                `json:"losses"`
	LossFirst       float64            `json:"loss_first"`
	LossLast        float64            `json:"loss_last"`
	MaxWeightDiff   float64            `json:"max_weight_diff"`
	MaxLossDiff     float64            `json:"max_loss_diff"`
	Phases          map[string]float64 `json:"phases"`
	Total           float64            `json:"total"`
	Wall            float64            `json:"wall"`
	LoadAvg         []float64          `json:"loadavg"`
	OK              bool               `json:"ok"`
	MonitorInterval float64            `json:"monitor_interval"`
}

// TestElasticRestart runs bench/peers/elastic_restart.py with 2 trials of a
// 2-process occl job under torchrun (the last rank killed after step 3 of
// 8) and checks each record: the result came from the restarted group,
// which resumed after a checkpointed step no later than the kill, trained
// all 8 steps to the weights and losses of a single-process replay, and
// lowered the loss; every phase from the kill to the first collective took
// a positive time, they add up to the total, and the total fits in the
// trial's wall time. The table mode must print the two trials.
func TestElasticRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the occl Python package and runs torchrun twice")
	}
	venv := pyvenv.Venv{Root: ".."}
	python := venv.Python(t)
	out := filepath.Join(t.TempDir(), "elastic.jsonl")
	// The flight records of the communicators the kills fail go to the
	// processes' temporary directory: the test's own.
	tmp := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		return mustRunScript(t, python, "peers/elastic_restart.py", 3*time.Minute,
			[]string{"OCCL_LIB=", "OCCL_TIMEOUT=60s", "TMPDIR=" + tmp}, args...)
	}
	log := run("--np", "2", "--trials", "2", "--backends", "occl", "--steps", "8", "--kill-step", "3",
		"--monitor-interval", "0.5", "--out", out)
	t.Logf("\n%s", log)

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var recs []elasticRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r elasticRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(recs), b)
	}
	// Rank 0 finds its peer killed in a collective well before torchrun's
	// monitor does, so its communicator fails and leaves a flight record.
	if flights, _ := filepath.Glob(filepath.Join(tmp, "occl-flight-*.json")); len(flights) == 0 {
		t.Errorf("no flight record in the test's temporary directory")
	}
	phases := []string{"detect", "teardown", "rendezvous", "spawn", "import", "init", "load", "collective"}
	for i, r := range recs {
		if r.Bench != "elastic-restart" || r.Backend != "occl" || r.NP != 2 || r.Steps != 8 || r.KillStep != 3 || r.KilledRank != 1 || r.MonitorInterval != 0.5 {
			t.Errorf("trial %d: record of another configuration: %+v", i, r)
		}
		if !r.OK {
			t.Errorf("trial %d: the script's own checks failed: %+v", i, r)
		}
		if r.Attempt != 1 {
			t.Errorf("trial %d: result from attempt %d, want the restart (1)", i, r.Attempt)
		}
		// Rank 0 checkpoints after each step; the restart resumes after the
		// last one saved: the kill step, or an earlier one if the group was
		// torn down before rank 0 saved it, never from scratch.
		if r.ResumedFrom < 1 || r.ResumedFrom > r.KillStep+1 {
			t.Errorf("trial %d: resumed from step %d, want 1..%d", i, r.ResumedFrom, r.KillStep+1)
		}
		if r.Losses != r.Steps {
			t.Errorf("trial %d: %d losses for %d steps", i, r.Losses, r.Steps)
		}
		if !(r.MaxWeightDiff <= 1e-5) || !(r.MaxLossDiff <= 1e-5) {
			t.Errorf("trial %d: weights differ from the replay by %g, losses by %g (limit 1e-5)", i, r.MaxWeightDiff, r.MaxLossDiff)
		}
		if !(r.LossLast < r.LossFirst) {
			t.Errorf("trial %d: loss %g -> %g did not fall", i, r.LossFirst, r.LossLast)
		}
		sum := 0.0
		for _, p := range phases {
			v, ok := r.Phases[p]
			if !ok || !(v > 0) {
				t.Errorf("trial %d: phase %s = %v (present %v), want > 0", i, p, v, ok)
			}
			sum += v
		}
		if len(r.Phases) != len(phases) {
			t.Errorf("trial %d: phases %v, want %v", i, r.Phases, phases)
		}
		if math.Abs(sum-r.Total) > 1e-6 || !(r.Total > 0) || !(r.Total < r.Wall) {
			t.Errorf("trial %d: total %g s, phases add up to %g s, wall time %g s", i, r.Total, sum, r.Wall)
		}
		if len(r.LoadAvg) != 3 {
			t.Errorf("trial %d: load average %v", i, r.LoadAvg)
		}
	}

	table := run("--table", out)
	for _, w := range []string{"### occl, 2 processes: 2 trials (monitor interval 0.5 s;", "| **kill to first collective** |", "| import |"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
}
