package comm

import (
	"strings"
	"testing"
)

func TestStatusRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 600)
	for _, s := range []status{
		{ok: true},
		{ok: true, applied: true},
		{rank: 7, step: "verify", reason: "link to rank 3: closed", applied: true, rollback: true},
		{rank: 1 << 20, step: "connect-and-more-than-sixteen", reason: long},
	} {
		b := make([]byte, statusSize)
		s.encode(b)
		got := decodeStatus(b)
		want := s
		want.step = s.step[:min(len(s.step), 16)]
		want.reason = s.reason[:min(len(s.reason), statusSize-28)]
		if got != want {
			t.Errorf("decode(encode(%+v)) = %+v", want, got)
		}
	}
}

// FuzzDecodeStatus: a status or verdict read off a connection, whatever its
// bytes, decodes without panicking into one that encodes to the same
// status.
func FuzzDecodeStatus(f *testing.F) {
	b := make([]byte, statusSize)
	status{rank: 3, step: "verify", reason: "no light", applied: true, rollback: true}.encode(b)
	f.Add(b)
	f.Add(make([]byte, statusSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := make([]byte, statusSize)
		copy(b, in)
		s := decodeStatus(b)
		if len(s.step) > 16 || len(s.reason) > statusSize-28 {
			t.Fatalf("decoded step of %d bytes, reason of %d", len(s.step), len(s.reason))
		}
		out := make([]byte, statusSize)
		s.encode(out)
		if again := decodeStatus(out); again != s {
			t.Fatalf("re-encoded %+v decodes to %+v", s, again)
		}
	})
}
