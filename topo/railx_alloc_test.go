package topo

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestLargestAllocationExamples(t *testing.T) {
	a, err := LargestAllocation(8, 8, nil)
	if err != nil || a.Size != 64 || len(a.Rows) != 8 || len(a.Cols) != 8 {
		t.Fatalf("no faults: %+v %v", a, err)
	}
	// Two faults in one row: disable that row (7 x 8), not two columns.
	a, _ = LargestAllocation(8, 8, []GridFault{{1, 3}, {5, 3}})
	if a.Size != 56 || len(a.DisabledRows) != 1 || a.DisabledRows[0] != 3 {
		t.Fatalf("two faults in row 3: %+v", a)
	}
	// Four faults on a 2x2 block: two rows or two columns.
	a, _ = LargestAllocation(8, 8, []GridFault{{2, 2}, {2, 3}, {3, 2}, {3, 3}})
	if a.Size != 48 {
		t.Fatalf("2x2 block: %+v", a)
	}
	// Duplicates count once.
	a, _ = LargestAllocation(4, 4, []GridFault{{0, 0}, {0, 0}})
	if a.Size != 12 {
		t.Fatalf("duplicate fault: %+v", a)
	}
	// Every node failed on a 1x1 grid leaves nothing.
	a, _ = LargestAllocation(1, 1, []GridFault{{0, 0}})
	if a.Size != 0 {
		t.Fatalf("1x1 failed: %+v", a)
	}
}

// With isolated faults only, Algorithm 2's closed form on n x n grids.
func TestLargestAllocationIsolatedFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 2; n <= 16; n++ {
		for f := 0; f <= n; f++ {
			perm := rng.Perm(n) // fault i at (i, perm[i]): distinct rows and columns
			var faults []GridFault
			for i := 0; i < f; i++ {
				faults = append(faults, GridFault{X: i, Y: perm[i]})
			}
			a, err := LargestAllocation(n, n, faults)
			if err != nil {
				t.Fatal(err)
			}
			want := (n - (f+1)/2) * (n - f/2)
			if a.Size != want {
				t.Fatalf("n=%d, %d isolated faults: size %d, want %d", n, f, a.Size, want)
			}
			checkAllocation(t, n, n, faults, a)
		}
	}
}

// On small grids with random (often clustered) faults, Algorithm 2 finds
// the best of all 2^|F| ways to disable each fault's row or column.
func TestLargestAllocationMatchesExhaustive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 300; trial++ {
		x, y := 2+rng.IntN(6), 2+rng.IntN(6)
		var faults []GridFault
		for i := rng.IntN(7); i > 0; i-- {
			faults = append(faults, GridFault{X: rng.IntN(x), Y: rng.IntN(y)})
		}
		a, err := LargestAllocation(x, y, faults)
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for mask := 0; mask < 1<<len(faults); mask++ {
			rows, cols := map[int]bool{}, map[int]bool{}
			for i, f := range faults {
				if mask>>i&1 == 0 {
					rows[f.Y] = true
				} else {
					cols[f.X] = true
				}
			}
			best = max(best, (y-len(rows))*(x-len(cols)))
		}
		if a.Size != best {
			t.Fatalf("%dx%d faults %v: size %d, exhaustive %d", x, y, faults, a.Size, best)
		}
		checkAllocation(t, x, y, faults, a)
	}
}

func checkAllocation(t *testing.T, x, y int, faults []GridFault, a *Allocation) {
	t.Helper()
	if a.Size != len(a.Rows)*len(a.Cols) || len(a.Rows)+len(a.DisabledRows) != y || len(a.Cols)+len(a.DisabledCols) != x {
		t.Fatalf("inconsistent allocation %+v", a)
	}
	in := func(v int, s []int) bool {
		for _, w := range s {
			if w == v {
				return true
			}
		}
		return false
	}
	for _, f := range faults {
		if in(f.X, a.Cols) && in(f.Y, a.Rows) {
			t.Fatalf("allocation %+v keeps failed node %v", a, f)
		}
	}
}

func TestLargestAllocationErrors(t *testing.T) {
	if _, err := LargestAllocation(0, 4, nil); err == nil {
		t.Error("empty grid accepted")
	}
	if _, err := LargestAllocation(4, 4, []GridFault{{4, 0}}); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("fault outside: %v", err)
	}
	var many []GridFault
	for i := 0; i < 22; i++ {
		many = append(many, GridFault{X: i % 11, Y: i / 11}) // two per column
	}
	if _, err := LargestAllocation(30, 30, many); err == nil || !strings.Contains(err.Error(), "limited") {
		t.Errorf("too many clustered faults: %v", err)
	}
}
