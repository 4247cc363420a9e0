//go:build linux

package python_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/internal/pyvenv"
)

// The tests run the Python examples with the occl package installed as its
// README says (internal/pyvenv), as real processes on 127.0.0.1.

var venv = pyvenv.Venv{Root: "../.."}

// pyEnv is the environment of every Python process: one thread each (the
// machine may have fewer cores than ranks) and the installed library.
func pyEnv() []string {
	return []string{"OCCL_LIB=", "OMP_NUM_THREADS=1", "OCCL_TIMEOUT=90s", "PYTHONDONTWRITEBYTECODE=1"}
}

// runOccl runs a script across np processes with occl's launcher.
func runOccl(t *testing.T, python string, np int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	res, err := launch.Run(ctx, launch.Spec{NP: np, Path: python, Args: args, Env: pyEnv(), Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("%v %v\nstdout:\n%s\nstderr:\n%s", err, res, out.String(), errOut.String())
	}
	return out.String()
}

// TestSelfTest runs selftest.py on 4 ranks: every collective of the occl
// package on NumPy arrays and PyTorch tensors of every type, zero-copy,
// async, groups, split, and errors carrying occlGetLastError's message.
func TestSelfTest(t *testing.T) {
	python := venv.Python(t)
	out := runOccl(t, python, 4, "selftest.py")
	if n := strings.Count(out, ": ok"); n != 4 {
		t.Fatalf("%d of 4 ranks passed:\n%s", n, out)
	}
}

// torchJob is a script across np processes the way torchrun sets up
// torch.distributed.
func torchJob(python string, np int, args ...string) pyvenv.Job {
	return pyvenv.Job{Python: python, NP: np, Args: args, Env: pyEnv(), Limit: 5 * time.Minute}
}

// runTorch runs torchJob's job and returns its output; call it from the
// test's goroutine.
func runTorch(t *testing.T, python string, np int, args ...string) string {
	t.Helper()
	return torchJob(python, np, args...).MustRun(t)
}

type result struct {
	Backend string    `json:"backend"`
	World   int       `json:"world"`
	Losses  []float64 `json:"losses"`
	Weights []float64 `json:"weights"`
}

func load(t *testing.T, file string) result {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// maxRelErr is the largest |a-b| / max(|a|, |b|, 1e-6) over the weights
// (the floor keeps a weight that is almost zero from turning a rounding
// difference into a large relative one), and the largest |a-b|.
func maxRelErr(t *testing.T, a, b []float64) (rel, abs float64) {
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("weights of %d and %d elements", len(a), len(b))
	}
	for i := range a {
		d := math.Abs(a[i] - b[i])
		if math.IsNaN(d) {
			t.Fatalf("weight %d: %v and %v", i, a[i], b[i])
		}
		abs = max(abs, d)
		rel = max(rel, d/max(math.Abs(a[i]), math.Abs(b[i]), 1e-6))
	}
	return rel, abs
}

// TestDDPMatchesGloo trains the same MLP with DistributedDataParallel on 4
// processes on the occl backend and on Gloo, and on one process over the
// whole batch, and checks that the trained weights agree within 1e-6
// relative error.
func TestDDPMatchesGloo(t *testing.T) {
	python := venv.Python(t)
	dir := t.TempDir()
	occlOut, glooOut, localOut := filepath.Join(dir, "occl.json"), filepath.Join(dir, "gloo.json"), filepath.Join(dir, "local.json")
	jobs := [3]pyvenv.Job{
		torchJob(python, 4, "ddp_train.py", "--backend", "occl", "--out", occlOut),
		torchJob(python, 4, "ddp_train.py", "--backend", "gloo", "--out", glooOut),
		torchJob(python, 1, "ddp_train.py", "--backend", "local", "--out", localOut),
	}
	var logs [3]string
	var errs [3]error
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logs[i], errs[i] = j.Output(t)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("\n%s%s%s", logs[0], logs[1], logs[2])
	o, g, l := load(t, occlOut), load(t, glooOut), load(t, localOut)
	if o.World != 4 || g.World != 4 || l.World != 1 {
		t.Fatalf("worlds %d %d %d", o.World, g.World, l.World)
	}
	if last := o.Losses[len(o.Losses)-1]; !(last < o.Losses[0]) {
		t.Fatalf("occl training did not reduce the loss: %v", o.Losses)
	}
	eg, ag := maxRelErr(t, o.Weights, g.Weights)
	el, al := maxRelErr(t, o.Weights, l.Weights)
	t.Logf("%d weights: occl vs gloo: max relative difference %.3g (absolute %.3g); occl vs one process: %.3g (%.3g)",
		len(o.Weights), eg, ag, el, al)
	if eg > 1e-6 || el > 1e-6 {
		t.Fatalf("weights differ: occl vs gloo %.3g, occl vs one process %.3g (limit 1e-6)", eg, el)
	}
}

// TestMoETrain trains the expert-parallel MoE example on 4 processes on an
// emulated fabric of 2 hosts: its dispatch and combine round trip is
// checked by the script, it reconfigures before every layer, and it prints
// every layer's all-to-all time with and without reconfiguration.
func TestMoETrain(t *testing.T) {
	python := venv.Python(t)
	out := runTorch(t, python, 4, "moe_train.py", "--layers", "3", "--tokens", "512", "--steps", "2", "--warmup-steps", "2")
	t.Logf("\n%s", out)
	rows := regexp.MustCompile(`(?m)^\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)x$`).FindAllStringSubmatch(out, -1)
	if len(rows) != 3 {
		t.Fatalf("want a row per layer (3), got %d:\n%s", len(rows), out)
	}
	for _, r := range rows {
		for _, v := range r[2:4] {
			if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 {
				t.Errorf("layer %s: all-to-all time %q", r[1], v)
			}
		}
	}
	loss := regexp.MustCompile(`loss ([0-9.]+) -> ([0-9.]+)`).FindStringSubmatch(out)
	if loss == nil {
		t.Fatalf("no loss line:\n%s", out)
	}
	if first, _ := strconv.ParseFloat(loss[1], 64); !(first > 0) {
		t.Errorf("loss %s", loss[1])
	}
}

// TestMoETrainKill runs the MoE example with its own launcher on 4
// processes and kills rank 2 in the dispatch of layer 1: the script
// succeeds only if rank 2 died of SIGKILL and the 3 others shrank, took
// over its experts and trained on (with -spare: and a fifth process joined
// in rank 2's place, on its host, and held its experts). Every all-to-all
// of tokens after the failure, forward and backward, is checked against
// its senders' checksums by the script; the test checks the report:
// detection and recovery times, and a row per layer of each step after
// the failure, on 3 ranks (4 with the spare).
func TestMoETrainKill(t *testing.T) {
	python := venv.Python(t)
	for _, spare := range []bool{false, true} {
		name, ranks, first := "shrink", 3, "as at the failure"
		args := []string{"moe_train.py", "--nproc", "4", "--kill-rank", "2", "--at-layer", "1",
			"--layers", "3", "--tokens", "512", "--steps", "2", "--warmup-steps", "2"}
		if spare {
			name, ranks, first = "spare", 4, `none yet \(grown group\)`
			args = append(args, "--spare")
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, args...)
			cmd.Env = append(os.Environ(), pyEnv()...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("moe_train.py: %v\n%s", err, out.String())
			}
			t.Logf("\n%s", out.String())
			times := []string{
				`(?m)^# detected in ([0-9.]+) ms \(.* naming rank 2 `,
				`(?m)^# recovered in ([0-9.]+) ms \(.* 3 survivors`,
			}
			if spare {
				times = append(times, `(?m)^# spare joined in ([0-9.]+) ms \(.* grown group of 4 ranks`)
			}
			for _, re := range times {
				m := regexp.MustCompile(re).FindStringSubmatch(out.String())
				if m == nil {
					t.Fatalf("no match for %q:\n%s", re, out.String())
				}
				if f, _ := strconv.ParseFloat(m[1], 64); !(f > 0) {
					t.Errorf("%s: %s ms", re, m[1])
				}
			}
			rows := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+(\d+)\s+(\d+)\s+%d\s+([0-9.]+)  (%s|re-planned for %d ranks)$`, ranks, first, ranks)).
				FindAllStringSubmatch(out.String(), -1)
			if len(rows) != 6 {
				t.Fatalf("want a row per layer of 2 steps on %d ranks (6), got %d:\n%s", ranks, len(rows), out.String())
			}
			for i, r := range rows {
				if step, layer := strconv.Itoa(i/3+1), strconv.Itoa(i%3); r[1] != step || r[2] != layer {
					t.Errorf("row %d is step %s layer %s, want %s %s", i, r[1], r[2], step, layer)
				}
				if f, _ := strconv.ParseFloat(r[3], 64); !(f > 0) {
					t.Errorf("step %s layer %s: all-to-all time %s", r[1], r[2], r[3])
				}
			}
			want := fmt.Sprintf("2 steps x 3 layers on %d ranks, 22 all-to-alls of tokens (forward and backward), every one verified", ranks)
			if !strings.Contains(out.String(), want) {
				t.Errorf("no %q:\n%s", want, out.String())
			}
		})
	}
}
