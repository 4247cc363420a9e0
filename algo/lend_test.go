package algo

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/occl/occl/algo/internal/fakepeers"
)

// TestLentBroadcastAndAllGather: with peers that lend messages of 5000
// bytes or more, the tree broadcast (out of place on the root; where the
// ranks are crowded and it is more than one chunk, or from ranks with
// several children) and the ring
// allgather lend every
// chunk where every chunk a rank sends is that large (each chunk lent once
// per receiver, every peer lent to settled once) and send them all where
// one is not (nothing lent), and every rank ends with the right bytes
// either way. Chunks that fit the connections' buffers are lent only from
// LendFirst times the smallest message lent. The ring lends and receives
// in turn.
func TestLentBroadcastAndAllGather(t *testing.T) {
	const lendMin = 5000
	for _, p := range testRanks[1:] {
		for _, tc := range []struct {
			n, chunk, eager int
			lends           bool
		}{
			{3 * 6000, 6000, 1 << 10, true},      // three whole chunks
			{2*6000 + 5500, 6000, 1 << 10, true}, // the last chunk above the minimum
			{2*6000 + 17, 6000, 1 << 10, false},  // the last chunk below it
			{5200, 0, 1 << 10, true},             // one message
			{4000, 0, 1 << 10, false},            // below the minimum
			// Chunks that go inline are lent from LendFirst times the
			// minimum.
			{6000, 0, 1 << 20, false},
			{LendFirst * lendMin, 0, 1 << 20, true},
		} {
			t.Run(fmt.Sprintf("p%d/n%d/chunk%d/eager%d", p, tc.n, tc.chunk, tc.eager), func(t *testing.T) {
				t.Parallel()
				chunks := numChunks(tc.n, chunkSize(tc.chunk, 1))
				opts := fakepeers.Options{EagerLimit: tc.eager}
				// Broadcast of n bytes from the middle rank, out of place
				// there.
				root := p / 2
				want := make([]byte, tc.n)
				for j := range want {
					want[j] = byte(j*7 + 3)
				}
				bufs := make([][]byte, p)
				rec := make([]*lenders, p)
				for r := range bufs {
					bufs[r] = bytes.Repeat([]byte{0xEE}, tc.n)
				}
				src := bytes.Clone(want)
				for _, crowded := range []bool{true, false} {
					for r := range bufs {
						bufs[r] = bytes.Repeat([]byte{0xEE}, tc.n)
					}
					runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
						rec[rank] = newLenders(peers, lendMin)
						return broadcastTree(ctx, rec[rank], src, bufs[rank], root, tc.chunk, crowded)
					})
					if !bytes.Equal(src, want) {
						t.Fatal("broadcast: the root's source changed")
					}
					// Crowded, every rank lends to its children, but
					// nothing of a broadcast of one chunk; otherwise only
					// ranks with several children do.
					lent := 0
					for r := range p {
						if children := treeChildren(mod(r-root, p), root, p, nil); crowded || len(children) > 1 {
							lent += len(children) * chunks
						}
					}
					lends := tc.lends && (chunks > 1 || !crowded)
					checkLends(t, fmt.Sprintf("broadcast (crowded: %v)", crowded), rec, lends, lent)
					for r := range bufs {
						if d := firstDiff(bufs[r], want, 1); d != "" {
							t.Fatalf("broadcast (crowded: %v): rank %d: %s", crowded, r, d)
						}
					}
				}
				// AllGather of blocks of n bytes.
				offs, lens := make([]int, p), make([]int, p)
				full := make([]byte, p*tc.n)
				for b := range p {
					offs[b], lens[b] = b*tc.n, tc.n
					for j := range tc.n {
						full[b*tc.n+j] = byte(b*31 + j)
					}
				}
				for r := range bufs {
					bufs[r] = bytes.Repeat([]byte{0xEE}, p*tc.n)
					copy(bufs[r][offs[r]:offs[r]+tc.n], full[offs[r]:])
				}
				runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
					rec[rank] = newLenders(peers, lendMin)
					return AllGatherRing(ctx, rec[rank], bufs[rank], offs, lens, tc.chunk)
				})
				checkLends(t, "allgather", rec, tc.lends, p*(p-1)*chunks)
				// Lends and receives alternate, so that no connection
				// piles up descriptors.
				for r, l := range rec {
					if l.maxAhead > 1 {
						t.Errorf("allgather: rank %d lent %d chunks in a row without receiving", r, l.maxAhead)
					}
				}
				for r := range bufs {
					if d := firstDiff(bufs[r], full, 1); d != "" {
						t.Fatalf("allgather: rank %d: %s", r, d)
					}
				}
			})
		}
	}
}

// checkLends checks that the ranks of rec lent total chunks in all if
// lends, none otherwise, and settled every peer they lent to once.
func checkLends(t *testing.T, what string, rec []*lenders, lends bool, total int) {
	t.Helper()
	n := 0
	for r, l := range rec {
		for peer, k := range l.lent {
			n += k
			if l.settled[peer] != 1 {
				t.Errorf("%s: rank %d lent %d chunks to rank %d and settled %d times, want once", what, r, k, peer, l.settled[peer])
			}
		}
	}
	if want := map[bool]int{true: total, false: 0}[lends]; n != want {
		t.Errorf("%s: %d chunks lent, want %d", what, n, want)
	}
}
