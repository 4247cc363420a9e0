// Completion-time model of one all-to-all under a circuit assignment, used
// to compare planners (mFabric sec. 5.2 defines the bottleneck as "the link
// that has the longest completion time given the demand matrix D and
// allocated link matrix C"; the packet-network side follows the hybrid
// OCS + EPS fabric of sec. 4 and the routing of sec. 5.3).
//
// Model, for a directed server demand S (bytes from server i to server j)
// and circuit counts C:
//
//  1. Everything starts at once and runs concurrently; the diagonal
//     (traffic inside a server) is free.
//  2. A pair with C[i][j] > 0 circuits sends only over them (mFabric
//     prefers circuits over the packet network). Circuits are full duplex,
//     OCS bytes/s each way, and a pair's traffic is split evenly over its
//     circuits: the pair takes max(S[i][j], S[j][i]) / (C[i][j] * OCS).
//  3. A pair with no circuit goes over the packet network. Each server has
//     one packet NIC of EPS bytes/s each way, shared by all of its
//     non-circuit traffic; the core is non-blocking. Server i takes
//     max(TX_i, RX_i) / EPS, TX_i = sum of S[i][j], RX_i = sum of S[j][i]
//     over the j with C[i][j] = 0.
//  4. The completion time is the largest of all these times.
//
// Given an upper-triangular D (ServerDemand) instead of a directed S, step 2
// becomes the paper's D / (C * OCS) with TX and RX lumped together. Not
// modelled: latency, the intra-server forwarding to delegation GPUs, and
// splitting a circuit pair's traffic onto the packet network.
//
// MaxT is the paper's own measure, max over pairs of D/C (+Inf for a pair
// with demand and no circuit); it ignores the packet network.
//
// Adding a circuit never increases the modelled time when OCS >= EPS: the
// pair it serves loses at most its packet-network time and the other
// terms only shrink. That is why MFabricContinue, which only adds circuits
// to MFabric's plan, is never worse under this model.

package plan

import (
	"fmt"
	"math"
)

// Bandwidths are the link speeds of the completion-time model, in bytes
// per second in each direction.
type Bandwidths struct {
	// OCS is the bandwidth of one optical circuit; it must be positive.
	OCS float64
	// EPS is the bandwidth of a server's packet-network NIC, shared by the
	// server's traffic to servers it has no circuit to; 0 means there is
	// no packet network (such traffic never completes: +Inf).
	EPS float64
}

// DefaultBandwidths are mFabric's prototype NICs: 100 Gb/s circuits and a
// 100 Gb/s packet NIC per server.
func DefaultBandwidths() Bandwidths { return Bandwidths{OCS: 12.5e9, EPS: 12.5e9} }

func (bw Bandwidths) check() error {
	if !(bw.OCS > 0) || math.IsInf(bw.OCS, 0) {
		return fmt.Errorf("%w: circuit bandwidth %v", ErrDemand, bw.OCS)
	}
	if !(bw.EPS >= 0) || math.IsInf(bw.EPS, 0) {
		return fmt.Errorf("%w: packet bandwidth %v", ErrDemand, bw.EPS)
	}
	return nil
}

// Completion is the outcome of the completion-time model.
type Completion struct {
	// Time is the completion time in seconds: max(OCS, EPS).
	Time float64
	// OCS is the time of the slowest circuit pair, EPS of the slowest
	// packet NIC.
	OCS, EPS float64
	// Pair is the slowest circuit pair (i < j), {-1, -1} if none carries
	// traffic; Server the server with the slowest packet NIC, -1 if none.
	Pair   [2]int
	Server int
}

// checkCircuits checks that c is a symmetric n by n matrix of
// non-negative counts with a zero diagonal.
func checkCircuits(c [][]int, n int) error {
	if len(c) != n {
		return fmt.Errorf("%w: %d circuit rows for %d servers", ErrDemand, len(c), n)
	}
	for i, row := range c {
		if len(row) != n {
			return fmt.Errorf("%w: circuit row %d has %d entries, want %d", ErrDemand, i, len(row), n)
		}
	}
	for i, row := range c {
		if row[i] != 0 {
			return fmt.Errorf("%w: %d circuits from server %d to itself", ErrDemand, row[i], i)
		}
		for j, k := range row {
			if k < 0 || k != c[j][i] {
				return fmt.Errorf("%w: circuits %d,%d = %d and %d,%d = %d: want a symmetric non-negative matrix", ErrDemand, i, j, k, j, i, c[j][i])
			}
		}
	}
	return nil
}

// Evaluate returns the completion time of the directed server demand s
// (bytes from server i to server j; an upper-triangular matrix gives the
// paper's lumped TX+RX accounting) under the circuit counts c, with the
// model described at the top of completion.go.
func Evaluate(s [][]float64, c [][]int, bw Bandwidths) (Completion, error) {
	out := Completion{Pair: [2]int{-1, -1}, Server: -1}
	n, err := checkSquare(s)
	if err != nil {
		return out, err
	}
	if err := checkCircuits(c, n); err != nil {
		return out, err
	}
	if err := bw.check(); err != nil {
		return out, err
	}
	for i := 0; i < n; i++ {
		tx, rx := 0.0, 0.0
		for j := 0; j < n; j++ {
			if j == i {
				continue
			}
			if k := c[i][j]; k > 0 {
				if j > i {
					if t := max(s[i][j], s[j][i]) / (float64(k) * bw.OCS); t > out.OCS {
						out.OCS, out.Pair = t, [2]int{i, j}
					}
				}
				continue
			}
			tx += s[i][j]
			rx += s[j][i]
		}
		load := max(tx, rx)
		if load == 0 {
			continue
		}
		t := math.Inf(1)
		if bw.EPS > 0 {
			t = load / bw.EPS
		}
		if t > out.EPS {
			out.EPS, out.Server = t, i
		}
	}
	out.Time = max(out.OCS, out.EPS)
	return out, nil
}

// CompletionTime is Evaluate's Time.
func CompletionTime(s [][]float64, c [][]int, bw Bandwidths) (float64, error) {
	r, err := Evaluate(s, c, bw)
	return r.Time, err
}

// MaxT is the paper's bottleneck measure: the largest T = D/C over server
// pairs, the pair demand of i < j being d[i][j] + d[j][i] (TX + RX), +Inf
// if a pair with demand has no circuit, 0 if there is no demand. It is in
// bytes per circuit; divide by a circuit's bandwidth for seconds.
func MaxT(d [][]float64, c [][]int) (float64, error) {
	n, err := checkSquare(d)
	if err != nil {
		return 0, err
	}
	if err := checkCircuits(c, n); err != nil {
		return 0, err
	}
	worst := 0.0
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			v := d[i][j] + d[j][i]
			if v == 0 {
				continue
			}
			if c[i][j] == 0 {
				return math.Inf(1), nil
			}
			worst = max(worst, v/float64(c[i][j]))
		}
	}
	return worst, nil
}
