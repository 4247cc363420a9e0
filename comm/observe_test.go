package comm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/trace"
)

// opsOf returns the operations ("ph":"X" of category op) of pid in f, in
// file order.
func opsOf(f trace.File, pid int) []trace.Event {
	var ops []trace.Event
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Cat == "op" && e.Pid == pid {
			ops = append(ops, e)
		}
	}
	return ops
}

// TestTraceLocal runs collectives and a rewire on 4 ranks with OCCL_TRACE
// set, then checks every rank's file and the merged timeline: every
// operation once per rank, in sequence order, with its arguments, and the
// rewire's steps nested in it.
func TestTraceLocal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(comm.TraceEnv, dir)
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/0-1/2-3/2-3")
	const size = 8
	want := []string{"AllReduce", "AllReduce", "Broadcast", "Rewire", "AllGather", "Barrier", "AllReduce"}
	requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
		x := make([]float32, 1024)
		y := make([]float32, 1024*size)
		steps := []func() error{
			func() error { return c.AllReduce(ctx, comm.Slice(x), comm.Slice(x), comm.Sum) },
			func() error { return c.AllReduce(ctx, comm.Slice(x[:5]), comm.Slice(x[:5]), comm.Max) },
			func() error { return c.Broadcast(ctx, comm.Slice(x), comm.Slice(x), 2) },
			func() error {
				_, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error { return nil }})
				return err
			},
			func() error { return c.AllGather(ctx, comm.Slice(x), comm.Slice(y)) },
			func() error { return c.Barrier(ctx) },
			func() error { return c.AllReduce(ctx, comm.Slice(y), comm.Slice(y), comm.Sum) },
		}
		for i, s := range steps {
			if err := s(); err != nil {
				return fmt.Errorf("step %d (%s): %w", i, want[i], err)
			}
		}
		return nil
	}, comm.WithTopology(base)))

	var files []trace.File
	for r := range size {
		f, err := trace.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		if f.OtherData == nil || f.OtherData.Rank != r || f.OtherData.Size != size {
			t.Fatalf("rank %d: metadata %+v", r, f.OtherData)
		}
		ops := opsOf(f, r)
		if len(ops) != len(want) {
			t.Fatalf("rank %d: %d operations, want %d: %+v", r, len(ops), len(want), ops)
		}
		for i, e := range ops {
			if e.Args["op"] != want[i] || e.Args["seq"] != float64(i+1) || e.Name != fmt.Sprintf("%s #%d", want[i], i+1) {
				t.Errorf("rank %d op %d: %s %v, want %s seq %d", r, i, e.Name, e.Args, want[i], i+1)
			}
			if i > 0 && e.Ts < ops[i-1].Ts+ops[i-1].Dur {
				t.Errorf("rank %d: op %d starts before op %d ends", r, i, i-1)
			}
		}
		ar := ops[0].Args
		if ar["bytes"] != float64(4096) || ar["dtype"] != "float32" || ar["schedule"] == nil || ar["predicted_us"] == nil {
			t.Errorf("rank %d: AllReduce args %v: want bytes 4096, float32, a schedule and a prediction", r, ar)
		}
		// The rewire's steps are inside it.
		rw := ops[3]
		steps := map[string]bool{}
		for _, e := range f.TraceEvents {
			if e.Cat == "rewire" {
				steps[e.Name] = true
				if e.Name == "pause" {
					if e.Tid != trace.Waits || e.Ts+e.Dur > rw.Ts+0.001+rw.Dur {
						t.Errorf("rank %d: pause %+v: want it on the waits thread, ending as the rewire runs", r, e)
					}
					continue
				}
				if e.Tid != trace.Worker {
					t.Errorf("rank %d: rewire step %s on thread %d", r, e.Name, e.Tid)
				}
				if e.Ts < rw.Ts || e.Ts+e.Dur > rw.Ts+rw.Dur+0.001 {
					t.Errorf("rank %d: rewire step %s [%v, %v] outside the rewire [%v, %v]", r, e.Name, e.Ts, e.Ts+e.Dur, rw.Ts, rw.Ts+rw.Dur)
				}
			}
		}
		for _, s := range []string{"pause", "plan", "switch", "connect", "verify", "resume"} {
			if !steps[s] {
				t.Errorf("rank %d: no rewire step %s (have %v)", r, s, steps)
			}
		}
		files = append(files, f)
	}
	m, err := trace.MergeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for r := range size {
		ops := opsOf(m, r)
		if len(ops) != len(want) {
			t.Fatalf("merged: rank %d has %d operations, want %d", r, len(ops), len(want))
		}
		for i, e := range ops {
			if e.Args["seq"] != float64(i+1) {
				t.Errorf("merged: rank %d op %d has seq %v", r, i, e.Args["seq"])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "flight-rank-0.json")); err == nil {
		t.Error("a flight record was dumped by a healthy run")
	}
}
