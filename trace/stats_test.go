package trace

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestStats records two ranks' timelines with known durations and gaps,
// writes and reads them back as a job's files would be, and checks the
// summary against what was recorded.
func TestStats(t *testing.T) {
	dir := t.TempDir()
	// Rank 0: four 1 MiB broadcasts of 10 us with 3 us between them, then
	// one 8 B AllReduce of 2 us after 5 us. Rank 1: the broadcasts take
	// 20 us, with 1 us between them.
	type rec struct {
		name  string
		bytes int64
		gap   time.Duration
		dur   time.Duration
	}
	ranks := [][]rec{
		{{"Broadcast", 1 << 20, 0, 10}, {"Broadcast", 1 << 20, 3, 10}, {"Broadcast", 1 << 20, 3, 10}, {"Broadcast", 1 << 20, 3, 10}, {"AllReduce", 8, 5, 2}},
		{{"Broadcast", 1 << 20, 0, 20}, {"Broadcast", 1 << 20, 1, 20}, {"Broadcast", 1 << 20, 1, 20}, {"Broadcast", 1 << 20, 1, 20}},
	}
	for r, ops := range ranks {
		rc := NewRecorder(Meta{Rank: r, Size: 2, FabricRank: r})
		at := time.Now()
		for i, o := range ops {
			start := at.Add(o.gap * time.Microsecond)
			end := start.Add(o.dur * time.Microsecond)
			rc.Op(Op{Name: o.name, Seq: uint64(i + 1), Bytes: o.bytes, Start: start, End: end})
			at = end
		}
		if err := rc.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r))); err != nil {
			t.Fatal(err)
		}
	}
	files, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := Stats(files)
	want := []OpStats{
		{Op: "AllReduce", Bytes: 8, Count: 1, Ranks: 1, Median: 2, P90: 2, Gap: 5},
		// Durations 10,10,10,10,20,20,20,20; gaps 3,3,3,1,1,1.
		{Op: "Broadcast", Bytes: 1 << 20, Count: 8, Ranks: 2, Median: 10, P90: 20, Gap: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		near := func(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }
		if g.Op != w.Op || g.Bytes != w.Bytes || g.Count != w.Count || g.Ranks != w.Ranks ||
			!near(g.Median, w.Median) || !near(g.P90, w.P90) || !near(g.Gap, w.Gap) {
			t.Errorf("line %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{nil, 0.5, 0},
		{[]float64{7}, 0.9, 7},
		{[]float64{1, 2, 3}, 0.5, 2},
		{[]float64{1, 2, 3, 4}, 0.5, 2},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
	} {
		if got := quantile(c.xs, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.xs, c.q, got, c.want)
		}
	}
}
