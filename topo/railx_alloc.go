package topo

import (
	"fmt"
	"sort"
)

// Largest single allocation of a faulty RailX grid (RailX: A Flexible, Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM Training Systems
// "Reconfiguration and faults"; the paper's appendix A.5, Algorithm 2
// "Maximum availability in faulted grid").
//
// A RailX job needs a full sub-grid: rows of nodes joined by their X rails
// and columns by their Y rails. A failed node must leave it, which takes
// its whole row or its whole column out (the rings of that row or column
// are rebuilt over the remaining nodes). The largest allocation keeps as
// many nodes as possible. Algorithm 2, generalised from n x n to X x Y
// (row y = the nodes (*, y), column x = the nodes (x, *)):
//
//  1. split the faults into isolated ones (no other fault in their row or
//     column) and clustered ones C (sharing a row or column with another);
//  2. if C is empty, disabling r' rows and c' = |F| - r' columns of the
//     isolated faults leaves (Y - r')(X - c') nodes; take the best r'
//     (for X = Y = n this is (n - ceil(|F|/2))(n - floor(|F|/2)), the
//     paper's closed form);
//  3. otherwise enumerate the 2^|C| ways to disable, for each clustered
//     fault, its row (0) or its column (1); with r_i distinct rows and c_i
//     distinct columns disabled, split the isolated faults as before and
//     keep the best (Y - r_i - r')(X - c_i - c').
//
// Isolated faults have rows and columns of their own, so each needs
// exactly one of them disabled and they never interact. The enumeration is
// exponential in |C| (the paper: faults are sparse, so |C| is small);
// LargestAllocation refuses more than MaxClusteredFaults clustered faults.
// Ties go to the first choice found (masks in increasing order, fewer
// disabled rows first); the isolated faults given rows are the first r'
// in (x, y) order.

// MaxClusteredFaults bounds the clustered (non-isolated) faults that
// LargestAllocation enumerates (2^MaxClusteredFaults cases).
const MaxClusteredFaults = 20

// GridFault is a failed node of a RailX grid, by column X and row Y.
type GridFault struct {
	// X is the column, Y the row of the failed node.
	X int `json:"x"`
	Y int `json:"y"`
}

// Allocation is a sub-grid of a RailX grid that avoids every fault: the
// nodes (x, y) with x in Cols and y in Rows.
type Allocation struct {
	// Size is the number of nodes, len(Rows)*len(Cols).
	Size int `json:"size"`
	// Rows and Cols are the kept rows (y) and columns (x), ascending.
	Rows []int `json:"rows"`
	Cols []int `json:"cols"`
	// DisabledRows and DisabledCols are the ones taken out, ascending.
	DisabledRows []int `json:"disabled_rows"`
	DisabledCols []int `json:"disabled_cols"`
}

// LargestAllocation returns the largest fault-free sub-grid of an x by y
// RailX grid (x columns, y rows) that Algorithm 2 finds by disabling, for
// every failed node, its row or its column. Duplicate faults count once; a
// fault outside the grid, or more than MaxClusteredFaults faults sharing
// rows or columns, is an error.
func LargestAllocation(x, y int, faults []GridFault) (*Allocation, error) {
	if x < 1 || y < 1 {
		return nil, fmt.Errorf("allocation: grid %dx%d: want positive sizes", x, y)
	}
	if _, err := checkProduct("allocation grid", x, y); err != nil {
		return nil, err
	}
	seen := map[GridFault]bool{}
	var fs []GridFault
	for _, f := range faults {
		if f.X < 0 || f.X >= x || f.Y < 0 || f.Y >= y {
			return nil, fmt.Errorf("allocation: fault (%d,%d) is outside the %dx%d grid", f.X, f.Y, x, y)
		}
		if !seen[f] {
			seen[f] = true
			fs = append(fs, f)
		}
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].X != fs[j].X {
			return fs[i].X < fs[j].X
		}
		return fs[i].Y < fs[j].Y
	})
	perRow, perCol := map[int]int{}, map[int]int{}
	for _, f := range fs {
		perRow[f.Y]++
		perCol[f.X]++
	}
	var isolated, clustered []GridFault
	for _, f := range fs {
		if perRow[f.Y] == 1 && perCol[f.X] == 1 {
			isolated = append(isolated, f)
		} else {
			clustered = append(clustered, f)
		}
	}
	if len(clustered) > MaxClusteredFaults {
		return nil, fmt.Errorf("allocation: %d faults share a row or column with another fault; Algorithm 2 enumerates 2^%d cases and is limited to %d", len(clustered), len(clustered), MaxClusteredFaults)
	}
	// Dense indices of the clustered faults' rows and columns.
	rowIdx, colIdx := map[int]int{}, map[int]int{}
	for _, f := range clustered {
		if _, ok := rowIdx[f.Y]; !ok {
			rowIdx[f.Y] = len(rowIdx)
		}
		if _, ok := colIdx[f.X]; !ok {
			colIdx[f.X] = len(colIdx)
		}
	}
	rowMark := make([]int, len(rowIdx))
	colMark := make([]int, len(colIdx))
	bestSize, bestMask, bestR := -1, 0, 0
	iso := len(isolated)
	for mask := 0; mask < 1<<len(clustered); mask++ {
		ri, ci := 0, 0
		for i, f := range clustered {
			if mask>>i&1 == 0 {
				if j := rowIdx[f.Y]; rowMark[j] != mask+1 {
					rowMark[j] = mask + 1
					ri++
				}
			} else if j := colIdx[f.X]; colMark[j] != mask+1 {
				colMark[j] = mask + 1
				ci++
			}
		}
		for r := 0; r <= iso; r++ {
			rows, cols := y-ri-r, x-ci-(iso-r)
			size := 0
			if rows > 0 && cols > 0 {
				size = rows * cols
			}
			if size > bestSize {
				bestSize, bestMask, bestR = size, mask, r
			}
		}
	}
	offRow, offCol := map[int]bool{}, map[int]bool{}
	for i, f := range clustered {
		if bestMask>>i&1 == 0 {
			offRow[f.Y] = true
		} else {
			offCol[f.X] = true
		}
	}
	for i, f := range isolated {
		if i < bestR {
			offRow[f.Y] = true
		} else {
			offCol[f.X] = true
		}
	}
	a := &Allocation{Rows: []int{}, Cols: []int{}, DisabledRows: []int{}, DisabledCols: []int{}}
	for j := 0; j < y; j++ {
		if offRow[j] {
			a.DisabledRows = append(a.DisabledRows, j)
		} else {
			a.Rows = append(a.Rows, j)
		}
	}
	for i := 0; i < x; i++ {
		if offCol[i] {
			a.DisabledCols = append(a.DisabledCols, i)
		} else {
			a.Cols = append(a.Cols, i)
		}
	}
	a.Size = len(a.Rows) * len(a.Cols)
	return a, nil
}
