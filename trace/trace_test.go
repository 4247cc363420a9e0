package trace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// contains reports whether complete event a contains b in time.
func contains(a, b Event) bool {
	return a.Ts <= b.Ts && b.Ts+b.Dur <= a.Ts+a.Dur
}

func TestRecorderFile(t *testing.T) {
	r := NewRecorder(Meta{Rank: 2, Size: 4, FabricRank: 2, Comm: "00000000000000ab"})
	t0 := time.Now()
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	r.Op(Op{Name: "AllReduce", Seq: 1, Bytes: 4096, DType: "float32", Schedule: "ring", Predicted: 15 * time.Microsecond, Peer: -1, Start: at(10), End: at(40)})
	r.Op(Op{Name: "Rewire", Seq: 2, Peer: -1, Start: at(50), End: at(150)})
	r.Span(Span{Name: "connect", Cat: "rewire", Start: at(70), End: at(80)})
	r.Span(Span{Name: "switch", Cat: "rewire", Start: at(70), End: at(130)})
	r.Span(Span{Name: "pause", Cat: "rewire", Start: at(50), End: at(60)})
	r.Op(Op{Name: "Broadcast", Seq: 3, Bytes: 8, Err: "peer died", Peer: 3, Start: at(160), End: at(170)})

	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var f File
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.Bytes())
	}
	if f.OtherData == nil || f.OtherData.Rank != 2 || f.OtherData.ZeroUnixNano == 0 {
		t.Fatalf("metadata %+v", f.OtherData)
	}
	var names []string
	byName := map[string]Event{}
	for _, e := range f.TraceEvents {
		if e.Ph == "M" {
			continue
		}
		if e.Ph != "X" || e.Pid != 2 || e.Tid != Worker {
			t.Errorf("event %+v: want a complete event of pid 2 on the worker", e)
		}
		names = append(names, e.Name)
		byName[e.Name] = e
	}
	want := []string{"AllReduce #1", "Rewire #2", "pause", "switch", "connect", "Broadcast #3"}
	if len(names) != len(want) {
		t.Fatalf("events %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("events %q, want %q (sorted by start, parents first)", names, want)
		}
	}
	ar := byName["AllReduce #1"]
	if ar.Dur != 30 || ar.Args["schedule"] != "ring" || ar.Args["dtype"] != "float32" ||
		ar.Args["bytes"] != float64(4096) || ar.Args["seq"] != float64(1) || ar.Args["predicted_us"] != float64(15) {
		t.Errorf("AllReduce event %+v", ar)
	}
	if got := byName["Broadcast #3"].Args; got["error"] != "peer died" || got["peer"] != float64(3) {
		t.Errorf("failed op args %v", got)
	}
	for _, child := range []string{"pause", "switch", "connect"} {
		if !contains(byName["Rewire #2"], byName[child]) {
			t.Errorf("%s %+v is not inside the rewire %+v", child, byName[child], byName["Rewire #2"])
		}
	}
	if !contains(byName["switch"], byName["connect"]) {
		t.Error("connect is not inside switch")
	}
	if base := byName["AllReduce #1"].Ts; base < 10 {
		t.Errorf("ts %v is not relative to the recorder's zero", base)
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Op(Op{Name: "x"})
	r.Span(Span{Name: "y"})
	r.SetClockOffset(time.Second)
}

func TestRecorderBounded(t *testing.T) {
	r := NewRecorder(Meta{})
	r.max = 3
	for range 5 {
		r.Op(Op{Name: "Barrier"})
	}
	f := r.File()
	if n := countX(f); n != 3 || f.OtherData.Dropped != 2 {
		t.Fatalf("%d events kept, %d dropped; want 3 and 2", n, f.OtherData.Dropped)
	}
}

func countX(f File) int {
	n := 0
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			n++
		}
	}
	return n
}

// TestRecorderTransfers checks an operation's transfers: one event each on
// the thread of its peer and direction, named and with their arguments, and
// that they count toward the recorder's bound.
func TestRecorderTransfers(t *testing.T) {
	r := NewRecorder(Meta{Rank: 1})
	t0 := time.Now()
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	r.max = 4
	r.Op(Op{Name: "AllReduce", Seq: 7, Start: at(10), End: at(50), Transfers: []Transfer{
		{Peer: 2, Send: true, Step: 1, Bytes: 100, Start: at(11), End: at(20)},
		{Peer: 0, Step: 1, Bytes: 100, Start: at(12), End: at(30)},
		{Peer: 2, Send: true, Step: 2, Bytes: 50, Start: at(31), End: at(40)},
		{Peer: 0, Step: 2, Bytes: 50, Start: at(31), End: at(45)},
	}, TransfersOmitted: 1})
	f := r.File()
	if f.OtherData.Dropped != 1 {
		t.Errorf("dropped %d, want 1 (the fourth transfer)", f.OtherData.Dropped)
	}
	threads := map[int]string{}
	var xs []Event
	var op Event
	for _, e := range f.TraceEvents {
		switch {
		case e.Name == "thread_name":
			threads[e.Tid] = e.Args["name"].(string)
		case e.Cat == "op":
			op = e
		case e.Cat == "transfer":
			xs = append(xs, e)
		}
	}
	if op.Args["transfers"] != 5 || op.Args["transfers_omitted"] != 2 {
		t.Errorf("op args %v: want 5 transfers, 2 omitted", op.Args)
	}
	want := []struct {
		name  string
		tid   int
		step  uint32
		bytes int
	}{{"send to 2", TransferTid(2, true), 1, 100}, {"recv from 0", TransferTid(0, false), 1, 100}, {"send to 2", TransferTid(2, true), 2, 50}}
	if len(xs) != len(want) {
		t.Fatalf("transfers %+v, want %d", xs, len(want))
	}
	for i, w := range want {
		x := xs[i]
		if x.Name != w.name || x.Tid != w.tid || x.Args["step"] != w.step || x.Args["bytes"] != w.bytes || x.Args["seq"] != uint64(7) {
			t.Errorf("transfer %d: %+v, want %+v", i, x, w)
		}
		if x.Ts < op.Ts || x.Ts+x.Dur > op.Ts+op.Dur {
			t.Errorf("transfer %d [%v, %v] outside its operation [%v, %v]", i, x.Ts, x.Ts+x.Dur, op.Ts, op.Ts+op.Dur)
		}
		if threads[x.Tid] != w.name {
			t.Errorf("thread %d named %q, want %q", x.Tid, threads[x.Tid], w.name)
		}
	}
	if TransferTid(0, true) <= App || TransferTid(0, false) == TransferTid(0, true) || TransferTid(1, true) == TransferTid(0, false) {
		t.Error("transfer thread ids collide")
	}
}

func TestMergeAlignsClocks(t *testing.T) {
	dir := t.TempDir()
	// Rank 1's clock runs 5 ms behind rank 0's and its zero is 1 ms
	// later on its own clock: its events at ts 0 happened at rank 0's
	// 1 ms + 5 ms.
	r0 := NewRecorder(Meta{Rank: 0, Size: 2, FabricRank: 0})
	r1 := NewRecorder(Meta{Rank: 1, Size: 2, FabricRank: 1})
	r1.meta.ZeroUnixNano = r0.meta.ZeroUnixNano + int64(time.Millisecond)
	r1.SetClockOffset(5 * time.Millisecond)
	r0.Op(Op{Name: "AllReduce", Seq: 1, Start: r0.zero, End: r0.zero.Add(time.Millisecond)})
	r1.Op(Op{Name: "AllReduce", Seq: 1, Start: r1.zero, End: r1.zero.Add(time.Millisecond)})
	r1.Op(Op{Name: "Barrier", Seq: 2, Start: r1.zero.Add(2 * time.Millisecond), End: r1.zero.Add(3 * time.Millisecond)})
	for i, r := range []*Recorder{r0, r1} {
		if err := r.WriteFile(filepath.Join(dir, []string{"rank-0.json", "rank-1.json"}[i])); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "flight-rank-1.json"), []byte(`{"rank":1,"ops":[]}`), 0o644)
	m, err := MergeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back File
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got := map[int][]Event{}
	procs := map[int]string{}
	for _, e := range back.TraceEvents {
		switch {
		case e.Ph == "X":
			got[e.Pid] = append(got[e.Pid], e)
		case e.Name == "process_name":
			procs[e.Pid] = e.Args["name"].(string)
		}
	}
	if procs[0] != "rank 0" || procs[1] != "rank 1" {
		t.Fatalf("process rows %v", procs)
	}
	if len(got[0]) != 1 || len(got[1]) != 2 {
		t.Fatalf("events by rank %v", got)
	}
	if ts := got[0][0].Ts; ts != 0 {
		t.Errorf("rank 0's first op at %v, want 0", ts)
	}
	if ts := got[1][0].Ts; ts != 6000 {
		t.Errorf("rank 1's first op at %v µs, want 6000 (1 ms later zero + 5 ms offset)", ts)
	}
	if ts := got[1][1].Ts; ts != 8000 || got[1][1].Name != "Barrier #2" {
		t.Errorf("rank 1's second op %+v, want Barrier #2 at 8000", got[1][1])
	}
}

func TestMergeRefusesForeignFiles(t *testing.T) {
	if _, err := Merge([]File{{TraceEvents: []Event{}}}); err == nil {
		t.Fatal("merged a file without occl metadata")
	}
	if _, err := MergeDir(t.TempDir()); err == nil {
		t.Fatal("merged an empty directory")
	}
}
