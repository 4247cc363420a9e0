package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/trace"
)

// TestMoE runs three layers across 4 processes on a small emulated fabric
// with -trace and checks the report (every token is checked by the program
// itself) and the merged timeline against it: every rank has, in each
// pass, every layer's slice with its phases nested in it and in order,
// each dispatch and combine around its AllToAllV, and the largest
// dispatch plus combine over the ranks of each layer is the table's
// all-to-all time, the largest reconfiguration wait its max wait.
func TestMoE(t *testing.T) {
	bin := proctest.Build(t, ".")
	dir := t.TempDir()
	const np, layers = 4, 3
	cmd := exec.Command(bin, "-np", strconv.Itoa(np), "-layers", strconv.Itoa(layers), "-bytes", "65536", "-compute", "5ms", "-switch-delay", "2ms",
		"-topo", "hosts=2x2,nics=host,ocs_ports=2,hbd=4GB/s,eps=1GB/s,ocs=1GB/s", "-trace", dir)
	cmd.Env = append(os.Environ(), "OCCL_RANK=", "OCCL_TRACE=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var rows [][]float64
	for _, line := range strings.Split(out.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var row []float64
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("row %q: %v", line, err)
			}
			row = append(row, v)
		}
		if len(row) != 10 {
			t.Fatalf("row %q: %d columns, want 10", line, len(row))
		}
		rows = append(rows, row)
	}
	if len(rows) != layers || !strings.Contains(out.String(), "# all layers:") {
		t.Fatalf("want %d layer rows and a summary:\n%s", layers, out.String())
	}

	m, err := trace.MergeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		pass  string
		layer int
	}
	// The longest over the ranks, per layer: all-to-all (ms) and wait (ms).
	a2a := map[key]float64{}
	wait := map[key]float64{}
	for pid := range np {
		var app, ops []trace.Event
		for _, e := range m.TraceEvents {
			switch {
			case e.Pid != pid || e.Ph != "X":
			case e.Cat == "moe":
				app = append(app, e)
			case e.Cat == "op" && strings.HasPrefix(e.Name, "AllToAll"):
				ops = append(ops, e)
			}
		}
		end := func(e trace.Event) float64 { return e.Ts + e.Dur }
		inside := func(in, out trace.Event) bool { return in.Ts >= out.Ts && end(in) <= end(out)+0.001 }
		i := 0
		next := func() trace.Event {
			if i == len(app) {
				t.Fatalf("rank %d: the timeline ends after %d application slices", pid, i)
			}
			i++
			return app[i-1]
		}
		for _, p := range []struct {
			name   string
			layers int
		}{{"warm-up", 1}, {"static", layers}, {"reconfigured", layers}} {
			ps := next()
			if ps.Name != p.name+" pass" || ps.Tid != trace.App {
				t.Fatalf("rank %d: %s (thread %d), want the %s pass on the application thread", pid, ps.Name, ps.Tid, p.name)
			}
			prev := ps.Ts
			for l := range p.layers {
				ls := next()
				if ls.Name != fmt.Sprintf("layer %d (%s)", l, p.name) || !inside(ls, ps) || ls.Ts < prev {
					t.Fatalf("rank %d: %s at %v, want layer %d of the %s pass after %v, inside it", pid, ls.Name, ls.Ts, l, p.name, prev)
				}
				prev = end(ls)
				phases := []string{"attention", "dispatch", "experts", "combine"}
				if p.name == "reconfigured" {
					phases = []string{"attention", "reconf wait", "dispatch", "experts", "combine"}
				}
				at := ls.Ts
				var sum float64
				for _, ph := range phases {
					e := next()
					if e.Name != ph || e.Args["pass"] != p.name || e.Args["layer"] != float64(l) || !inside(e, ls) || e.Ts < at-0.001 {
						t.Fatalf("rank %d: %s %v at %v, want %s of layer %d (%s) inside it, after %v", pid, e.Name, e.Args, e.Ts, ph, l, p.name, at)
					}
					at = end(e)
					switch ph {
					case "dispatch", "combine":
						sum += e.Dur
						n := 0
						for _, op := range ops {
							if inside(op, e) {
								n++
							}
						}
						if n != 1 {
							t.Errorf("rank %d: %s of layer %d (%s) holds %d AllToAllV slices, want 1", pid, ph, l, p.name, n)
						}
					case "reconf wait":
						k := key{p.name, l}
						wait[k] = max(wait[k], e.Dur/1e3)
					}
				}
				k := key{p.name, l}
				a2a[k] = max(a2a[k], sum/1e3)
			}
		}
		if i != len(app) {
			t.Errorf("rank %d: %d application slices after the last pass", pid, len(app)-i)
		}
	}
	for l, row := range rows {
		if int(row[0]) != l {
			t.Fatalf("row %d is layer %v", l, row[0])
		}
		// The table rounds to 0.01 ms (a2a) and 0.001 ms (wait).
		for _, c := range []struct {
			what       string
			got, table float64
			tol        float64
		}{
			{"static all-to-all", a2a[key{"static", l}], row[2], 0.0051},
			{"reconfigured all-to-all", a2a[key{"reconfigured", l}], row[3], 0.0051},
			{"max wait", wait[key{"reconfigured", l}], row[9], 0.00051},
		} {
			if math.Abs(c.got-c.table) > c.tol {
				t.Errorf("layer %d: %s %.4f ms in the timeline, %.3f ms in the table", l, c.what, c.got, c.table)
			}
		}
	}
}

// TestMoEKill kills a rank of 4 in the dispatch of a layer (rank 0, the
// one that serves the switch and prints, and another) and checks that the
// run finishes: the failure detected and recovered from, the layers from
// the failed one on run again (every token checked by the program, which
// fails otherwise) on 3 ranks, or on 4 with the spare that joined.
func TestMoEKill(t *testing.T) {
	bin := proctest.Build(t, ".")
	const np, layers = 4, 4
	for _, c := range []struct {
		kill, at int
		spare    bool
	}{{2, 1, false}, {0, 2, false}, {1, 1, true}, {0, 2, true}} {
		t.Run(fmt.Sprintf("kill=%d,at=%d,spare=%v", c.kill, c.at, c.spare), func(t *testing.T) {
			args := []string{"-np", strconv.Itoa(np), "-layers", strconv.Itoa(layers), "-bytes", "65536", "-compute", "5ms", "-switch-delay", "2ms",
				"-topo", "hosts=2x2,nics=host,ocs_ports=2,hbd=4GB/s,eps=1GB/s,ocs=1GB/s",
				"-kill-rank", strconv.Itoa(c.kill), "-at-layer", strconv.Itoa(c.at)}
			if c.spare {
				args = append(args, "-spare")
			}
			cmd := exec.Command(bin, args...)
			// The survivors' failed communicators write flight records
			// to the temporary directory: the test's own.
			tmp := t.TempDir()
			cmd.Env = append(os.Environ(), "OCCL_RANK=", "OCCL_TRACE=", "TMPDIR="+tmp)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s\n%s", err, out.String(), errOut.String())
			}
			if recs, _ := filepath.Glob(filepath.Join(tmp, "occl-flight-*.json")); len(recs) != np-1 {
				t.Errorf("%d flight records in the test's temporary directory, want one per survivor (%d): %v", len(recs), np-1, recs)
			}
			text := out.String()
			ranks := np - 1
			if c.spare {
				ranks = np
			}
			var detect, recovered, joined float64
			var rows [][]float64
			var doneLayers, doneRanks int
			for _, line := range strings.Split(text, "\n") {
				switch {
				case strings.HasPrefix(line, "# detected in "):
					fmt.Sscanf(line, "# detected in %f ms", &detect)
					if !strings.Contains(line, fmt.Sprintf("naming rank %d", c.kill)) {
						t.Errorf("detection names another rank: %q", line)
					}
				case strings.HasPrefix(line, "# recovered in "):
					fmt.Sscanf(line, "# recovered in %f ms", &recovered)
					if !strings.Contains(line, fmt.Sprintf("shrunk communicator of %d ranks", np-1)) {
						t.Errorf("recovery line %q", line)
					}
				case strings.HasPrefix(line, "# spare joined in "):
					fmt.Sscanf(line, "# spare joined in %f ms", &joined)
				case strings.HasPrefix(line, "# after recovery: ") && strings.Contains(line, "every token verified"):
					fmt.Sscanf(line, "# after recovery: %d layers on %d ranks", &doneLayers, &doneRanks)
				case line == "" || strings.HasPrefix(line, "#"):
				default:
					var row []float64
					for _, f := range strings.Fields(line) {
						v, err := strconv.ParseFloat(f, 64)
						if err != nil {
							t.Fatalf("row %q: %v", line, err)
						}
						row = append(row, v)
					}
					if len(row) != 9 {
						t.Fatalf("row %q: %d columns, want 9", line, len(row))
					}
					rows = append(rows, row)
				}
			}
			if detect <= 0 || recovered <= 0 || c.spare != (joined > 0) || c.spare && joined < recovered {
				t.Errorf("detected in %v ms, recovered in %v ms, spare joined in %v ms:\n%s", detect, recovered, joined, text)
			}
			if doneLayers != layers-c.at || doneRanks != ranks || len(rows) != layers-c.at {
				t.Fatalf("want layers %d to %d on %d ranks:\n%s", c.at, layers-1, ranks, text)
			}
			for i, row := range rows {
				if int(row[0]) != c.at+i || int(row[3]) != ranks || row[4] <= 0 {
					t.Errorf("row %v: want layer %d on %d ranks", row, c.at+i, ranks)
				}
				// The hot expert's rank: the dead rank's expert went to the
				// spare (the last rank) or to the survivor that took its
				// number; the others follow their ranks.
				e := int(row[1])
				want := e
				switch {
				case e == c.kill && c.spare:
					want = np - 1
				case e == c.kill:
					want = c.kill % (np - 1)
				case e > c.kill:
					want = e - 1
				}
				if int(row[2]) != want {
					t.Errorf("layer %d: hot expert %d on rank %d, want %d", int(row[0]), e, int(row[2]), want)
				}
			}
		})
	}
}
