package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/internal/pyvenv"
)

// compareScript is bench/peers/compare.py, relative to this package.
const compareScript = "peers/compare.py"

// runCompare runs compare.py under /usr/bin/python3 from the repository root
// and returns its standard output.
func runCompare(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	pyvenv.Require(t)
	return mustRunScript(t, pyvenv.System, compareScript, limit, nil, args...)
}

// requireCompareTools skips t unless go, mpirun and mpicc are installed;
// where CI sets pyvenv.RequireEnv (it installs Open MPI), a missing tool
// fails it instead.
func requireCompareTools(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv(pyvenv.RequireEnv) == "1" {
		skip = t.Fatalf
	}
	for _, tool := range []string{"go", "mpirun", "mpicc"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s not found: the comparison needs it (apt-get install -y openmpi-bin libopenmpi-dev)", tool)
		}
	}
}

// markdownRows returns the cells of every data row of the Markdown tables
// in out, keyed by their first three cells ("op np bytes").
func markdownRows(out string) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) < 3 || cells[0] == "op" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows[cells[0]+" "+cells[1]+" "+cells[2]] = cells
	}
	return rows
}

// TestCompareTableRatios prints the grid table of a synthetic run and checks
// the medians, the ratios time(peer)/time(occl), the best peer, the spread
// over rounds and the worst point of every ratio against values worked out
// by hand from testdata/compare-grid.jsonl:
//
//	alltoall np=2 32 B (3 rounds of occl-shm 10 12 30 and mpi-shm 2 3 4; one
//	of occl-tcp 50, gloo 1000, mpi-tcp 40): medians 12 and 3, so
//	occl-shm/best = 3/12 = 0.25 (mpi-shm), occl-tcp/mpi-tcp = 40/50 = 0.80,
//	occl-tcp/gloo = 1000/50 = 20, spreads 30/10 = 3 and 4/2 = 2.
//	alltoall np=2 64 MiB (occl-shm 1000, occl-tcp 4000, gloo 6000, mpi-tcp
//	8000, mpi-shm 2000): 2.00 mpi-shm, 2.00, 2.00, 1.50.
//	reducescatter np=2 1 KiB (occl-shm 10 in three rounds, occl-tcp 30,
//	mpi-tcp 15, mpi-shm 40 in two, no gloo): best is mpi-tcp, 1.50; 4.00;
//	0.50; no occl/gloo ratio; spreads 1.00.
//	allreduce np=4 8 B (occl-shm 5, occl-tcp 4, gloo 500, mpi-tcp 20, mpi-shm
//	8): the fastest other column is occl-tcp, 0.80; 1.60; 5.00.
//
// Only alltoall np=2 32 B has rounds to pair (occl-shm slower than mpi-shm
// in all three), so every ratio of occl-shm counts one point slower in every
// round, with 1/8 expected by chance, and the others count none: the
// records carry no round, and at reducescatter the three rounds of
// occl-shm and two of mpi-shm cannot be paired.
func TestCompareTableRatios(t *testing.T) {
	out := runCompare(t, time.Minute, "--table", "bench/testdata/compare-grid.jsonl", "--markdown")
	// op, np, bytes, occl-tcp, occl-shm, gloo, mpi-tcp, mpi-shm,
	// occl-shm/best, occl-shm/mpi-shm, occl-tcp/mpi-tcp, occl-tcp/gloo,
	// spread occl-shm, spread mpi-shm.
	want := [][]string{
		{"alltoall", "2", "32B*", "50.0", "12.0", "1000", "40.0", "3.000", "0.25x mpi-shm", "0.25x", "0.80x", "20.00x", "3.00", "2.00"},
		{"alltoall", "2", "64MiB", "4000", "1000", "6000", "8000", "2000", "2.00x mpi-shm", "2.00x", "2.00x", "1.50x", "", ""},
		{"reducescatter", "2", "1KiB", "30.0", "10.0", "-", "15.0", "40.0", "1.50x mpi-tcp", "4.00x", "0.50x", "", "1.00", "1.00"},
		{"allreduce", "4", "8B", "4.000", "5.000", "500.0", "20.0", "8.000", "0.80x occl-tcp", "1.60x", "5.00x", "", "", ""},
	}
	checkGridTable(t, out, want, []string{
		"worst occl-shm/best: 0.25x at alltoall np=2 32B (vs mpi-shm)",
		"worst occl-shm/mpi-shm: 0.25x at alltoall np=2 32B (vs mpi-shm)",
		"worst occl-tcp/mpi-tcp: 0.50x at reducescatter np=2 1KiB (vs mpi-tcp)",
		"worst occl-tcp/gloo: 1.50x at alltoall np=2 64MiB (vs gloo)",
		"occl-shm/best: slower in every round at 1 of 1 points (0.12 expected by chance alone): alltoall np=2 32B\n",
		"occl-shm/mpi-shm: slower in every round at 1 of 1 points (0.12 expected by chance alone): alltoall np=2 32B\n",
		"median of up to 3 round(s)",
		"16 B x np (32 B at np=2, 64 B at np=4)",
	})
	for _, r := range []string{"occl-tcp/mpi-tcp: slower", "occl-tcp/gloo: slower"} {
		if strings.Contains(out, r) {
			t.Errorf("output counts rounds of a ratio without two paired rounds (%q):\n%s", r, out)
		}
	}
}

// checkGridTable checks the Markdown grid table out: each row of want
// (keyed by its first three cells) has exactly those cells, and out has
// every one of lines.
func checkGridTable(t *testing.T, out string, want [][]string, lines []string) {
	t.Helper()
	rows := markdownRows(out)
	for _, w := range want {
		key := strings.Join(w[:3], " ")
		got, ok := rows[key]
		if !ok {
			t.Errorf("no row %q in:\n%s", key, out)
			continue
		}
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("row %q:\n got %q\nwant %q", key, got, w)
		}
	}
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

// TestCompareTableBaseline checks the grid table of a run with a baseline
// build (bench/testdata/compare-baseline.jsonl, hand-made): its columns
// base-tcp and base-shm, the ratios occl-shm/base-shm and occl-tcp/base-tcp
// and the spread of base-shm, while occl-shm/best still takes the fastest
// peer only.
//
//	alltoall np=2 32 B: occl-shm 10, base-shm 6, 10, 8 over three rounds
//	(median 8: 0.80; spread 10/6), mpi-shm 12, occl-tcp 50, base-tcp 55
//	(1.10), mpi-tcp 40.
//	allreduce np=4 8 B: occl-shm 5, base-shm 6 (1.20), mpi-shm 8, occl-tcp 4,
//	base-tcp 2 (0.50, faster than any peer but no peer: best is occl-tcp,
//	0.80), mpi-tcp 20.
//
// Rounds, all at alltoall np=2 32 B: occl-shm 10 10 10 against base-shm
// 6 10 8 is slower in two rounds and even in one, so not in every round;
// occl-tcp 50 70 50 (median 50) is slower than mpi-tcp's 40 in all three.
// occl-tcp's and base-tcp's records carry their round, and base-tcp ran
// rounds 1 and 3 only (45 and 65, median 55): paired by round, occl-tcp is
// slower in round 1 only (by their order, rounds 1 and 2, it would be
// slower in both).
func TestCompareTableBaseline(t *testing.T) {
	out := runCompare(t, time.Minute, "--table", "bench/testdata/compare-baseline.jsonl", "--markdown")
	// op, np, bytes, occl-tcp, occl-shm, gloo, mpi-tcp, mpi-shm, base-tcp,
	// base-shm, occl-shm/best, occl-shm/mpi-shm, occl-tcp/mpi-tcp,
	// occl-tcp/gloo, occl-shm/base-shm, occl-tcp/base-tcp, spread
	// occl-shm, spread mpi-shm, spread base-shm.
	want := [][]string{
		{"alltoall", "2", "32B*", "50.0", "10.0", "-", "40.0", "12.0", "55.0", "8.000", "1.20x mpi-shm", "1.20x", "0.80x", "-", "0.80x", "1.10x", "1.00", "1.00", "1.67"},
		{"allreduce", "4", "8B", "4.000", "5.000", "-", "20.0", "8.000", "2.000", "6.000", "0.80x occl-tcp", "1.60x", "5.00x", "", "1.20x", "0.50x", "", "", ""},
	}
	checkGridTable(t, out, want, []string{
		"worst occl-shm/base-shm: 0.80x at alltoall np=2 32B (vs base-shm)",
		"worst occl-tcp/base-tcp: 0.50x at allreduce np=4 8B (vs base-tcp)",
		"worst occl-shm/best: 0.80x at allreduce np=4 8B (vs occl-tcp)",
		"base-tcp and base-shm are a second occl-bench (--baseline)",
		"occl-shm/base-shm: slower in every round at 0 of 1 points (0.12 expected by chance alone)\n",
		"occl-tcp/mpi-tcp: slower in every round at 1 of 1 points (0.12 expected by chance alone): alltoall np=2 32B\n",
		"occl-tcp/base-tcp: slower in every round at 0 of 1 points (0.25 expected by chance alone)\n",
	})
}

// TestCompareTableLatency prints the per-operation latency table of a
// synthetic --latency run (testdata/compare-latency.jsonl) and checks it
// against values worked out by hand: alltoall np=2 32 B, occl-shm medians
// 0.5 0.6 0.4 and 99th percentiles 1 3 2 in three rounds (medians 0.5 and
// 2), mpi-shm 0.4 0.45 0.35 and 0.8 (0.4 and 0.8), so mpi-shm/occl-shm =
// 0.4/0.5 = 0.80; occl-tcp 10 and 20, mpi-tcp 15 and 30 in one round,
// 1.50. allreduce np=4 8 B: occl-shm 2 and 4, mpi-shm 3 and 5, 1.50; its
// occl-tcp record has no latency, so the TCP cells stay empty. The 64 KiB
// point lies above 1 KiB and is left out.
func TestCompareTableLatency(t *testing.T) {
	out := runCompare(t, time.Minute, "--table", "bench/testdata/compare-latency.jsonl", "--markdown")
	rows := markdownRows(out[strings.Index(out, "Per-operation latency"):])
	want := map[string][]string{
		"alltoall 2 32B": {"alltoall", "2", "32B", "0.500", "0.400", "10.0", "15.0", "2.000", "0.800", "20.0", "30.0", "0.80x", "1.50x"},
		"allreduce 4 8B": {"allreduce", "4", "8B", "2.000", "3.000", "", "", "4.000", "5.000", "", "", "1.50x", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("latency table has %d rows, want %d:\n%s", len(rows), len(want), out)
	}
	for k, w := range want {
		if got := rows[k]; !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %q, want %q", k, got, w)
		}
	}
}

// TestCompareTableLegacy checks that a file of the earlier AllReduce-centred
// run still prints its bus bandwidth tables (the README cites such files).
func TestCompareTableLegacy(t *testing.T) {
	out := runCompare(t, time.Minute, "--table", "bench/results/compare-readme.jsonl")
	for _, w := range []string{
		"== allreduce np=2 sweep, float32: bus bandwidth (GB/s)",
		"== alltoall 16MiB np=4, float32: time (us)",
		"Each cell is the median of 3 round(s)",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "Collectives of an MoE layer") {
		t.Errorf("a legacy file printed a grid table:\n%s", out)
	}
}

// TestCompareRoundOrder checks the orders compare.py runs a case's
// commands in, round after round (round_order), for 1 to 9 commands: every
// round runs each command once, and over n rounds (2n for an odd n) every
// command runs equally often at every position and right after every other
// command equally often, as a Williams design does.
func TestCompareRoundOrder(t *testing.T) {
	pyvenv.Require(t)
	const code = `import json, compare
print(json.dumps({n: [compare.round_order(n, r) for r in range(2 * n)] for n in range(1, 10)}))`
	var orders map[int][][]int
	comparePython(t, code, &orders)
	for n := 1; n <= 9; n++ {
		rounds := n
		if n%2 == 1 {
			rounds = 2 * n
		}
		if len(orders[n]) < rounds {
			t.Fatalf("n=%d: %d rounds printed", n, len(orders[n]))
		}
		at := map[[2]int]int{}    // (command, position) -> rounds
		after := map[[2]int]int{} // (command, the one before it) -> rounds
		for r, o := range orders[n][:rounds] {
			seen := map[int]bool{}
			for i, x := range o {
				if x < 0 || x >= n || seen[x] {
					t.Fatalf("n=%d round %d: %v is not an order of %d commands", n, r, o, n)
				}
				seen[x] = true
				at[[2]int{x, i}]++
				if i > 0 {
					after[[2]int{x, o[i-1]}]++
				}
			}
			if len(o) != n {
				t.Fatalf("n=%d round %d: %v is not an order of %d commands", n, r, o, n)
			}
		}
		each := rounds / n
		for x := 0; x < n; x++ {
			for i := 0; i < n; i++ {
				if at[[2]int{x, i}] != each {
					t.Errorf("n=%d: command %d at position %d in %d of %d rounds, want %d", n, x, i, at[[2]int{x, i}], rounds, each)
				}
			}
			for y := 0; y < n; y++ {
				if x != y && after[[2]int{x, y}] != each {
					t.Errorf("n=%d: command %d right after %d in %d of %d rounds, want %d", n, x, y, after[[2]int{x, y}], rounds, each)
				}
			}
		}
	}
}

// TestCompareQuickAllToAll runs compare.py --quick end to end for AllToAll on
// 2 processes with occl (TCP and shared memory), the same occl-bench again
// as the baseline (--baseline) and Open MPI (TCP and vader), two rounds, and
// checks that every implementation measured every grid point with correct
// results, that the rounds are interleaved (every command of round 1, then
// of round 2; within a case the implementations back to back, in the
// orders of round_order), that every record carries the round it ran
// in, and that the table names the worst points, against the peers and
// against the baseline, and counts the points slower in both rounds.
func TestCompareQuickAllToAll(t *testing.T) {
	if testing.Short() {
		t.Skip("builds occl-bench and mpi_bench and runs 18 benchmark commands")
	}
	requireCompareTools(t)
	dir := t.TempDir()
	bin := proctest.Build(t, "./cmd/occl-bench")
	jsonl := filepath.Join(dir, "quick.jsonl")
	out := runCompare(t, 10*time.Minute, "--quick", "--repeat", "2", "--ops", "alltoall", "--np", "2",
		"--skip", "gloo,limits", "--occl-bin", bin, "--baseline", bin, "--out", jsonl)

	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		Impl   string   `json:"impl"`
		Run    string   `json:"run"`
		Op     string   `json:"op"`
		NP     int      `json:"np"`
		Bytes  int      `json:"bytes"`
		TimeUS *float64 `json:"time_us"`
		Wrong  *int     `json:"wrong"`
		RC     *int     `json:"rc"`
		Case   string   `json:"case"`
		Round  int      `json:"round"`
	}
	seen := map[string]bool{}
	round := 0         // the round of the last command
	var order []string // case and column of every command, in order
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r rec
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSONL line %q: %v", line, err)
		}
		switch {
		case r.Impl == "run":
			if r.RC == nil || *r.RC != 0 {
				t.Errorf("command failed: %s", line)
			}
			if r.Case != "limits" {
				order = append(order, fmt.Sprintf("%s %s %d", r.Case, r.Run, r.Round))
				round = r.Round
			}
		case r.TimeUS != nil:
			if r.Op != "alltoall" || r.NP != 2 {
				t.Errorf("unexpected record %s", line)
			}
			if *r.TimeUS <= 0 || r.Wrong == nil || *r.Wrong != 0 {
				t.Errorf("bad measurement %s", line)
			}
			if r.Round != round {
				t.Errorf("record of round %d after a command of round %d: %s", r.Round, round, line)
			}
			seen[r.Run+" "+strconv.Itoa(r.Bytes)] = true
		}
	}
	// 8 B cannot be split into 2 float32 chunks of 16 bytes: 32 B instead.
	for _, col := range []string{"occl-tcp", "occl-shm", "base-tcp", "base-shm", "mpi-tcp", "mpi-shm"} {
		for _, b := range []int{32, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			if !seen[col+" "+strconv.Itoa(b)] {
				t.Errorf("%s measured nothing at %d bytes", col, b)
			}
		}
	}
	var want []string
	// Rows 0 and 1 of the Williams design of six columns (round_order):
	// 0 1 5 2 4 3 and 1 2 0 3 5 4 of occl-tcp, occl-shm, base-tcp,
	// base-shm, mpi-tcp, mpi-shm.
	for i, cols := range [][]string{
		{"occl-tcp", "occl-shm", "mpi-shm", "base-tcp", "mpi-tcp", "base-shm"},
		{"occl-shm", "base-tcp", "occl-tcp", "base-shm", "mpi-shm", "mpi-tcp"},
	} {
		for _, c := range []string{"grid-alltoall-np2-32B", "grid-alltoall-np2-64KiB", "grid-alltoall-np2-16MiB"} {
			for _, col := range cols {
				want = append(want, fmt.Sprintf("%s %s %d", c, col, i+1))
			}
		}
	}
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Errorf("commands ran in the order\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	for _, w := range []string{"median of up to 2 round(s)", "worst occl-shm/best: ", "worst occl-shm/mpi-shm: ", "worst occl-tcp/mpi-tcp: ",
		"worst occl-shm/base-shm: ", "worst occl-tcp/base-tcp: ", "alltoall   2   32B*",
		"occl-shm/mpi-shm: slower in every round at ", " of 6 points (1.50 expected by chance alone)"} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
}

// TestCompareHugePages runs compare.py --quick --hugepages for AllToAll on 2
// processes with occl and Open MPI and checks that every command was given
// huge-page buffers (occl-bench -hugepages, glibc's hugetlb tunable passed by
// mpirun -x), that the run is marked so, and that every result is right.
func TestCompareHugePages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds occl-bench and mpi_bench and runs 12 benchmark commands")
	}
	requireCompareTools(t)
	jsonl := filepath.Join(t.TempDir(), "huge.jsonl")
	out := runCompare(t, 10*time.Minute, "--quick", "--hugepages", "--ops", "alltoall", "--np", "2",
		"--skip", "gloo,limits", "--out", jsonl)
	if !strings.Contains(out, "in transparent huge pages (--hugepages)") {
		t.Errorf("the table does not say the run had huge pages:\n%s", out)
	}
	policy, huge := hugemem.SharedPolicy()
	wantPolicy := "shared memory's huge-page policy not recorded"
	if policy != "" {
		wantPolicy = fmt.Sprintf("shared memory's huge-page policy %s (occl's shared buffers %s)", policy,
			map[bool]string{true: "from 2 MiB on huge pages", false: "on 4 KiB pages"}[huge])
	}
	if !strings.Contains(out, wantPolicy) {
		t.Errorf("the table does not say %q:\n%s", wantPolicy, out)
	}
	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	var meta, runs, measured int
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r struct {
			Impl      string   `json:"impl"`
			Run       string   `json:"run"`
			Argv      []string `json:"argv"`
			HugePages bool     `json:"hugepages"`
			ShmemTHP  *string  `json:"shmem_thp"`
			TimeUS    *float64 `json:"time_us"`
			Wrong     *int     `json:"wrong"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSONL line %q: %v", line, err)
		}
		switch {
		case r.Impl == "meta":
			meta++
			if !r.HugePages {
				t.Errorf("meta record without hugepages: %s", line)
			}
			got := ""
			if r.ShmemTHP != nil {
				got = *r.ShmemTHP
			}
			if got != policy {
				t.Errorf("meta record's shmem_thp %q, the system's policy %q: %s", got, policy, line)
			}
		case r.Impl == "run":
			runs++
			argv := " " + strings.Join(r.Argv, " ") + " "
			want := " -hugepages "
			if strings.HasPrefix(r.Run, "mpi-") {
				want = " -x GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "
			}
			if !strings.Contains(argv, want) {
				t.Errorf("%s ran without %q: %s", r.Run, strings.TrimSpace(want), line)
			}
		case r.TimeUS != nil:
			measured++
			if *r.TimeUS <= 0 || r.Wrong == nil || *r.Wrong != 0 {
				t.Errorf("bad measurement %s", line)
			}
		}
	}
	if meta != 1 || runs != 12 || measured != 24 {
		t.Errorf("%d meta records, %d commands, %d measurements; want 1, 12, 24", meta, runs, measured)
	}
}

// TestCompareGridCounts: in the grid's smallest band occl and Open MPI run
// 50000 calls and Gloo 5000; every other band gives all the same count.
func TestCompareGridCounts(t *testing.T) {
	pyvenv.Require(t)
	const code = `import json, types, compare
tools = types.SimpleNamespace(occl="occl-bench", base=None, gloo_ok=True, mpi="mpi_bench", mpirun="mpirun")
args = types.SimpleNamespace(check=False, hugepages=False, latency=True, python="python3")
out = []
for case in compare.grid_cases(False, ops=("allreduce", "alltoall"), nps=(2,)):
    for label, argv in compare.commands(case, tools, args):
        out.append([case.b, label, int(argv[argv.index("-n") + 1]), int(argv[argv.index("-w") + 1])])
print(json.dumps(out))`
	var rows [][4]any
	comparePython(t, code, &rows)
	want := map[string][2]float64{"8": {50000, 5000}, "32": {50000, 5000}, "65536": {300, 30}, "16777216": {16, 4}}
	labels := map[string]bool{}
	for _, r := range rows {
		b, label, n, w := r[0].(string), r[1].(string), r[2].(float64), r[3].(float64)
		labels[label] = true
		nw, ok := want[b]
		if !ok {
			t.Fatalf("unexpected band starting at %s B", b)
		}
		if label == "gloo" && b != "65536" && b != "16777216" {
			nw = [2]float64{5000, 500}
		}
		if n != nw[0] || w != nw[1] {
			t.Errorf("%s at %s B: -n %v -w %v, want %v %v", label, b, n, w, nw[0], nw[1])
		}
	}
	for _, l := range []string{"occl-shm", "occl-tcp", "gloo", "mpi-shm", "mpi-tcp"} {
		if !labels[l] {
			t.Errorf("no %s command in %v", l, rows)
		}
	}
}

// comparePython runs code with compare.py importable and decodes the JSON
// it prints into v.
func comparePython(t *testing.T, code string, v any) {
	t.Helper()
	cmd := exec.Command(pyvenv.System, "-c", code)
	cmd.Dir = "peers"
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("python printed %q: %v", out, err)
	}
}

// TestCompareSteady checks --steady's wait (compare.Steady) against a
// scripted probe and clock: it runs a command once the line exchange is
// within compare.STEADY_RATIO of the median seen before the wait (the
// limits run's, and each earlier wait's last probe), neither waits for a
// rare fast exchange nor lets a slow spell it waits out move that median,
// gives up after its bound, and runs at once when the probe fails; and
// that compare.py waits only with --steady and a limits binary
// (compare.steady_for).
func TestCompareSteady(t *testing.T) {
	pyvenv.Require(t)
	const code = `import json, compare
def run(seen, probes, max_wait):
    seq, now = iter(probes), [0.0]
    def sleep(d):
        now[0] += d
    st = compare.Steady(lambda: next(seq), max_wait, sleep=sleep, clock=lambda: now[0])
    for us in seen:
        st.seen(us)
    return list(st.wait()) + [round(st.typical(), 6)]
out = {
    "slow then usual": run([0.06, 0.06], [0.28, 0.27, 0.07], 10),
    "slow throughout": run([0.06, 0.06], [0.28] * 100, 3),
    "first probe sets the pace": run([], [0.3], 10),
    "a rare fast one is no reason to wait": run([0.06, 0.027, 0.06], [0.07], 10),
    "within the ratio": run([0.06], [0.11], 10),
    "probe fails": run([0.06], [None], 10),
}
gate = compare.steady_for(30, "limits")
out["gate"] = [compare.steady_for(0, "limits") is None, compare.steady_for(30, None) is None,
               isinstance(gate, compare.Steady) and gate.max_wait == 30]
print(json.dumps(out))`
	var got map[string]any
	comparePython(t, code, &got)
	want := map[string]string{
		// [exchange us, seconds waited, steady, median seen]
		"slow then usual":                      "[0.07,2,true,0.06]",
		"slow throughout":                      "[0.28,3,false,0.06]",
		"first probe sets the pace":            "[0.3,0,true,0.3]",
		"a rare fast one is no reason to wait": "[0.07,0,true,0.06]",
		"within the ratio":                     "[0.11,0,true,0.085]",
		"probe fails":                          "[null,0,false,0.06]",
		// [no --steady: none, no limits: none, --steady 30: a Steady of 30 s]
		"gate": "[true,true,true]",
	}
	for k, w := range want {
		b, err := json.Marshal(got[k])
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != w {
			t.Errorf("%s: %s, want %s", k, b, w)
		}
	}
}

// TestCompareSteadyRun runs a quick grid of occl alone with --steady and
// --skip limits: compare.py builds bench/peers/limits all the same and
// probes the line exchange (limits -only line) before every command, of
// every size, and each command's run line records it.
func TestCompareSteadyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds occl-bench and limits and runs 6 benchmark commands")
	}
	pyvenv.Require(t)
	jsonl := filepath.Join(t.TempDir(), "steady.jsonl")
	runCompare(t, 10*time.Minute, "--quick", "--steady", "30", "--ops", "allreduce", "--np", "2",
		"--skip", "gloo,limits,mpi", "--out", jsonl)
	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r struct {
			Impl   string   `json:"impl"`
			Argv   []string `json:"argv"`
			Line   *float64 `json:"line_exchange_us"`
			Waited *float64 `json:"steady_wait_s"`
			Steady *bool    `json:"steady"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSONL line %q: %v", line, err)
		}
		if r.Impl != "run" {
			continue
		}
		sizes = append(sizes, r.Argv[slices.Index(r.Argv, "-e")+1])
		if r.Line == nil || *r.Line <= 0 || r.Waited == nil || *r.Waited < 0 || r.Steady == nil {
			t.Errorf("a command without a probe: %s", line)
		}
	}
	slices.Sort(sizes)
	if got, want := strings.Join(sizes, " "), "1024 1024 1048576 1048576 67108864 67108864"; got != want {
		t.Errorf("commands of sizes %s, want %s", got, want)
	}
}
