package comm

import (
	"strings"
	"testing"

	"github.com/occl/occl/comm/internal/wire"
)

// TestStatusRoundTrip: a status or verdict crosses a data connection as a
// frame of statusSize bytes with its target's digest, the reason cut to
// fit, and is refused where the other type is expected.
func TestStatusRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 600)
	for _, s := range []outcome{
		{ok: true},
		{ok: true, applied: true},
		{rank: 7, step: "verify", reason: "link to rank 3: closed", applied: true, rollback: true},
		{rank: 1 << 20, step: "connect", reason: long},
	} {
		for _, typ := range []wire.Type{wire.RewireStatus, wire.RewireVerdict} {
			b := s.frame(typ, 1<<64-3)
			if len(b) != statusSize {
				t.Fatalf("%v: frame of %d bytes", s, len(b))
			}
			got, digest, err := parseOutcome(b, typ)
			want := s
			if len(want.reason) > len(got.reason) && strings.HasPrefix(want.reason, got.reason) && len(got.reason) > statusSize-40 {
				want.reason = got.reason
			}
			if err != nil || got != want || digest != 1<<64-3 {
				t.Errorf("parse(frame(%v)) = %v, %x, %v", s, got, digest, err)
			}
			other := wire.RewireStatus + wire.RewireVerdict - typ
			if _, _, err := parseOutcome(b, other); err == nil {
				t.Errorf("a frame of type %d parsed as type %d", typ, other)
			}
		}
	}
}
