//go:build linux

// Package python_test checks the occl Python package and its
// torch.distributed backend, installed as users install it, across 4 real
// processes on 127.0.0.1.
package python_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/internal/pyvenv"
)

var venv = pyvenv.Venv{Root: "../.."}

func TestMain(m *testing.M) {
	code := m.Run()
	venv.Cleanup()
	os.Exit(code)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// env is what every rank gets: one thread each (4 ranks share 2 cores).
func env(extra ...string) []string {
	return append(append(os.Environ(), "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", "OCCL_LIB="), extra...)
}

// spawn runs a script as np processes with the variables torchrun sets
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and returns each
// rank's output. A rank that fails is reported in errs; the others go on.
func spawn(t *testing.T, python string, np int, timeout time.Duration, args ...string) (outs []string, errs []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	port := freePort(t)
	outs, errs = make([]string, np), make([]error, np)
	var wg sync.WaitGroup
	for r := range np {
		cmd := exec.CommandContext(ctx, python, args...)
		cmd.Env = env(fmt.Sprintf("RANK=%d", r), fmt.Sprintf("LOCAL_RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", np),
			fmt.Sprintf("LOCAL_WORLD_SIZE=%d", np), "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port))
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(b), err
		}()
	}
	wg.Wait()
	return outs, errs
}

// mustSpawn is spawn that fails t if any rank failed.
func mustSpawn(t *testing.T, python string, np int, args ...string) []string {
	t.Helper()
	outs, errs := spawn(t, python, np, 5*time.Minute, args...)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r])
		}
	}
	return outs
}

func checkOK(t *testing.T, outs []string) {
	t.Helper()
	for r, out := range outs {
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
		"--nproc_per_node", "4", "--master_port", fmt.Sprint(freePort(t)), "tests/check_backend.py")
	cmd.Env = env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("torchrun: %v\n%s", err, out.String())
	}
	for r := range 4 {
		if !strings.Contains(out.String(), fmt.Sprintf("rank %d: ok", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, out.String())
		}
	}
}

// TestBackendInitMethods runs the checks in plain processes initialised
// with tcp:// and file://, as a script run without torchrun does.
func TestBackendInitMethods(t *testing.T) {
	python := venv.Python(t)
	t.Run("tcp", func(t *testing.T) {
		checkOK(t, mustSpawn(t, python, 4, "tests/check_backend.py", "--init", "tcp"))
	})
	t.Run("file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "rendezvous")
		checkOK(t, mustSpawn(t, python, 4, "tests/check_backend.py", "--init", "file", "--file", file))
	})
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
			outs, errs := spawn(t, python, 4, 2*time.Minute, "tests/check_failure.py", "--mode", c.mode, "--victim", fmt.Sprint(victim), "--timeout", "5")
			for r := range 4 {
				if r == victim {
					continue
				}
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
				if !c.want.MatchString(outs[r]) || !strings.Contains(outs[r], "later operation raised") {
					t.Errorf("rank %d did not raise an error naming rank %d:\n%s", r, victim, outs[r])
				}
			}
			t.Logf("%s: every rank done after %v", c.mode, time.Since(start).Round(time.Millisecond))
		})
	}
}
