package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLatencyOf(t *testing.T) {
	us := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Microsecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 .. 1, unsorted
	}
	thousand := make([]int, 1000)
	for i := range thousand {
		thousand[i] = 1
	}
	thousand[3], thousand[500] = 40, 7 // 998 ones, a 7 and a 40
	for _, tc := range []struct {
		name string
		d    []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", us(5), Latency{5, 5, 5}},
		{"two", us(9, 1), Latency{1, 9, 9}},
		{"1..100", us(hundred...), Latency{50, 99, 100}},
		{"tail of two in 1000", us(thousand...), Latency{1, 1, 40}},
		{"odd count", us(3, 1, 2), Latency{2, 3, 3}},
	} {
		if got := latencyOf(tc.d); got != tc.want {
			t.Errorf("%s: latencyOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestMPIBenchLatencyOf: mpi_bench.c's -latency (latency_of in
// bench/peers/latency.h, built here with gcc alone) reports the figures
// latencyOf does, so that the two benchmarks' latency columns mean the
// same.
func TestMPIBenchLatencyOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var sets [][]time.Duration
	for _, n := range []int{1, 2, 3, 99, 100, 101, 1000, 4999} {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(100 + rng.IntN(1000))
			if rng.IntN(50) == 0 {
				d[i] *= 1000 // a stall
			}
		}
		sets = append(sets, d)
	}
	var src strings.Builder
	src.WriteString("#include \"latency.h\"\n#include <stdio.h>\nstatic void show(double *t, int n) {\n" +
		"\tdouble out[3];\n\tlatency_of(t, n, out);\n\tprintf(\"%.0f %.0f %.0f\\n\", out[0], out[1], out[2]);\n}\nint main(void) {\n")
	for i, d := range sets {
		fmt.Fprintf(&src, "\tstatic double t%d[] = {", i)
		for _, v := range d {
			fmt.Fprintf(&src, "%d,", v.Nanoseconds())
		}
		fmt.Fprintf(&src, "};\n\tshow(t%d, %d);\n", i, len(d))
	}
	lines := runPeersC(t, src.String(), len(sets))
	for i, d := range sets {
		l := latencyOf(append([]time.Duration(nil), d...))
		want := fmt.Sprintf("%.0f %.0f %.0f", l.P50US*1e3, l.P99US*1e3, l.MaxUS*1e3)
		if lines[i] != want {
			t.Errorf("%d values: latency_of gives %s ns, latencyOf %s", len(d), lines[i], want)
		}
	}
}

// TestMPIBenchLatency runs mpi_bench -latency across 2 processes on
// Open MPI's shared-memory transport: every size reports a distribution
// consistent with itself and with the mean, as occl-bench's does.
func TestMPIBenchLatency(t *testing.T) {
	requireCompareTools(t)
	bin := filepath.Join(t.TempDir(), "mpi_bench")
	if out, err := exec.Command("mpicc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, "peers/mpi_bench.c", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	out, err := exec.Command("mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "btl", "self,vader",
		"--mca", "oob_tcp_if_include", "lo", bin, "-op", "alltoall", "-b", "32", "-e", "32K", "-f", "32", "-n", "300", "-w", "5", "-latency").Output()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Bytes int     `json:"bytes"`
			Time  float64 `json:"time_us"`
			Lat   *struct {
				P50 float64 `json:"p50_us"`
				P99 float64 `json:"p99_us"`
				Max float64 `json:"max_us"`
			} `json:"latency"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if d := r.Lat; d == nil || d.P50 <= 0 || d.P50 > d.P99 || d.P99 > d.Max || r.Time > d.Max {
			t.Fatalf("%d B: mean %v us, latency %+v", r.Bytes, r.Time, d)
		}
		lines++
	}
	if lines != 3 {
		t.Fatalf("%d results, want 3 (32 B, 1 KiB, 32 KiB):\n%s", lines, out)
	}
}
