package algo

import (
	"context"
	"fmt"
)

// BarrierDissemination returns once every rank has called it.
//
// # Dissemination barrier
//
// In round k = 0 .. ceil(log2 p)-1 every rank r signals rank (r+2^k) mod p
// and waits for the signal of rank (r-2^k) mod p. After round k every rank
// has heard, directly or transitively, from the 2^(k+1)-1 ranks before it,
// so after ceil(log2 p) rounds from all ranks: no rank leaves the barrier
// before every rank has entered it. It works for any p, power of two or
// not (Hensgen, Finkel and Manber, 1988).
//
// Communication steps: ceil(log2 p). Message step labels: k.
//
// Bytes on the wire: ceil(log2 p) zero-length messages sent and received
// per rank.
func BarrierDissemination(ctx context.Context, p Peers) error {
	size, r := p.Size(), p.Rank()
	for k, d := 0, 1; d < size; k, d = k+1, d*2 {
		to, from := mod(r+d, size), mod(r-d, size)
		if err := SendRecv(ctx, p, to, uint32(k), nil, from, uint32(k), nil); err != nil {
			return fmt.Errorf("dissemination barrier: rank %d round %d: %w", r, k, err)
		}
	}
	return nil
}
