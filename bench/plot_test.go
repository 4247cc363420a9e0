package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/internal/pyvenv"
	"github.com/occl/occl/internal/svgtest"
)

// The README's plot and the command that makes it, from the repository
// root.
const (
	plotInput   = "bench/results/compare-20261122.jsonl"
	plotFile    = "bench/results/compare-20261122.svg"
	plotCommand = "/usr/bin/python3 bench/peers/compare.py --table " + plotInput + " --plot " + plotFile
)

// plotSVG is what the tests read of compare.py's SVG: the root element,
// the ids of groups, the text elements and the generator's version.
type plotSVG struct {
	root  string
	ids   map[string]bool
	texts map[string]bool
	gen   string
}

func readPlotSVG(t *testing.T, data []byte) plotSVG {
	t.Helper()
	doc, err := svgtest.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	d := plotSVG{root: doc.Root, ids: map[string]bool{}, texts: map[string]bool{}}
	for _, id := range doc.GroupIDs {
		d.ids[id] = true
	}
	for _, s := range doc.Texts {
		d.texts[s] = true
	}
	for _, s := range doc.Titles {
		if s = strings.TrimSpace(s); strings.HasPrefix(s, "Matplotlib v") {
			d.gen = s
		}
	}
	return d
}

// expectedSeries reads a comparison file as the plot must: every record of
// an implementation column with a positive bus bandwidth is a point of the
// series (op, np, column). It returns the series ids and the panels'
// titles and columns.
func expectedSeries(t *testing.T, path string) (series map[string]bool, panels map[string]bool, columns map[string]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	series, panels, columns = map[string]bool{}, map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Impl      string   `json:"impl"`
			Run       string   `json:"run"`
			Transport string   `json:"transport"`
			Op        string   `json:"op"`
			NP        int      `json:"np"`
			Bytes     int      `json:"bytes"`
			BusBW     *float64 `json:"busbw_GBps"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.BusBW == nil || *r.BusBW <= 0 || r.Bytes <= 0 || r.Op == "" || r.NP == 0 {
			continue
		}
		col := ""
		switch {
		case r.Run == "occl-tcp" || r.Run == "occl-shm" || r.Run == "gloo" || r.Run == "mpi-tcp" || r.Run == "mpi-shm":
			col = r.Run
		case r.Impl == "gloo":
			col = "gloo"
		case r.Impl == "occl":
			col = "occl-" + cmpOr(r.Transport, "tcp")
		case r.Impl == "openmpi" || r.Impl == "mpi":
			col = "mpi-" + cmpOr(r.Transport, "tcp")
		default:
			continue
		}
		series[fmt.Sprintf("series-%s-np%d-%s", r.Op, r.NP, col)] = true
		panels[fmt.Sprintf("%s, np=%d", r.Op, r.NP)] = true
		columns[col] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return series, panels, columns
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func keys(m map[string]bool, prefix string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// runPlot runs compare.py from the repository root with extra environment
// and returns its stdout, stderr and error.
func runPlot(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	return runScript(t, pyvenv.System, compareScript, 2*time.Minute, env, args...)
}

// checkPlot draws input into a temporary SVG and checks it: valid SVG, a
// line (group id series-<op>-np<np>-<column>) for exactly the series the
// input has, a panel title per op and np, a legend label per column.
func checkPlot(t *testing.T, input string) ([]byte, plotSVG) {
	t.Helper()
	pyvenv.Require(t, "matplotlib")
	out := filepath.Join(t.TempDir(), "plot.svg")
	stdout, stderr, err := runPlot(t, nil, "--table", input, "--plot", out)
	if err != nil {
		t.Fatalf("compare.py --table %s --plot: %v\n%s", input, err, stderr)
	}
	if !strings.Contains(stdout, "occl vs Gloo vs Open MPI") {
		t.Errorf("--plot did not print the tables too:\n%s", stdout)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	doc := readPlotSVG(t, data)
	series, panels, columns := expectedSeries(t, filepath.Join("..", input))
	if got, want := keys(doc.ids, "series-"), keys(series, ""); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s: series\n got %v\nwant %v", input, got, want)
	}
	for p := range panels {
		if !doc.texts[p] {
			t.Errorf("%s: no panel titled %q", input, p)
		}
	}
	for c := range columns {
		if !doc.texts[c] {
			t.Errorf("%s: no legend label %q", input, c)
		}
	}
	return data, doc
}

// TestComparePlotReadme re-generates the README's plot with the documented
// command into a temporary directory, checks it (checkPlot: every series of
// the saved comparison, the panels, the legend), that the README gives the
// command and links the file, and that the committed file matches: byte for
// byte when it was made by the same matplotlib version (the SVG is
// reproducible: fixed hash salt, no date), else by the same series, panel
// titles and legend labels.
func TestComparePlotReadme(t *testing.T) {
	fresh, doc := checkPlot(t, plotInput)
	if len(keys(doc.ids, "series-")) != 15 {
		t.Errorf("want 15 series (allreduce np=2, np=4 and alltoall np=4 for 5 columns), got %v", keys(doc.ids, "series-"))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte(plotCommand)) {
		t.Errorf("README does not give the command %q", plotCommand)
	}
	if !bytes.Contains(readme, []byte("("+plotFile+")")) {
		t.Errorf("README does not link %s", plotFile)
	}
	committed, err := os.ReadFile(filepath.Join("..", plotFile))
	if err != nil {
		t.Fatalf("the committed plot: %v", err)
	}
	old := readPlotSVG(t, committed)
	if old.gen == doc.gen {
		if !bytes.Equal(committed, fresh) {
			t.Errorf("%s differs from what %q makes now (same %s): run it again", plotFile, plotCommand, doc.gen)
		}
		return
	}
	t.Logf("%s was made by %q, this machine has %q: comparing series and labels", plotFile, old.gen, doc.gen)
	for _, prefix := range []string{"series-"} {
		if a, b := keys(old.ids, prefix), keys(doc.ids, prefix); strings.Join(a, " ") != strings.Join(b, " ") {
			t.Errorf("%s has series %v, %q makes %v: run it again", plotFile, a, plotCommand, b)
		}
	}
}

// TestComparePlotGrid draws a file of grid records (testdata): the
// reducescatter panel has no Gloo line (torch's Gloo has none), the others
// all five columns.
func TestComparePlotGrid(t *testing.T) {
	_, doc := checkPlot(t, "bench/testdata/compare-grid.jsonl")
	want := []string{}
	for _, c := range []string{"gloo", "mpi-shm", "mpi-tcp", "occl-shm", "occl-tcp"} {
		want = append(want, "series-allreduce-np4-"+c, "series-alltoall-np2-"+c)
		if c != "gloo" {
			want = append(want, "series-reducescatter-np2-"+c)
		}
	}
	sort.Strings(want)
	if got := keys(doc.ids, "series-"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("series\n got %v\nwant %v", got, want)
	}
}

// TestComparePlotWithoutMatplotlib hides matplotlib from compare.py: --plot
// fails at once saying what to install and writes nothing, and --table
// without --plot still works (the script imports matplotlib only for
// --plot).
func TestComparePlotWithoutMatplotlib(t *testing.T) {
	pyvenv.Require(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "matplotlib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "matplotlib", "__init__.py"), []byte("raise ImportError('hidden by the test')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PYTHONPATH=" + dir}
	out := filepath.Join(dir, "plot.svg")
	_, stderr, err := runPlot(t, env, "--table", plotInput, "--plot", out)
	if err == nil {
		t.Fatalf("--plot without matplotlib succeeded")
	}
	if !strings.Contains(stderr, "apt-get install python3-matplotlib") || !strings.Contains(stderr, "hidden by the test") {
		t.Errorf("stderr does not say what is missing: %s", stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written without matplotlib", out)
	}
	stdout, stderr, err := runPlot(t, env, "--table", plotInput)
	if err != nil || !strings.Contains(stdout, "bus bandwidth (GB/s)") {
		t.Errorf("--table without matplotlib: %v\n%s\n%s", err, stdout, stderr)
	}
}
