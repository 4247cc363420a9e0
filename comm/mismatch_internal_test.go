package comm

import (
	"strings"
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// TestDescribeMismatch checks that a mismatch report names what differs
// between the two headers and never presents equal values as the
// difference.
func TestDescribeMismatch(t *testing.T) {
	base := transport.Header{Kind: transport.KindCollective, Op: uint8(algo.OpAllToAllV), DType: uint8(algo.Float32), Comm: 7, Epoch: 1, Step: 1, Seq: 3, Len: 8}
	cases := []struct {
		name   string
		got    func(h *transport.Header)
		want   []string
		reject []string
	}{
		{"length", func(h *transport.Header) { h.Len = 12 },
			[]string{"sent step 1 of 12 bytes", "expected step 1 of 8 bytes", "disagree on"}, nil},
		{"step", func(h *transport.Header) { h.Step = 2 },
			[]string{"sent step 2 of 8 bytes", "expected step 1 of 8 bytes"}, nil},
		// A count AllToAllV's description leaves out: the report must
		// name the counts, not two equal steps and sizes.
		{"count only", func(h *transport.Header) { h.Count = 5 },
			[]string{"count=5", "count=0"}, []string{"expected step", "disagree on"}},
		{"op", func(h *transport.Header) { h.Op = uint8(algo.OpBarrier) },
			[]string{"rank 2 called Barrier", "rank 0 called AllToAllV"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := base
			tc.got(&got)
			msg := describeMismatch(0, 2, &transport.MismatchError{Got: got, Want: base})
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			for _, r := range tc.reject {
				if strings.Contains(msg, r) {
					t.Errorf("%q says %q", msg, r)
				}
			}
		})
	}
}
