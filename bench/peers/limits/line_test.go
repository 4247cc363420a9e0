package main

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestMain lets the test binary act as the line tests' peer process, as
// the command does when it runs itself again.
func TestMain(m *testing.M) {
	if iters := os.Getenv(linePeerEnv); iters != "" {
		if err := runLinePeer(iters); err != nil {
			os.Stderr.WriteString("line peer: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMeasureLine: the two processes go through every round of both tests
// (a lost round would leave one waiting until the timeout) and the records
// say what was measured.
func TestMeasureLine(t *testing.T) {
	rtt, exch, err := measureLine(5000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		rec  Record
		what string
	}{{rtt, "shm_line_rtt"}, {exch, "shm_line_exchange"}} {
		if r.rec.What != r.what || r.rec.Impl != "limit" || r.rec.Reps != 5000 || r.rec.GBps != nil {
			t.Errorf("record %+v, want %s of 5000 rounds", r.rec, r.what)
		}
		if r.rec.US <= 0 || r.rec.US > 1e4 {
			t.Errorf("%s: %v us per round", r.what, r.rec.US)
		}
	}
}

// TestAwaitGivesUp: a wait for a word nobody writes ends with an error
// after the timeout instead of polling for ever.
func TestAwaitGivesUp(t *testing.T) {
	defer func(d time.Duration) { lineTimeout = d }(lineTimeout)
	lineTimeout = 50 * time.Millisecond
	var w atomic.Uint64
	start := time.Now()
	if err := awaitAtLeast(&w, 1); err == nil {
		t.Fatal("a wait for a word nobody writes returned no error")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	w.Store(3)
	if err := awaitAtLeast(&w, 2); err != nil {
		t.Errorf("a word already past the value: %v", err)
	}
}

// TestMeasureOnlyLine: -only line (what compare.py's --steady probes with)
// runs the two line tests and nothing else.
func TestMeasureOnlyLine(t *testing.T) {
	var whats []string
	err := measure(settings{only: "line", lineIters: 1000}, func(r Record) { whats = append(whats, r.What) })
	if err != nil {
		t.Fatal(err)
	}
	if len(whats) != 2 || whats[0] != "shm_line_rtt" || whats[1] != "shm_line_exchange" {
		t.Fatalf("records %v, want shm_line_rtt and shm_line_exchange alone", whats)
	}
}
