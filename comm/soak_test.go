package comm_test

// A soak: thousands of random collectives, each verified against the
// reference, across 4 processes (two emulated hosts of two ranks: shared
// memory inside, TCP across), with the processes' resident memory, open
// files and goroutines measured after a warm-up and at the end.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
)

func init() {
	// The ranks of TestSoak run the soak instead of the tests.
	if os.Getenv("OCCL_TEST_SOAK") != "" {
		if err := soakWorker(); err != nil {
			fmt.Printf("FAIL %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// usage is what a process holds: resident memory, open files, goroutines.
// live is the resident memory less the free pages of the Go heap that the
// runtime keeps mapped for reuse (after a forced return of free memory to
// the system, a few MiB it does not give back, varying from one
// measurement to the next).
type usage struct{ rss, live, fds, goroutines int }

func (u usage) max(v usage) usage {
	return usage{max(u.rss, v.rss), max(u.live, v.live), max(u.fds, v.fds), max(u.goroutines, v.goroutines)}
}

// measure collects garbage, returns freed memory to the system and reads
// the process's usage: its resident memory, and what is still referenced
// (live): the Go heap's objects after the collection, the goroutines'
// stacks and the shared memory the process has touched (its rings). live
// leaves out what the resident size also holds but a leak would not grow:
// the executable's pages as code runs for the first time, and the heap's
// free pages, which the runtime returns to the system in its own time (the
// heap's idle pages not yet released after FreeOSMemory varied between 0.25
// and 5.4 MiB from one sample to the next with no change in use).
func measure() (usage, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var u usage
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return u, err
	}
	var shmem int
	for _, line := range strings.Split(string(status), "\n") {
		for _, f := range []struct {
			name string
			to   *int
		}{{"VmRSS:", &u.rss}, {"RssShmem:", &shmem}} {
			if v, ok := strings.CutPrefix(line, f.name); ok {
				kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				if err != nil {
					return u, fmt.Errorf("%s %q: %w", f.name, v, err)
				}
				*f.to = kb << 10
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u.live = int(ms.HeapAlloc+ms.StackInuse) + shmem
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return u, err
	}
	u.fds, u.goroutines = len(fds), runtime.NumGoroutine()
	return u, nil
}

// soakMax is the largest count of a soak operation, soakKinds the number
// of kinds of operation (the last is Split).
const soakMax, soakKinds = 512 << 10, 12

// soakLargest is the number of operations of the warm-up's sweep at
// soakMax: every kind in place and out of place, with roots 0 and 1, so
// that every rank has run the largest operation of each kind in each of
// its roles, whose buffers can differ in size (a Reduce by the tree or
// the ring copies the input of every rank but the root into its
// workspace, for one). soakSweep is the number of operations of the whole
// sweep, of which a run does as many as its first eighth holds.
const (
	soakLargest = 4 * soakKinds
	soakSweep   = soakLargest + 8*soakKinds
)

// soakOp runs one random collective, drawn from rng (the same sequence on
// every rank), on c and verifies it. A Split draws the ops its children
// run from rng too. With sweep >= 0, the op is the sweep-th of the
// warm-up's sweep instead: every kind at counts from soakMax (in every
// mode: see soakLargest) down to soakMax/256, with an 8-byte dtype.
func soakOp(ctx context.Context, c *comm.Communicator, rng *rand.Rand, depth int, sweep int) (string, error) {
	dtypes, ops := allDTypes(), allOps()
	dt := dtypes[rng.IntN(len(dtypes))]
	op := ops[rng.IntN(len(ops))]
	var n int
	switch p := rng.IntN(100); {
	case sweep >= 0:
		n = soakMax
		if sweep >= soakLargest {
			n >>= 1 + (sweep-soakLargest)/soakKinds
		}
		dt = [...]comm.DType{comm.Float64, comm.Uint64}[rng.IntN(2)]
	case p < 90:
		n = rng.IntN(2049)
	case p < 99:
		n = 2048 + rng.IntN(62<<10)
	default:
		n = 64<<10 + rng.IntN(soakMax-64<<10)
	}
	root := rng.IntN(c.Size())
	k := checker{ctx: ctx, c: c, async: rng.IntN(2) == 0}
	inPlace := rng.IntN(2) == 0
	kinds := soakKinds
	if depth > 0 {
		kinds-- // no Split of a Split child
	}
	kind := rng.IntN(kinds)
	if sweep >= 0 {
		kind = sweep % kinds
		if sweep < soakLargest {
			inPlace, root = sweep/kinds%2 == 0, sweep/kinds/2
		}
	}
	what := fmt.Sprintf("kind %d %s %s n=%d root=%d async=%v inplace=%v", kind, dt, op, n, root, k.async, inPlace)
	switch kind {
	case 0:
		return what, k.allReduce(dt, op, n, inPlace)
	case 1:
		return what, k.reduce(dt, op, n, root, inPlace)
	case 2:
		return what, k.broadcast(dt, n, root, inPlace)
	case 3:
		return what, k.allGather(dt, n/c.Size(), inPlace)
	case 4:
		return what, k.reduceScatter(dt, op, n/c.Size(), inPlace)
	case 5:
		return what, k.allToAll(dt, n/c.Size(), inPlace)
	case 6:
		return what, k.allToAllV(dt, n/c.Size())
	case 7:
		return what, k.gather(dt, n/c.Size(), root)
	case 8:
		return what, k.scatter(dt, n/c.Size(), root)
	case 9:
		return what, k.sendRecv(dt, n)
	case 10:
		return what, c.Barrier(ctx)
	}
	// Split into two children (by parity, in reverse order), run three
	// random collectives on each, and close them.
	what = "Split"
	sub, err := c.Split(ctx, c.Rank()%2, -c.Rank())
	if err != nil {
		return what, err
	}
	defer sub.Close()
	for i := range 3 {
		w, err := soakOp(ctx, sub, rng, depth+1, -1)
		if err != nil {
			return fmt.Sprintf("Split child op %d: %s", i, w), err
		}
	}
	return what, nil
}

// soakWorker runs OCCL_SOAK_N random collectives with seed OCCL_SOAK_SEED
// and prints its usage after the warm-up and at the end.
func soakWorker() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	total, err := strconv.Atoi(os.Getenv("OCCL_SOAK_N"))
	if err != nil {
		return err
	}
	seed, err := strconv.ParseUint(os.Getenv("OCCL_SOAK_SEED"), 10, 64)
	if err != nil {
		return err
	}
	c, err := comm.InitFromEnv(ctx, comm.WithTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 0))
	// The warm-up is the first quarter of the operations. Usage is
	// sampled every 64th of the run; what is compared is the most of the
	// samples in the warm-up's second half and the most of those in the
	// last eighth of the run.
	var warm, end usage
	peak := func(u *usage) error {
		m, err := measure()
		*u = u.max(m)
		return err
	}
	step := max(total/64, 1)
	for i := range total {
		switch {
		case i%step != 0:
		case i >= total/8 && i <= total/4:
			err = peak(&warm)
		case i >= total-total/8:
			err = peak(&end)
		}
		if err != nil {
			return err
		}
		// The warm-up starts with a sweep of every kind of operation
		// over the sizes, so that the buffers of every schedule reach
		// the size they keep.
		sweep := -1
		if i < soakSweep && i < total/8 {
			sweep = i
		}
		if what, err := soakOp(ctx, c, rng, 0, sweep); err != nil {
			return fmt.Errorf("rank %d: op %d of %d (seed %d): %s: %w", c.Rank(), i, total, seed, what, err)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := peak(&end); err != nil {
		return err
	}
	fmt.Printf("SOAK rank=%d ops=%d rss=%d,%d live=%d,%d fds=%d,%d goroutines=%d,%d\n",
		c.Rank(), total, warm.rss, end.rss, warm.live, end.live, warm.fds, end.fds, warm.goroutines, end.goroutines)
	return nil
}

// soakSlack is the growth of referenced memory (see measure) TestSoak
// always accepts: without a leak it grew by at most 0.35 MiB in runs of
// 1,000 and 6,000 operations, while a leak of 6 KiB per operation of a
// default run exceeds it.
const soakSlack = 4 << 20

// TestSoak runs random verified collectives (random op, size, dtype, root,
// blocking or async, in place or not, and Splits whose children run some
// too) across 4 processes: every result must match the reference, and
// after the first quarter of the operations (the warm-up, which starts
// with the largest operations) the memory each process still references
// (see measure) may grow by less than 10% (or soakSlack), its open files
// and goroutines by no more than a few, comparing the most measured in the
// warm-up's second half with the most measured in the last eighth of the
// run (not under the race detector, whose shadow memory grows with every
// allocation). 1,000 operations by default, 300 under -short and 100
// under the race detector (CI's race run, which checks the results but not
// the memory; the run without it does the 1,000);
// OCCL_SOAK_OPS sets the count (the long form is OCCL_SOAK_OPS=10000) and
// OCCL_SOAK_SEED the seed (default: random, logged).
func TestSoak(t *testing.T) {
	total := 1000
	switch {
	case raceEnabled:
		total = 100
	case testing.Short():
		total = 300
	}
	if v := os.Getenv("OCCL_SOAK_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			t.Fatalf("OCCL_SOAK_OPS=%q: want a count of at least 4", v)
		}
		total = n
	}
	seed := rand.Uint64()
	if v := os.Getenv("OCCL_SOAK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("OCCL_SOAK_SEED=%q: %v", v, err)
		}
	}
	t.Logf("%d operations, OCCL_SOAK_SEED=%d", total, seed)
	const np = 4
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	start := time.Now()
	_, err := launch.Run(ctx, launch.Spec{
		NP: np, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:     []string{"OCCL_TEST_SOAK=1", fmt.Sprintf("OCCL_SOAK_N=%d", total), fmt.Sprintf("OCCL_SOAK_SEED=%d", seed)},
		RankEnv: func(r int) []string { return []string{fmt.Sprintf("OCCL_HOSTID=soakhost%d", r/2)} },
		Stdout:  &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("soak (OCCL_SOAK_SEED=%d): %v\n%s", seed, err, out.String())
	}
	t.Logf("%d operations in %v", total, time.Since(start).Round(time.Millisecond))
	seen := 0
	for _, line := range strings.Split(out.String(), "\n") {
		_, rest, ok := strings.Cut(line, "SOAK ")
		if !ok {
			continue
		}
		seen++
		var rank, ops int
		var w, e usage
		if _, err := fmt.Sscanf(rest, "rank=%d ops=%d rss=%d,%d live=%d,%d fds=%d,%d goroutines=%d,%d",
			&rank, &ops, &w.rss, &e.rss, &w.live, &e.live, &w.fds, &e.fds, &w.goroutines, &e.goroutines); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		t.Logf("rank %d: resident %d -> %d KiB (referenced: heap objects, stacks and shared memory %d -> %d KiB), %d -> %d files, %d -> %d goroutines",
			rank, w.rss>>10, e.rss>>10, w.live>>10, e.live>>10, w.fds, e.fds, w.goroutines, e.goroutines)
		if ops != total || w.live <= 0 {
			t.Errorf("rank %d: %q", rank, line)
		}
		if e.live-w.live >= max(w.live/10, soakSlack) && !raceEnabled {
			t.Errorf("rank %d: referenced memory (heap objects, stacks, shared memory) grew from %d to %d KiB after the warm-up (%.1f%%)",
				rank, w.live>>10, e.live>>10, 100*float64(e.live-w.live)/float64(w.live))
		}
		if e.fds > w.fds+4 || e.goroutines > w.goroutines+16 {
			t.Errorf("rank %d: open files %d -> %d, goroutines %d -> %d after the warm-up", rank, w.fds, e.fds, w.goroutines, e.goroutines)
		}
	}
	if seen != np {
		t.Fatalf("%d of %d ranks reported usage:\n%s", seen, np, out.String())
	}
	if bytes.Contains([]byte(out.String()), []byte("FAIL")) {
		t.Fatalf("output:\n%s", out.String())
	}
}
