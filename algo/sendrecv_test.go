package algo

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/occl/occl/algo/internal/fakepeers"
)

// TestSendRecvDuplex: SendRecv with one peer both ways exchanges through
// a duplex connection (DuplexPeers) when both messages are at most a
// piece and within its limit, and as a send and a receive otherwise (two
// peers, a larger message); the messages arrive intact either way.
func TestSendRecvDuplex(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 64
	for _, tc := range []struct {
		ranks, n, limit int
		want            int64
	}{
		{2, 64, 64, 1},  // one peer, within a piece and the limit
		{2, 40, 32, 0},  // over the connection's limit
		{2, 65, 100, 0}, // over a piece
		{3, 16, 64, 0},  // to one peer, from another
		{2, 0, 0, 0},    // empty messages on a connection that is not duplex
	} {
		t.Run(fmt.Sprintf("ranks%d/n%d/limit%d", tc.ranks, tc.n, tc.limit), func(t *testing.T) {
			counts := make([]atomic.Int64, tc.ranks)
			runRanks(t, tc.ranks, fakepeers.Options{EagerLimit: -1, DuplexMax: tc.limit}, func(ctx context.Context, rank int, p Peers) error {
				d := duplexCount{p.(DuplexPeers), &counts[rank], false}
				to, from := (rank+1)%tc.ranks, (rank+tc.ranks-1)%tc.ranks
				sbuf, rbuf := bytes.Repeat([]byte{byte(rank + 1)}, tc.n), make([]byte, tc.n)
				if err := SendRecv(ctx, d, to, 5, sbuf, from, 5, rbuf); err != nil {
					return err
				}
				if !bytes.Equal(rbuf, bytes.Repeat([]byte{byte(from + 1)}, tc.n)) {
					return fmt.Errorf("rank %d: message from rank %d corrupted", rank, from)
				}
				return nil
			})
			for r := range counts {
				if g := counts[r].Load(); g != tc.want {
					t.Errorf("rank %d made %d exchanges, want %d", r, g, tc.want)
				}
			}
		})
	}
}
