package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/occl/occl/trace"
)

func TestMerge(t *testing.T) {
	dir := t.TempDir()
	for r := range 3 {
		rec := trace.NewRecorder(trace.Meta{Rank: r, Size: 3, FabricRank: r})
		now := time.Now()
		rec.Op(trace.Op{Name: "AllReduce", Seq: 1, Start: now, End: now.Add(time.Millisecond)})
		if err := rec.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r))); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "job.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"merge", dir, "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	f, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ranks := map[int]int{}
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Name == "AllReduce #1" {
			ranks[e.Pid]++
		}
	}
	if len(ranks) != 3 || ranks[0] != 1 || ranks[1] != 1 || ranks[2] != 1 {
		t.Fatalf("AllReduce #1 by rank row: %v", ranks)
	}
	// Merging again ignores the merged file in the same directory.
	stdout.Reset()
	if code := run([]string{"merge", "-o", out, dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("second merge: exit %d: %s", code, stderr.String())
	}
	if g, err := trace.ReadFile(out); err != nil || len(g.TraceEvents) != len(f.TraceEvents) {
		t.Fatalf("second merge: %d events, want %d (%v)", len(g.TraceEvents), len(f.TraceEvents), err)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"split"}, {"merge"}, {"merge", "a", "b"}, {"merge", "-x", "d"}} {
		var o, e bytes.Buffer
		if code := run(args, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	var o, e bytes.Buffer
	if code := run([]string{"merge", t.TempDir()}, &o, &e); code != 1 {
		t.Errorf("empty directory: exit %d, want 1", code)
	}
}
