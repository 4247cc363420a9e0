package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a recovery trial's process: RunRecover
// starts it again with recoverWorkerEnv set, and it runs RecoverChild.
func TestMain(m *testing.M) {
	if os.Getenv(recoverWorkerEnv) != "" {
		if err := RecoverChild(context.Background(), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const recoverWorkerEnv = "OCCL_BENCH_TEST_RECOVER_CHILD"

// runRecoverTest runs trials of fault at 4 processes and checks every
// record: each survivor recovered into a communicator of the 3 others
// with its rank in order, with a correct AllReduce, positive times and a
// detection within the deadline.
func runRecoverTest(t *testing.T, fault string, trials int) RecoverResult {
	t.Helper()
	const np, hb, deadline = 4, time.Second, 45 * time.Second
	res, err := RunRecover(context.Background(), RecoverConfig{
		NP: np, Trials: trials, Fault: fault, HeartbeatTimeout: hb, Deadline: deadline,
		Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{recoverWorkerEnv + "=1", "OCCL_TRANSPORT=shm"},
		Transport: "shm",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || len(res.Records) != trials || res.Wrong != 0 {
		var errs []string
		for _, tr := range res.Records {
			errs = append(errs, tr.Err)
		}
		t.Fatalf("%d of %d trials failed, %d records, %d wrong:\n%s", res.Failed, trials, len(res.Records), res.Wrong, strings.Join(errs, "\n"))
	}
	for i, tr := range res.Records {
		if tr.Victim != i%np {
			t.Fatalf("trial %d hit rank %d, want %d", i, tr.Victim, i%np)
		}
		if len(tr.Survivors) != np-1 {
			t.Fatalf("trial %d: %d survivors recorded, want %d: %+v", i, len(tr.Survivors), np-1, tr)
		}
		for j, s := range tr.Survivors {
			wantOld := j
			if j >= tr.Victim {
				wantOld++
			}
			if s.Rank != wantOld || s.NewRank != j || s.NewSize != np-1 || s.Wrong != 0 || s.Links != "shm" {
				t.Fatalf("trial %d: survivor %+v, want old rank %d, new rank %d of %d over shm, nothing wrong", i, s, wantOld, j, np-1)
			}
			if s.DetectUS <= 0 || s.RecoverUS <= 0 || s.DetectUS >= float64(deadline/time.Microsecond) {
				t.Fatalf("trial %d: survivor %d detected in %.0f us and recovered in %.0f us", i, s.Rank, s.DetectUS, s.RecoverUS)
			}
			if fault == FaultStop && s.DetectUS < float64(hb/2/time.Microsecond) {
				t.Fatalf("trial %d: survivor %d detected a stopped rank after %.0f us, before half the heartbeat timeout %v", i, s.Rank, s.DetectUS, hb)
			}
			if s.DetectUS > tr.DetectUS || s.RecoverUS > tr.RecoverUS {
				t.Fatalf("trial %d: survivor %+v slower than the trial's %+v", i, s, tr)
			}
		}
		t.Logf("%s trial %d, rank %d hit: detection %.1f ms, recovery %.1f ms, total %.1f ms", fault, i, tr.Victim,
			tr.DetectUS/1e3, tr.RecoverUS/1e3, tr.TotalUS/1e3)
	}
	if res.DetectP50US <= 0 || res.RecoverP99US < res.RecoverP50US || res.TotalP50US <= 0 {
		t.Fatalf("summary %+v", res)
	}
	return res
}

// Two trials at 4 processes, rank 0 (the control root) killed in the
// first and rank 1 in the second.
func TestRecoverKill(t *testing.T) {
	runRecoverTest(t, FaultKill, 2)
}

// One trial at 4 processes with rank 0 stopped: only the heartbeat
// timeout finds it.
func TestRecoverStop(t *testing.T) {
	runRecoverTest(t, FaultStop, 1)
}
