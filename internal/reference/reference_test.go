package reference

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/occl/occl/algo"
)

// The reference is checked against results worked out by hand.
func TestHandComputed(t *testing.T) {
	// Sum inputs at index 0: ranks 0,1,2 give -3, 2, 0 (rank*5 mod 7 - 3).
	if g := []int64{Gen(algo.Sum, 0, 0), Gen(algo.Sum, 1, 0), Gen(algo.Sum, 2, 0)}; g[0] != -3 || g[1] != 2 || g[2] != 0 {
		t.Fatalf("Gen = %v", g)
	}
	b := Reduced(algo.Int32, algo.Sum, 3, 0, 1)
	if v := int32(binary.LittleEndian.Uint32(b)); v != -1 {
		t.Fatalf("int32 sum = %d, want -1", v)
	}
	// uint8 wraps: -1 is 255.
	if b := Reduced(algo.Uint8, algo.Sum, 3, 0, 1); b[0] != 255 {
		t.Fatalf("uint8 sum = %d, want 255", b[0])
	}
	// Avg of -1 over 3 ranks truncates to 0 for ints and is -1/3 in float32.
	if b := Reduced(algo.Int8, algo.Avg, 3, 0, 1); b[0] != 0 {
		t.Fatalf("int8 avg = %d", int8(b[0]))
	}
	f := math.Float32frombits(binary.LittleEndian.Uint32(Reduced(algo.Float32, algo.Avg, 3, 0, 1)))
	if f != float32(-1)/3 {
		t.Fatalf("float32 avg = %v", f)
	}
	// Max at index 0 of ranks 0..2: -100, -63, -26.
	if b := Reduced(algo.Int64, algo.Max, 3, 0, 1); int64(binary.LittleEndian.Uint64(b)) != -26 {
		t.Fatalf("int64 max = %d", int64(binary.LittleEndian.Uint64(b)))
	}
	// Unsigned min compares as unsigned: -100 (156), -63 (193), -26 (230).
	if b := Reduced(algo.Uint8, algo.Min, 3, 0, 1); b[0] != 156 {
		t.Fatalf("uint8 min = %d", b[0])
	}
	// Prod at index 0 over ranks 0..4: 1 * -1 * 2 * 1 * -1 = 2.
	if b := Reduced(algo.Float16, algo.Prod, 5, 0, 1); binary.LittleEndian.Uint16(b) != 0x4000 {
		t.Fatalf("float16 prod = %#04x, want 0x4000 (2.0)", binary.LittleEndian.Uint16(b))
	}
}

// Every rank must contribute differently, or a schedule that counts one
// rank twice and another not at all would pass.
func TestInputsDependOnRank(t *testing.T) {
	for _, op := range algo.Ops() {
		same := 0
		for i := 0; i < 100; i++ {
			if Gen(op, 0, i) == Gen(op, 1, i) && Gen(op, 1, i) == Gen(op, 2, i) {
				same++
			}
		}
		if same > 30 {
			t.Errorf("%s: ranks 0-2 share the input at %d of 100 indices", op, same)
		}
	}
}
