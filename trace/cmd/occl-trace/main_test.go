package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
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

func TestStatsTable(t *testing.T) {
	dir := t.TempDir()
	for r := range 2 {
		rec := trace.NewRecorder(trace.Meta{Rank: r, Size: 2, FabricRank: r})
		at := time.Now()
		for i := range 3 {
			start := at.Add(4 * time.Microsecond)
			at = start.Add(25 * time.Microsecond)
			rec.Op(trace.Op{Name: "AllToAll", Seq: uint64(i + 1), Bytes: 1 << 20, Start: start, End: at})
		}
		if err := rec.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r))); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"stats", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "gap us") {
		t.Fatalf("want a header and one line, got:\n%s", stdout.String())
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || f[0] != "AllToAll" || f[1] != "1048576" || f[2] != "6" || f[3] != "2" || f[4] != "25.0" || f[6] != "4.0" {
		t.Fatalf("line %q: want AllToAll 1048576, 6 ops on 2 ranks, 25.0 us each, 4.0 us apart", lines[1])
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"split"}, {"merge"}, {"merge", "a", "b"}, {"merge", "-x", "d"}, {"stats"}, {"stats", "-o", "f", "d"}} {
		var o, e bytes.Buffer
		if code := run(args, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	var o, e bytes.Buffer
	if code := run([]string{"merge", t.TempDir()}, &o, &e); code != 1 {
		t.Errorf("empty directory: exit %d, want 1", code)
	}
	if code := run([]string{"stats", t.TempDir()}, &o, &e); code != 1 {
		t.Errorf("stats of an empty directory: exit %d, want 1", code)
	}
}
