package algo

import (
	"context"
	"fmt"
)

// Lending: a schedule whose messages are large enough lends them (see
// LendPeers) instead of sending them, so that every byte is copied once,
// by its receiver, and the sender does not wait for each copy but for all
// of them at the end (settleAll). Receivers need not know: a lent message
// is received as any other (the transport tells them apart).

// cancelled is a context that has ended: a wait under it gives up at once.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// lendFloor: blocks below it are never lent, whatever the transport
// offers: a descriptor and its completion cost more than copying so few
// bytes twice, and asking the transport for every block would cost the
// smallest exchanges their time.
const lendFloor = 4 << 10

// LendFirst is how many times the smallest message a connection lends a
// ring's or a tree's chunks must be to be lent even where they could go
// inline through its buffers: one copy instead of two then pays for the
// descriptor and the wait for the receiver's copy. The connection's
// minimum says what lending costs there (shared memory lends from 16 KiB
// where every process has a core, from 64 KiB where they outnumber the
// cores). Measured on 2 cores, AllGather, medians of 4-6 rotating rounds:
// at 2 processes (lending from 16 KiB) blocks of 32 KiB took 6.30 us lent
// against 7.19 inline, of 48 KiB 7.51 against 10.5 (Open MPI's vader:
// 6.97, 8.24), of 64 KiB 7.6 against 11.1, of 128 KiB 13.5 against 22.3,
// of 512 KiB 69 against 101; at 4 processes (from 64 KiB) blocks of 64 KiB
// took 91 us lent against 64 inline, of 128 KiB 173 against 205 (vader
// 151; 173 against 165 when first measured, on an earlier build).
const LendFirst = 2

// lendsFirst reports whether lp, which lends messages of n bytes to every
// rank of tos, lends them even where they could go inline (see
// LendFirst).
func lendsFirst(lp LendPeers, tos []int, n int) bool {
	for _, to := range tos {
		if n < LendFirst*lp.LendMin(to) {
			return false
		}
	}
	return true
}

// lent reports whether the block of n bytes to peer to is lent through l.
func lent(l LendPeers, to, n int) bool {
	if l == nil || n < lendFloor {
		return false
	}
	m := l.LendMin(to)
	return m > 0 && n >= m
}

// WholeLendPeers is implemented by LendPeers whose transport has its own
// rule for the messages the receiver takes whole: those in memory the
// receiver maps are lent below LendMin, and by size such messages are lent
// from their own threshold, below LendMin or above it (see
// transport.WholeLender). A receiver cannot tell them in advance, so a
// schedule asks only where the receiver takes the message whole either
// way.
type WholeLendPeers interface {
	// LendsWhole reports whether Lend lends buf, which peer takes whole,
	// whatever its size against LendMin(peer).
	LendsWhole(peer int, buf []byte) bool
}

// lentBlock reports whether the all-to-all block blk to peer to is lent
// through l. A block its receiver takes whole whether it is lent or not
// (wholeBlock) is lent as l's rule for whole messages says if it has one
// (WholeLendPeers: for the memory it lies in, or its size); otherwise by
// its size (lent), which its receiver knows too. A block taken whole
// and not lent is sent whole.
func lentBlock(l LendPeers, to int, blk []byte) bool {
	if l == nil || len(blk) < lendFloor {
		return false
	}
	if s, ok := l.(WholeLendPeers); ok && wholeBlock(l, to, len(blk)) {
		return s.LendsWhole(to, blk)
	}
	return lent(l, to, len(blk))
}

// wholeBlock reports whether the receiver of the all-to-all block of n
// bytes to peer to takes it whole, in one message (recvBlocks): where it
// is at most a piece, or lent by size through l (lentFrom on its side).
func wholeBlock(l LendPeers, to, n int) bool {
	return n <= pairwiseChunk || lent(l, to, n)
}

// lentFrom reports whether peer from lends its block of n bytes to this
// rank through l: what lent reports on from's side.
func lentFrom(l LendPeers, from, n int) bool {
	if l == nil || n < lendFloor {
		return false
	}
	m := l.LentMin(from)
	return m > 0 && n >= m
}

// lastChunk returns the length of the last, and smallest, chunk of a
// block of n > 0 bytes cut into chunks of chunk bytes.
func lastChunk(n, chunk int) int { return n - (numChunks(n, chunk)-1)*chunk }

// lender returns p as LendPeers if it lends every message of smallest
// bytes or more to each rank of tos, and nil if it does not.
func lender(p Peers, tos []int, smallest int) LendPeers {
	if smallest < lendFloor {
		return nil
	}
	lp, ok := p.(LendPeers)
	if !ok {
		return nil
	}
	for _, to := range tos {
		if !lent(lp, to, smallest) {
			return nil
		}
	}
	return lp
}

// settleAll waits until every rank of tos has copied what this rank lent
// it, after the exchange that lent them returned err: if it failed, the
// lent messages are withdrawn at once. It returns the first error, the
// exchange's first; a settling error names the schedule and this rank, r.
func settleAll(ctx context.Context, lp LendPeers, tos []int, err error, schedule string, r int) error {
	settle := ctx
	if err != nil {
		settle = cancelled
	}
	for _, to := range tos {
		if serr := lp.Settle(settle, to); serr != nil && err == nil {
			err = fmt.Errorf("%s: rank %d: rank %d taking what was lent to it: %w", schedule, r, to, serr)
			settle = cancelled
		}
	}
	return err
}
