package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
)

func TestSizes(t *testing.T) {
	got, err := Sizes(8, 64, 2, 0)
	if err != nil || len(got) != 4 || got[0] != 8 || got[3] != 64 {
		t.Fatalf("Sizes(8,64,x2) = %v %v", got, err)
	}
	got, _ = Sizes(0, 4, 2, 0)
	if len(got) != 4 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("Sizes(0,4,x2) = %v", got)
	}
	got, _ = Sizes(10, 35, 0, 10)
	if len(got) != 3 || got[2] != 30 {
		t.Fatalf("Sizes(10,35,+10) = %v", got)
	}
	if _, err := Sizes(64, 8, 2, 0); err == nil {
		t.Fatal("inverted range accepted")
	}
	if _, err := Sizes(8, 64, 1, 0); err == nil {
		t.Fatal("factor 1 accepted")
	}
}

func TestLayoutAndBusFactor(t *testing.T) {
	// nccl-tests: AllGather's size is the output; ReduceScatter's the input.
	l := AllGather.Layout(1000, 4, 3)
	if l.SendCount != 83 || l.RecvCount != 249 || l.Bytes != 996 {
		t.Fatalf("allgather layout %+v", l)
	}
	l = ReduceScatter.Layout(1000, 4, 3)
	if l.SendCount != 249 || l.RecvCount != 83 || l.Bytes != 996 {
		t.Fatalf("reducescatter layout %+v", l)
	}
	if f := AllReduce.BusFactor(4); f != 1.5 {
		t.Fatalf("allreduce factor %v", f)
	}
	if f := AllToAll.BusFactor(4); f != 0.75 {
		t.Fatalf("alltoall factor %v", f)
	}
	if f := Broadcast.BusFactor(8); f != 1 {
		t.Fatalf("broadcast factor %v", f)
	}
	if op, err := ParseOp("all_reduce_perf"); err != nil || op != AllReduce {
		t.Fatalf("ParseOp = %v %v", op, err)
	}
}

// TestRunnerChecksEveryOp runs every operation through the runner with the
// result check on, in process: no wrong element may be reported.
func TestRunnerChecksEveryOp(t *testing.T) {
	for _, op := range Ops() {
		for _, dt := range []algo.DType{algo.Float32, algo.BFloat16, algo.Int8} {
			comms, err := comm.NewLocal(3)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			results := make([]Result, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Each dtype issues its iterations another way (-z 0, 2, 1).
					cfg := Config{Op: op, DType: dt, RedOp: algo.Max, Root: 1, Iters: 3, Warmup: 1, Check: true, Issue: issueFor(dt)}
					run, err := NewRunner(c, cfg, 1<<16)
					if err != nil {
						errs[r] = err
						return
					}
					for _, size := range []int{0, 24, 1 << 16} {
						if results[r], errs[r] = run.Run(ctx, size); errs[r] != nil {
							return
						}
						if results[r].Wrong != 0 || (op.HasInPlace() && results[r].InPlaceWrong != 0) {
							return
						}
					}
				}()
			}
			wg.Wait()
			cancel()
			for _, c := range comms {
				c.Close()
			}
			for r := range errs {
				if errs[r] != nil {
					t.Fatalf("%s %s rank %d: %v", op, dt, r, errs[r])
				}
				if res := results[r]; res.Wrong != 0 || (op.HasInPlace() && res.InPlaceWrong != 0) {
					t.Fatalf("%s %s rank %d: %d wrong out of place, %d in place", op, dt, r, res.Wrong, res.InPlaceWrong)
				}
			}
			if op != Barrier && (results[0].TimeUS <= 0 || results[0].Wrong < 0) {
				t.Fatalf("%s: no measurement: %+v", op, results[0])
			}
		}
	}
}

func TestTableAndJSON(t *testing.T) {
	var buf bytes.Buffer
	tab := NewTable(&buf)
	tab.Header()
	tab.Row(Result{Bytes: 1024, Count: 256, RedOp: "sum", Root: -1, TimeUS: 12.5, AlgBW: 0.08, BusBW: 0.12, Wrong: 0, InPlaceTimeUS: 11, InPlaceWrong: 0}, "float")
	tab.Row(Result{Bytes: 2048, Count: 512, RedOp: "sum", Root: -1, TimeUS: 20, BusBW: 0.2, Wrong: 3}, "float")
	if wrong := tab.Footer(); wrong != 3 {
		t.Fatalf("footer counted %d wrong", wrong)
	}
	out := buf.String()
	for _, want := range []string{"out-of-place", "#wrong", "  1024  ", "N/A", "Out of bounds values : 3 FAILED", "Avg bus bandwidth"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	buf.Reset()
	WriteJSON(&buf, Result{Impl: "occl", Op: AllReduce, NP: 2, Bytes: 8, BusBW: 1.5, Wrong: -1})
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"impl", "op", "np", "bytes", "count", "dtype", "algo", "transport", "time_us", "algbw_GBps", "busbw_GBps", "wrong"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, buf.String())
		}
	}
}

// issueFor spreads the ways of issuing over the dtypes the tests run.
func issueFor(dt algo.DType) Issue {
	switch dt {
	case algo.Int8:
		return Blocking
	case algo.BFloat16:
		return AsyncWait
	}
	return Batch
}

// TestWarmupTime warms up a size whose iterations take less than
// WarmupTime: the warm-up goes on until it has passed, and the ranks run
// the same number of extra iterations even when they ask for different
// numbers (here rank 0 wants 60 ms of warm-up, rank 1 none beyond
// Warmup). Rank 1 starts 30 ms late, so rank 0's first iterations are far
// slower than the rest: a warm-up that took their pace for the whole would
// end after about 30 ms. A checked Run follows, with both ranks' warm-ups.
func TestWarmupTime(t *testing.T) {
	const warmup, late = 60 * time.Millisecond, 30 * time.Millisecond
	comms := commtest.Local(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var took time.Duration
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Op: AllReduce, DType: algo.Float32, RedOp: algo.Sum, Iters: 2, Warmup: 2, Check: true, Issue: Batch}
			if r == 0 {
				cfg.WarmupTime = warmup
			}
			run, err := NewRunner(c, cfg, 64)
			if err != nil {
				errs[r] = err
				return
			}
			send, recv := run.buffers(cfg.Op.Layout(64, run.es, c.Size()), false)
			if r == 1 {
				time.Sleep(late)
			}
			start := time.Now()
			if errs[r] = run.warmUp(ctx, send, recv); errs[r] != nil {
				return
			}
			if r == 0 {
				took = time.Since(start)
			}
			var res Result
			if res, errs[r] = run.Run(ctx, 64); errs[r] == nil && (res.Wrong != 0 || res.InPlaceWrong != 0) {
				errs[r] = fmt.Errorf("%d wrong out of place, %d in place", res.Wrong, res.InPlaceWrong)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if took < warmup {
		t.Errorf("rank 0's warm-up took %v, less than its warm-up time %v", took, warmup)
	}
}

// TestRunnerKeepsRequestsForBatchOnly: a runner whose operations are
// each waited for keeps no slice of requests, however many iterations it
// runs (a million would take 8 MB); a batch keeps room for its largest.
func TestRunnerKeepsRequestsForBatchOnly(t *testing.T) {
	c := commtest.Local(t, 1)[0]
	for _, issue := range []Issue{Blocking, AsyncWait, Batch} {
		run, err := NewRunner(c, Config{Op: AllReduce, DType: algo.Float32, RedOp: algo.Sum, Iters: 1 << 20, Warmup: 3, Issue: issue}, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1 << 20}[issue == Batch]; cap(run.reqs) != want {
			t.Errorf("issue %v: room for %d requests, want %d", issue, cap(run.reqs), want)
		}
	}
}
