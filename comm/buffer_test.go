package comm_test

import (
	"testing"

	"github.com/occl/occl/comm"
)

// TestBufferSlice: Slice(i, j) is elements [i, j) of the buffer, and
// panics, as slicing does, unless 0 <= i <= j <= Len(): also for bounds so
// large that their offsets in bytes would overflow back into the buffer,
// and for bounds past the buffer's length within the capacity of the
// memory it views.
func TestBufferSlice(t *testing.T) {
	const maxInt = int(^uint(0) >> 1)
	backing := make([]float32, 4, 8)
	for i := range backing {
		backing[i] = float32(i)
	}
	b := comm.Slice(backing)
	for _, tc := range []struct{ i, j int }{{0, 4}, {1, 3}, {2, 2}, {4, 4}, {0, 0}} {
		s := b.Slice(tc.i, tc.j)
		if s.Len() != tc.j-tc.i || s.DType() != comm.Float32 {
			t.Errorf("Slice(%d, %d): %d elements of %s, want %d of float32", tc.i, tc.j, s.Len(), s.DType(), tc.j-tc.i)
			continue
		}
		if s.Len() > 0 && &s.Bytes()[0] != &comm.Slice(backing[tc.i:]).Bytes()[0] {
			t.Errorf("Slice(%d, %d) does not start at element %d", tc.i, tc.j, tc.i)
		}
	}
	for _, tc := range []struct {
		name string
		i, j int
	}{
		{"negative start", -1, 2},
		{"start after end", 3, 2},
		{"end past the length", 0, 5},
		{"end within the capacity", 4, 8},
		{"start past the length", 5, 5},
		// 4-byte elements: 1<<62 elements are 1<<64 bytes, 0 in an int.
		{"start overflowing to 0 bytes", 1 << 62, 1 << 62},
		{"end overflowing to 4 bytes", 0, 1<<62 + 1},
		{"huge", maxInt, maxInt},
	} {
		var s comm.Buffer
		if v := recovered(func() { s = b.Slice(tc.i, tc.j) }); v == nil {
			t.Errorf("%s: Slice(%d, %d) returned %d elements, want a panic", tc.name, tc.i, tc.j, s.Len())
		}
	}
	// A buffer of unknown dtype has no elements.
	raw := comm.Raw(make([]byte, 8), comm.DType(99))
	if s := raw.Slice(0, 0); s.Len() != 0 {
		t.Errorf("Slice(0, 0) of an unknown dtype: %d elements", s.Len())
	}
	if v := recovered(func() { raw.Slice(0, 1) }); v == nil {
		t.Errorf("Slice(0, 1) of a buffer of unknown dtype did not panic")
	}
}
