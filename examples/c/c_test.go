//go:build linux

package c_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/clib"
	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
)

// The tests build liboccl.so with the documented command
// (go build -buildmode=c-shared -o DIR/liboccl.so ./cgo), compile the C
// programs of this directory against cgo/include/occl.h with gcc, and run
// them as real processes: 4 ranks on 127.0.0.1 started by bench/launch,
// which sets OCCL_RANK, OCCL_WORLD_SIZE and OCCL_UNIQUE_ID for
// occlCommInitFromEnv.

// build is the library and the programs built for this test binary.
var build = clib.Lib{Root: "../..", Pattern: "occl-c", Then: compile}

// programs are the C programs of this directory.
var programs = []string{"allreduce", "alltoallv", "errors", "reconfigure", "grow", "bench"}

// binaries builds the library and the programs once and returns the
// directory holding them; it skips the test without gcc.
func binaries(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the C examples need a C compiler (apt-get install -y gcc)")
	}
	return build.Dir(t)
}

// compile compiles the programs against the library in dir, into dir.
func compile(dir string) error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(programs))
	for i, p := range programs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror",
				"-I", filepath.Join(root, "cgo", "include"), p + ".c",
				"-o", filepath.Join(dir, p), "-L", dir, "-loccl", "-Wl,-rpath," + dir, "-lm"}
			if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	build.Cleanup()
	os.Exit(code)
}

// job runs a C program across np local processes and returns rank 0's
// standard output; it fails the test if any process fails.
func job(t *testing.T, np int, prog string, env []string, args ...string) string {
	t.Helper()
	dir := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	res, err := launch.Run(ctx, launch.Spec{
		NP: np, Path: filepath.Join(dir, prog), Args: args,
		Env:    append([]string{"OCCL_TIMEOUT=60s"}, env...),
		Stdout: &out, Stderr: &errOut,
	})
	if err != nil {
		t.Fatalf("%s: %v %v\nstdout:\n%s\nstderr:\n%s", prog, err, res, out.String(), errOut.String())
	}
	for _, r := range res {
		if r.ExitCode != 0 {
			t.Fatalf("%s: rank %d exit %d\n%s%s", prog, r.Rank, r.ExitCode, out.String(), errOut.String())
		}
	}
	return out.String()
}

// okLines checks that every rank printed its success line.
func okLines(t *testing.T, out string, np int) {
	t.Helper()
	for r := 0; r < np; r++ {
		if !strings.Contains(out, fmt.Sprintf("rank %d", r)) {
			t.Errorf("rank %d printed no success line", r)
		}
	}
	if n := strings.Count(out, ": ok"); n != np {
		t.Fatalf("%d success lines, want %d:\n%s", n, np, out)
	}
}

// TestAllReduce: float32 sums out of place and in place over 1M+3 elements,
// a non-blocking float64 average overlapped with computation, int64 max,
// uint8 min and bfloat16 sums, every element checked by the program.
func TestAllReduce(t *testing.T) {
	out := job(t, 4, "allreduce", nil)
	okLines(t, out, 4)
}

// TestAllToAllv: an uneven all-to-all with its traffic matrix, a ring of
// sends and receives in a group, a split and an all-gather in each part.
func TestAllToAllv(t *testing.T) {
	out := job(t, 4, "alltoallv", nil)
	okLines(t, out, 4)
}

// TestInvalidArguments: null pointers, bad datatype and reduction, negative
// and overflowing counts, out-of-range ranks, destroyed communicator and
// released requests all return occlInvalidArgument with a message.
func TestInvalidArguments(t *testing.T) {
	dir := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "errors"))
	cmd.Env = append(os.Environ(), "OCCL_RANK=", "OCCL_WORLD_SIZE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), ": ok") {
		t.Fatalf("no success line:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestReconfigure: the C harness tags and measures a phase, reads its
// traffic matrix, rewires the communicator to a topology with an optical
// circuit between the two emulated hosts through an OCS controller (the
// emulated switch behind the real gRPC service, in this test process,
// reached through OCCL_OCS_ADDR and OCCL_OCS_TOKEN) and runs the next phase
// on it.
func TestReconfigure(t *testing.T) {
	binaries(t)
	const spec = "hosts=2x2,nics=host,ocs_ports=2,hbd=4GB/s,eps=1GB/s,ocs=1GB/s"
	base, err := topo.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	target, err := topo.FromSpec(spec + ",circuits=0-1")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "target.json")
	if err := os.WriteFile(file, target.JSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const token = "c-abi-test"
	ctl, err := reconfig.StartEmulated(ctx, base.SwitchSize(), 2*time.Millisecond, token)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	out := job(t, 4, "reconfigure", []string{"OCCL_TOPO=" + spec, "OCCL_OCS_ADDR=" + ctl.Addr, "OCCL_OCS_TOKEN=" + token}, file)
	okLines(t, out, 4)
	if !strings.Contains(out, `"tag":"phase0"`) {
		t.Fatalf("no traffic matrix:\n%s", out)
	}
	want, err := reconfig.CrossConnects(target)
	if err != nil {
		t.Fatal(err)
	}
	// The switch now holds the target's circuits.
	got, err := ctl.Switch.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pairs [][2]int
	for _, c := range got {
		pairs = append(pairs, [2]int{min(c.A, c.B), max(c.A, c.B)})
	}
	slices.SortFunc(pairs, func(a, b [2]int) int { return a[0] - b[0] })
	if !slices.Equal(pairs, want) {
		t.Fatalf("switch holds %v, want the target's %v", pairs, want)
	}
}

// TestGrowTopology: 4 processes make a communicator on 2 emulated hosts
// (hosts=2x2, given in occlCommInitRankConfig's config) and grow it by 2
// spares into one on 3 hosts (hosts=3x2, given to occlCommGrowConfig and
// occlJoinConfig); plain occlCommGrow refuses to grow it. Every rank of the
// grown communicator checks an all-reduce on it and prints its topology,
// which must have the 6 ranks on 3 hosts, 2 by 2.
func TestGrowTopology(t *testing.T) {
	growID, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := job(t, 6, "grow", nil, growID.String(), "4", "hosts=2x2", "hosts=3x2")
	okLines(t, out, 6)
	lines := regexp.MustCompile(`(?m)rank (\d+): topology (.*)$`).FindAllStringSubmatch(out, -1)
	if len(lines) != 6 {
		t.Fatalf("%d ranks printed their topology, want 6:\n%s", len(lines), out)
	}
	for _, l := range lines {
		tp, err := topo.Parse([]byte(l[2]))
		if err != nil {
			t.Fatalf("rank %s: topology %q: %v", l[1], l[2], err)
		}
		if len(tp.Ranks) != 6 || len(tp.Hosts) != 3 {
			t.Fatalf("rank %s: the grown topology has %d ranks on %d hosts, want 6 on 3:\n%s", l[1], len(tp.Ranks), len(tp.Hosts), l[2])
		}
		for r, rk := range tp.Ranks {
			if rk.Host != r/2 {
				t.Fatalf("rank %s: rank %d of the grown topology is on host %d, want %d", l[1], r, rk.Host, r/2)
			}
		}
	}
}

// TestBench runs the C benchmark on a small size, checked (a wrong element
// makes it exit 1), for both operations and the three ways of calling
// (non-blocking back to back, blocking, non-blocking then wait), as a smoke
// test of its output (TestBusBWVersusGo measures).
func TestBench(t *testing.T) {
	for _, op := range []string{"allreduce", "alltoall"} {
		for _, blocking := range []string{"0", "1", "2"} {
			out := job(t, 4, "bench", nil, "-o", op, "-b", "1M", "-n", "3", "-w", "1", "-B", blocking)
			if _, _, err := parseBusBW(out); err != nil {
				t.Fatalf("%s -B %s: %v\n%s", op, blocking, err, out)
			}
			t.Logf("%s -B %s:\n%s", op, blocking, out)
		}
	}
}

func parseBusBW(out string) (float64, float64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line) // "[0] busbw_GBps A B" (rank prefix of launch)
		if i := slices.Index(f, "busbw_GBps"); i >= 0 && i+2 < len(f) {
			a, err1 := strconv.ParseFloat(f[i+1], 64)
			b, err2 := strconv.ParseFloat(f[i+2], 64)
			if err1 == nil && err2 == nil {
				return a, b, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no busbw_GBps line")
}

// TestBusBWVersusGo compares the all-reduce bus bandwidth through the C ABI
// (bench.c) with the Go API's (occl-bench) on 64 MiB float32 across 4
// processes, alternating the two so that both see the same machine noise,
// and reports the medians. It takes a minute, so it runs only with
// OCCL_BENCH_COMPARE=1 (OCCL_BENCH_RUNS sets the runs per side, default 5;
// OCCL_BENCH_MIN_RATIO the ratio below which it fails, default 0.95;
// OCCL_BENCH_AFFINITY=0 runs both sides without CPU binding;
// OCCL_BENCH_ALIGN the alignment of the C buffers, default 4096, 0 for
// plain malloc). The runs alternate which side goes first; the verdict is
// on the median of the per-run ratios, which cancels most of the drift of
// a shared machine:
//
//	OCCL_BENCH_COMPARE=1 go test -run BusBW -v ./examples/c
func TestBusBWVersusGo(t *testing.T) {
	if os.Getenv("OCCL_BENCH_COMPARE") != "1" {
		t.Skip("set OCCL_BENCH_COMPARE=1 to measure the C ABI against the Go API")
	}
	binaries(t) // the C programs job runs
	goBench := proctest.Build(t, "../../bench/cmd/occl-bench")
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("OCCL_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	minRatio := 0.95
	if v, err := strconv.ParseFloat(os.Getenv("OCCL_BENCH_MIN_RATIO"), 64); err == nil {
		minRatio = v
	}
	// Both sides bind each rank to its share of the CPUs, occl-bench's
	// default, unless OCCL_BENCH_AFFINITY=0.
	affinity := os.Getenv("OCCL_BENCH_AFFINITY") != "0"
	cEnv := []string{"OCCL_AFFINITY=auto"}
	if !affinity {
		cEnv = []string{"OCCL_AFFINITY=off"}
	}
	var cOut, cIn, goOut, goIn, rOut, rIn []float64
	for i := 0; i < runs; i++ {
		cRun := func() {
			out := job(t, 4, "bench", cEnv, "-b", "64M", "-n", "20", "-w", "5", "-c", "1", "-a", cmp.Or(os.Getenv("OCCL_BENCH_ALIGN"), "4096"))
			a, b, err := parseBusBW(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			cOut, cIn = append(cOut, a), append(cIn, b)
		}
		goRun := func() {
			a, b := goBusBW(t, goBench, affinity)
			goOut, goIn = append(goOut, a), append(goIn, b)
		}
		// Alternate which side goes first, so that neither always follows
		// the other.
		if i%2 == 0 {
			cRun()
			goRun()
		} else {
			goRun()
			cRun()
		}
		rOut, rIn = append(rOut, cOut[i]/goOut[i]), append(rIn, cIn[i]/goIn[i])
		t.Logf("run %d: C %.3f / %.3f GB/s, Go %.3f / %.3f GB/s (out of place / in place), ratio %.3f / %.3f",
			i, cOut[i], cIn[i], goOut[i], goIn[i], rOut[i], rIn[i])
	}
	t.Logf("median busbw over %d runs: C ABI %.3f GB/s out of place, %.3f in place; Go API %.3f, %.3f",
		runs, median(cOut), median(cIn), median(goOut), median(goIn))
	t.Logf("best busbw: C ABI %.3f, %.3f; Go API %.3f, %.3f", slices.Max(cOut), slices.Max(cIn), slices.Max(goOut), slices.Max(goIn))
	mo, mi := median(rOut), median(rIn)
	t.Logf("median of the paired ratios C/Go: %.3f out of place, %.3f in place", mo, mi)
	if mo < minRatio || mi < minRatio {
		t.Errorf("the C ABI reaches %.3f / %.3f of the Go API's bus bandwidth, below %.2f", mo, mi, minRatio)
	}
}

// goBusBW runs occl-bench -op allreduce -b 64M -e 64M -np 4 -json and
// returns its out-of-place and in-place bus bandwidths.
func goBusBW(t *testing.T, bin string, affinity bool) (float64, float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-op", "allreduce", "-b", "64M", "-e", "64M", "-np", "4", "-n", "20", "-w", "5", "-c", "1", "-json", "-quiet", "-affinity="+strconv.FormatBool(affinity))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("occl-bench: %v\n%s%s", err, out, stderr.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		var r struct {
			BusBW        float64 `json:"busbw_GBps"`
			InPlaceBusBW float64 `json:"inplace_busbw_GBps"`
			Wrong        int64   `json:"wrong"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.BusBW > 0 {
			if r.Wrong != 0 {
				t.Fatalf("occl-bench found %d wrong elements", r.Wrong)
			}
			return r.BusBW, r.InPlaceBusBW
		}
	}
	t.Fatalf("no busbw in occl-bench output:\n%s", out)
	return 0, 0
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
