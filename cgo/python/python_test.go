//go:build linux

// Package python_test checks the occl Python package and its
// torch.distributed backend, installed as users install it, across 4 real
// processes on 127.0.0.1.
package python_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/pyvenv"
)

var venv = pyvenv.Venv{Root: "../.."}

// job runs a script on 4 processes with torchrun's variables.
func job(python string, args ...string) pyvenv.Job {
	return pyvenv.Job{Python: python, NP: 4, Args: args, Limit: 5 * time.Minute}
}

// checkOK checks that every rank of a 4-process job printed its last line.
func checkOK(t *testing.T, out string) {
	t.Helper()
	for r := range 4 {
		if !strings.Contains(out, fmt.Sprintf("rank %d: ok", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, out)
		}
	}
}

// TestBackendTorchrun runs every check of tests/check_backend.py under
// torchrun (env://) on 4 processes.
func TestBackendTorchrun(t *testing.T) {
	python := venv.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// --redirects/--tee: Debian's torch 1.13 torchrun fails without them.
	cmd := exec.CommandContext(ctx, python, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
		"--standalone", "--nproc_per_node", "4", "tests/check_backend.py")
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", "OCCL_LIB=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("torchrun: %v\n%s", err, out.String())
	}
	checkOK(t, out.String())
}

// TestBackendInitMethods runs the checks in plain processes initialised
// with tcp:// and file://, as a script run without torchrun does.
func TestBackendInitMethods(t *testing.T) {
	python := venv.Python(t)
	t.Run("tcp", func(t *testing.T) {
		checkOK(t, job(python, "tests/check_backend.py", "--init", "tcp").MustRun(t))
	})
	t.Run("file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "rendezvous")
		checkOK(t, job(python, "tests/check_backend.py", "--init", "file", "--file", file).MustRun(t))
	})
}

// TestGrow runs tests/check_grow.py: 4 processes make a communicator and
// grow it by a fifth process that joins; all check every kind of
// collective on the 5 ranks, and the 4 their old communicator.
func TestGrow(t *testing.T) {
	python := venv.Python(t)
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	growID, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j := pyvenv.Job{Python: python, NP: 5, Args: []string{"tests/check_grow.py"}, Limit: 2 * time.Minute,
		Env: []string{"OCCL_TEST_ID=" + id.String(), "OCCL_TEST_GROW_ID=" + growID.String()}}
	out := j.MustRun(t)
	for r := range 5 {
		if !strings.Contains(out, fmt.Sprintf("rank %d: ok", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, out)
		}
	}
}

// TestGrowTopology runs tests/check_grow.py with topologies: 4 processes
// make a communicator on 2 emulated hosts (hosts=2x2), which grow refuses
// to grow without the grown topology, then grow it by 2 spares into one on
// 3 hosts (hosts=3x2, given to grow and join); every rank checks the grown
// communicator's topology (6 ranks, 2 to a host) and every kind of
// collective on it.
func TestGrowTopology(t *testing.T) {
	python := venv.Python(t)
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	growID, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j := pyvenv.Job{Python: python, NP: 6, Args: []string{"tests/check_grow.py", "--topology", "hosts=2x2", "hosts=3x2"},
		Limit: 2 * time.Minute, Env: []string{"OCCL_TEST_ID=" + id.String(), "OCCL_TEST_GROW_ID=" + growID.String()}}
	out := j.MustRun(t)
	for r := range 6 {
		if !strings.Contains(out, fmt.Sprintf("rank %d: ok", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, out)
		}
	}
}

// TestBackendFailure kills a rank, and stalls one, in the middle of a job:
// every other rank raises a RuntimeError, and later operations raise too.
// For a dead rank the error names it. For a stall it names the rank each
// survivor waited on when the group's timeout expired, which may be
// another survivor waiting for the stalled rank.
func TestBackendFailure(t *testing.T) {
	python := venv.Python(t)
	const victim = 2
	for _, c := range []struct {
		mode string
		want *regexp.Regexp
	}{
		{"kill", regexp.MustCompile(`raised after [0-9.]+s: .*rank 2: process exited`)},
		{"timeout", regexp.MustCompile(`raised after [0-9.]+s: .*timed out after .* waiting for rank [0-9]`)},
	} {
		t.Run(c.mode, func(t *testing.T) {
			start := time.Now()
			j := job(python, "tests/check_failure.py", "--mode", c.mode, "--victim", fmt.Sprint(victim), "--timeout", "5")
			j.KeepGoing, j.Limit = true, 2*time.Minute
			tmp := t.TempDir()
			j.Env = []string{"TMPDIR=" + tmp}
			outs, errs := j.Run(t)
			for r := range 4 {
				if r == victim {
					continue
				}
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
				// The failed communicator's flight record, in TMPDIR.
				if dumps, _ := filepath.Glob(filepath.Join(tmp, fmt.Sprintf("occl-flight-*-rank-%d-*.json", r))); len(dumps) != 1 {
					t.Errorf("rank %d: flight records %q", r, dumps)
				}
				if !c.want.MatchString(outs[r]) || !strings.Contains(outs[r], "later operation raised") {
					t.Errorf("rank %d did not raise an error naming rank %d:\n%s", r, victim, outs[r])
				}
			}
			t.Logf("%s: every rank done after %v", c.mode, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestShrink kills rank 2 of 4 in the middle of a job: the others catch
// the error, Communicator.shrink without it, and reduce on the new
// communicator of 3 ranks.
func TestShrink(t *testing.T) {
	python := venv.Python(t)
	const victim = 2
	j := job(python, "tests/check_shrink.py", "--victim", fmt.Sprint(victim))
	j.KeepGoing, j.Limit = true, 2*time.Minute
	j.Env = []string{"TMPDIR=" + t.TempDir()}
	outs, errs := j.Run(t)
	for r := range 4 {
		if r == victim {
			continue
		}
		if errs[r] != nil || !strings.Contains(outs[r], fmt.Sprintf("rank %d: raised", r)) || !strings.Contains(outs[r], fmt.Sprintf("rank %d: ok", r)) {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
}

// TestTorchShrink kills rank 2 of 4 with SIGKILL while its all_reduce is in
// flight: the other 3 raise a RuntimeError naming rank 2, make the group of
// the survivors with occl.torch.shrink and check all_reduce,
// all_to_all_single with uneven split sizes, broadcast, send and recv and
// barrier on it against values each computes alone, then exit normally.
// In "spare", a fifth process joins (occl.torch.join) the group the
// survivors grow from theirs (occl.torch.grow), and the 4 check the same
// on it.
func TestTorchShrink(t *testing.T) {
	python := venv.Python(t)
	const victim = 2
	for _, spare := range []bool{false, true} {
		name, np, args := "shrink", 4, []string{"tests/check_torch_shrink.py", "--victim", fmt.Sprint(victim)}
		if spare {
			name, np, args = "spare", 5, append(args, "--spare")
		}
		t.Run(name, func(t *testing.T) {
			j := pyvenv.Job{Python: python, NP: np, Args: args, KeepGoing: true, Limit: 2 * time.Minute,
				Env: []string{"TMPDIR=" + t.TempDir()}}
			outs, errs := j.Run(t)
			raised := regexp.MustCompile(`rank [0-9]: raised: .*rank 2: process exited`)
			for r := range np {
				switch {
				case r == victim:
					if errs[r] == nil {
						t.Errorf("rank %d was not killed:\n%s", r, outs[r])
					}
				case errs[r] != nil || !strings.Contains(outs[r], fmt.Sprintf("rank %d: ok", r)):
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				case r < 4 && !raised.MatchString(outs[r]):
					t.Errorf("rank %d did not raise an error naming rank %d:\n%s", r, victim, outs[r])
				}
			}
		})
	}
}

// TestBackendOverlap runs each scenario of tests/check_overlap.py on 2
// processes with a 10 s shared-memory spin: an all_reduce waited for
// through its future while its peer is late must not poll if the process
// group marked it as overlapping computation, as it does for every future
// with OCCL_FUTURE_OVERLAP=1 (always) and, by default, for a future asked
// for while an earlier one is pending (auto).
func TestBackendOverlap(t *testing.T) {
	python := venv.Python(t)
	for _, c := range []struct{ name, env string }{{"always", "OCCL_FUTURE_OVERLAP=1"}, {"auto", "OCCL_FUTURE_OVERLAP="}} {
		t.Run(c.name, func(t *testing.T) {
			j := pyvenv.Job{Python: python, NP: 2, Args: []string{"tests/check_overlap.py", "--scenario", c.name, "--deadline", "30"},
				KeepGoing: true, Limit: 90 * time.Second, Env: []string{"TMPDIR=" + t.TempDir(), "OCCL_SHM_SPIN=10s", c.env}}
			outs, errs := j.Run(t)
			for r := range 2 {
				if errs[r] != nil || !strings.Contains(outs[r], fmt.Sprintf("rank %d: ok", r)) {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
			}
			t.Log(outs[0])
		})
	}
}

// TestBackendHazards runs each scenario of tests/check_hazards.py on 2
// processes, each under a deadline that turns a hang into a failure with
// every thread's stack: a future's callback that waits for another
// future (chain, and DDP's PowerSGD hook, powersgd), reading and dropping
// works whose operation waits for a late peer (pending),
// destroy_process_group with a callback or a fire-and-forget isend still
// pending (destroy_then, destroy_isend), the interpreter's exit while a
// Completer thread still releases a callback (exit_callback), send/recv
// tags, which occl refuses (tags), and operations after abort (abort).
func TestBackendHazards(t *testing.T) {
	python := venv.Python(t)
	for _, s := range []string{"chain", "powersgd", "pending", "destroy_then", "destroy_isend", "exit_callback", "tags", "abort"} {
		t.Run(s, func(t *testing.T) {
			j := pyvenv.Job{Python: python, NP: 2, Args: []string{"tests/check_hazards.py", "--scenario", s, "--deadline", "30"},
				KeepGoing: true, Limit: 90 * time.Second, Env: []string{"TMPDIR=" + t.TempDir()}}
			outs, errs := j.Run(t)
			for r := range 2 {
				if errs[r] != nil || !strings.Contains(outs[r], fmt.Sprintf("rank %d: ok", r)) {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
				if s == "exit_callback" && !strings.Contains(outs[r], fmt.Sprintf("rank %d: callback released", r)) {
					t.Errorf("rank %d: the callback's finalizer did not return before the interpreter exited\n%s", r, outs[r])
				}
			}
		})
	}
}
