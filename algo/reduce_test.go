package algo

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// The reference model below is written independently of the kernels: it
// decodes elements with encoding/binary and explicit bit-field arithmetic,
// computes integer results exactly with math/big before truncating them to
// the element width, computes float sums and products exactly with big.Float
// before rounding them once to the element type, and rounds to float16 and
// bfloat16 with its own Frexp/RoundToEven arithmetic. It uses neither the
// half package nor the kernels' typed views.

// krefFloatFormat returns the exponent and fraction widths of a float type.
func krefFloatFormat(dt DType) (expBits, fracBits int) {
	switch dt {
	case Float16:
		return 5, 10
	case BFloat16:
		return 8, 7
	case Float32:
		return 8, 23
	default:
		return 11, 52
	}
}

// krefBits reads element i of buf as an unsigned integer.
func krefBits(buf []byte, dt DType, i int) uint64 {
	e := buf[i*dt.Size() : (i+1)*dt.Size()]
	switch dt.Size() {
	case 1:
		return uint64(e[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(e))
	case 4:
		return uint64(binary.LittleEndian.Uint32(e))
	default:
		return binary.LittleEndian.Uint64(e)
	}
}

// krefPutBits writes v as element i of buf.
func krefPutBits(buf []byte, dt DType, i int, v uint64) {
	e := buf[i*dt.Size() : (i+1)*dt.Size()]
	switch dt.Size() {
	case 1:
		e[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(e, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(e, uint32(v))
	default:
		binary.LittleEndian.PutUint64(e, v)
	}
}

func krefSigned(dt DType) bool { return dt == Int8 || dt == Int32 || dt == Int64 }

// krefInt decodes integer bits as the exact value they stand for.
func krefInt(dt DType, bits uint64) *big.Int {
	v := new(big.Int).SetUint64(bits)
	w := uint(dt.Size() * 8)
	if krefSigned(dt) && bits>>(w-1)&1 == 1 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), w))
	}
	return v
}

// krefTruncate returns v modulo 2^width as bits.
func krefTruncate(dt DType, v *big.Int) uint64 {
	w := uint(dt.Size() * 8)
	m := new(big.Int).Lsh(big.NewInt(1), w)
	r := new(big.Int).Mod(v, m) // non-negative
	return r.Uint64()
}

// krefFloat decodes float bits of any of the four float types.
func krefFloat(dt DType, bits uint64) float64 {
	expBits, fracBits := krefFloatFormat(dt)
	bias := 1<<(expBits-1) - 1
	e := int(bits>>fracBits) & (1<<expBits - 1)
	f := bits & (1<<fracBits - 1)
	neg := bits>>(expBits+fracBits)&1 == 1
	var v float64
	switch {
	case e == 1<<expBits-1 && f != 0:
		return math.NaN()
	case e == 1<<expBits-1:
		v = math.Inf(1)
	case e == 0:
		v = math.Ldexp(float64(f), 1-bias-fracBits)
	default:
		v = math.Ldexp(float64(f|1<<fracBits), e-bias-fracBits)
	}
	if neg {
		v = -v
	}
	return v
}

func krefIsNaN(dt DType, bits uint64) bool { return math.IsNaN(krefFloat(dt, bits)) }

// krefRoundSmall rounds a non-NaN x to the float16 or bfloat16 format,
// nearest even, and returns its bits.
func krefRoundSmall(dt DType, x float64) uint64 {
	expBits, fracBits := krefFloatFormat(dt)
	bias := 1<<(expBits-1) - 1
	var sign uint64
	if math.Signbit(x) {
		sign = 1 << (expBits + fracBits)
		x = -x
	}
	inf := uint64(1<<expBits-1) << fracBits
	if math.IsInf(x, 0) {
		return sign | inf
	}
	emin := 1 - bias
	_, e := math.Frexp(x) // x = f * 2^e with f in [0.5, 1)
	e--                   // now 2^e <= x < 2^(e+1)
	if x == 0 || e < emin {
		e = emin
	}
	m := math.RoundToEven(math.Ldexp(x, fracBits-e)) // significand in units of 2^(e-fracBits)
	one := float64(int64(1) << fracBits)             // the implicit leading bit
	if m == 2*one {
		m /= 2
		e++
	}
	if e > bias {
		return sign | inf
	}
	if m < one { // subnormal or zero
		return sign | uint64(m)
	}
	return sign | uint64(e+bias)<<fracBits | uint64(m-one)
}

// krefEncode rounds a result to dt. x is a non-finite or special value when
// exact is nil.
func krefEncode(dt DType, exact *big.Float, x float64) uint64 {
	if exact != nil {
		switch dt {
		case Float32:
			f, _ := exact.Float32()
			return uint64(math.Float32bits(f))
		case Float64:
			f, _ := exact.Float64()
			return math.Float64bits(f)
		}
		// Rounding the exact result to float64 and then to a format with
		// less than half float64's precision equals rounding it once.
		x, _ = exact.Float64()
	}
	switch dt {
	case Float32:
		return uint64(math.Float32bits(float32(x)))
	case Float64:
		return math.Float64bits(x)
	}
	if math.IsNaN(x) {
		panic("krefEncode: NaN")
	}
	return krefRoundSmall(dt, x)
}

func krefExact(x float64) *big.Float { return new(big.Float).SetPrec(2200).SetFloat64(x) }

// krefCombine returns x op y for one element; for floats ok is false when the
// result must be a NaN.
func krefCombine(dt DType, op Op, x, y uint64) (want uint64, nan bool) {
	if !dt.IsFloat() {
		a, b := krefInt(dt, x), krefInt(dt, y)
		r := new(big.Int)
		switch op {
		case Sum:
			r.Add(a, b)
		case Prod:
			r.Mul(a, b)
		case Max:
			r = a
			if b.Cmp(a) > 0 {
				r = b
			}
		case Min:
			r = a
			if b.Cmp(a) < 0 {
				r = b
			}
		}
		return krefTruncate(dt, r), false
	}

	a, b := krefFloat(dt, x), krefFloat(dt, y)
	if math.IsNaN(a) || math.IsNaN(b) {
		return 0, true
	}
	switch op {
	case Max, Min:
		r := a
		switch {
		case a == b: // equal; zeros may differ in sign: +0 is the larger
			if math.Signbit(a) == (op == Max) {
				r = b
			}
		case (b > a) == (op == Max):
			r = b
		}
		return krefEncode(dt, krefExact(r), 0), false
	}
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		// Exactly specified by IEEE 754 and by Go's float64 arithmetic.
		var r float64
		if op == Sum {
			r = a + b
		} else {
			r = a * b
		}
		if math.IsNaN(r) {
			return 0, true
		}
		return krefEncode(dt, nil, r), false
	}
	e := new(big.Float).SetPrec(2200)
	if op == Sum {
		e.Add(krefExact(a), krefExact(b))
		if e.Sign() == 0 { // exact zero: -0 only for (-0) + (-0)
			z := 0.0
			if math.Signbit(a) && math.Signbit(b) {
				z = math.Copysign(0, -1)
			}
			return krefEncode(dt, nil, z), false
		}
	} else {
		e.Mul(krefExact(a), krefExact(b))
		if e.Sign() == 0 {
			z := 0.0
			if math.Signbit(a) != math.Signbit(b) {
				z = math.Copysign(0, -1)
			}
			return krefEncode(dt, nil, z), false
		}
	}
	return krefEncode(dt, e, 0), false
}

// krefDivide returns x / n as Finalize computes it for one element.
func krefDivide(dt DType, x uint64, n int) (want uint64, nan bool) {
	if !dt.IsFloat() {
		q := new(big.Int).Quo(krefInt(dt, x), big.NewInt(int64(n))) // truncates
		return krefTruncate(dt, q), false
	}
	a := krefFloat(dt, x)
	if math.IsNaN(a) {
		return 0, true
	}
	if math.IsInf(a, 0) || a == 0 {
		return krefEncode(dt, nil, a/float64(n)), false
	}
	q := new(big.Float).SetPrec(1000).Quo(krefExact(a), new(big.Float).SetInt64(int64(n)))
	return krefEncode(dt, q, 0), false
}

// krefRandom returns random element bits for dt: for floats a mix of values
// of moderate magnitude (where sums round), arbitrary bit patterns
// (subnormals, huge values, NaNs) and special values.
func krefRandom(rng *rand.Rand, dt DType) uint64 {
	w := uint(dt.Size() * 8)
	mask := uint64(1)<<w - 1
	if w == 64 {
		mask = math.MaxUint64
	}
	if !dt.IsFloat() {
		switch rng.IntN(8) {
		case 0:
			return 0
		case 1:
			return mask // -1 or the maximum
		case 2:
			return 1 << (w - 1) // the minimum signed or 2^(w-1)
		case 3:
			return 1<<(w-1) - 1
		case 4:
			return uint64(rng.IntN(7))
		default:
			return rng.Uint64() & mask
		}
	}
	expBits, fracBits := krefFloatFormat(dt)
	bias := 1<<(expBits-1) - 1
	sign := uint64(rng.IntN(2)) << (expBits + fracBits)
	inf := uint64(1<<expBits-1) << fracBits
	switch r := rng.IntN(20); {
	case r < 13: // magnitudes within a few binades of one
		e := uint64(bias - 4 + rng.IntN(9))
		return sign | e<<fracBits | rng.Uint64()&(1<<fracBits-1)
	case r < 16:
		return rng.Uint64() & mask
	case r == 16:
		return sign // ±0
	case r == 17:
		return sign | inf
	case r == 18:
		return sign | inf - 1 // the largest finite value
	default:
		return sign | inf | 1<<(fracBits-1) | uint64(rng.IntN(2)) // NaN
	}
}

func krefFill(rng *rand.Rand, buf []byte, dt DType) {
	for i := range len(buf) / dt.Size() {
		krefPutBits(buf, dt, i, krefRandom(rng, dt))
	}
}

// kernelPaths runs f once for every implementation the machine has: the
// SIMD kernels, the portable loops over typed views, and the
// element-by-element decoding path.
func kernelPaths(t *testing.T, f func(t *testing.T)) {
	saveVector, saveTyped := useVector, useTyped
	t.Cleanup(func() { useVector, useTyped = saveVector, saveTyped })
	paths := []struct {
		name          string
		vector, typed bool
	}{
		{"vector", true, true},
		{"portable", false, true},
		{"bytewise", false, false},
	}
	for _, p := range paths {
		if p.vector && !vectorAvailable {
			continue
		}
		if p.typed && !littleEndian {
			continue
		}
		useVector, useTyped = p.vector, p.typed
		t.Run(p.name, f)
	}
}

// krefOffsetBuf returns a buffer of n bytes starting off bytes into a fresh
// allocation, so that it is misaligned for every element type when off is
// odd.
func krefOffsetBuf(n, off int) []byte {
	return make([]byte, n+off+8)[off : off+n : off+n]
}

var reduceTestLengths = []int{0, 1, 3, 17, 1031}

func TestReduceAllTypesAndOps(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 11))
		for _, dt := range DTypes() {
			for _, op := range []Op{Sum, Prod, Max, Min} {
				for _, n := range reduceTestLengths {
					for _, off := range []int{0, 1} {
						checkReduceCase(t, rng, dt, op, n, off)
					}
				}
			}
		}
	})
}

// TestReduceLarge covers buffers longer than the unit the SIMD dispatcher
// hands to one assembly call.
func TestReduceLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large buffers")
	}
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(8, 12))
		for _, dt := range DTypes() {
			n := (600<<10)/dt.Size() + 5
			a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
			krefFill(rng, a, dt)
			krefFill(rng, b, dt)
			for _, op := range []Op{Sum, Max} {
				dst := make([]byte, len(a))
				Reduce3(dst, a, b, dt, op)
				// Check the elements around every 64 KiB boundary and the
				// end; the model is too slow for all of them.
				var idx []int
				for i := 0; i < n; i += (64 << 10) / dt.Size() {
					for j := max(i-40, 0); j < min(i+40, n); j++ {
						idx = append(idx, j)
					}
				}
				for j := n - 40; j < n; j++ {
					idx = append(idx, j)
				}
				krefCompareAt(t, fmt.Sprintf("%v/%v/n=%d", dt, op, n), dt, op, a, b, dst, idx)
			}
		}
	})
}

func checkReduceCase(t *testing.T, rng *rand.Rand, dt DType, op Op, n, off int) {
	t.Helper()
	size := n * dt.Size()
	a, b := krefOffsetBuf(size, off), krefOffsetBuf(size, 3*off)
	krefFill(rng, a, dt)
	krefFill(rng, b, dt)
	if dt.IsFloat() && op == Sum && n > 2 {
		// Exact cancellation: x + (-x) is +0.
		sign := uint64(1) << (dt.Size()*8 - 1)
		krefPutBits(b, dt, 1, krefBits(a, dt, 1)^sign)
	}
	name := fmt.Sprintf("%v/%v/n=%d/off=%d", dt, op, n, off)

	// Out of place, into a third (differently misaligned) buffer.
	dst := krefOffsetBuf(size, 2*off)
	Reduce3(dst, a, b, dt, op)
	krefCompare(t, name+"/Reduce3", dt, op, a, b, dst)

	// dst aliasing b: dst = a op dst.
	d := bytes.Clone(b)
	Reduce3(d, a, d, dt, op)
	krefCompare(t, name+"/Reduce3(b aliased)", dt, op, a, b, d)

	// In place.
	d = krefOffsetBuf(size, off)
	copy(d, a)
	ReduceInto(d, b, dt, op)
	krefCompare(t, name+"/ReduceInto", dt, op, a, b, d)
	if !bytes.Equal(b[:size], b) {
		t.Fatal("source modified")
	}
}

func krefCompare(t *testing.T, name string, dt DType, op Op, a, b, got []byte) {
	t.Helper()
	idx := make([]int, len(got)/dt.Size())
	for i := range idx {
		idx[i] = i
	}
	krefCompareAt(t, name, dt, op, a, b, got, idx)
}

// krefCompareAt checks the elements at the given indexes of got = a op b.
func krefCompareAt(t *testing.T, name string, dt DType, op Op, a, b, got []byte, idx []int) {
	t.Helper()
	bad := 0
	for _, i := range idx {
		x, y, g := krefBits(a, dt, i), krefBits(b, dt, i), krefBits(got, dt, i)
		want, nan := krefCombine(dt, op, x, y)
		if nan {
			if !krefIsNaN(dt, g) {
				t.Errorf("%s: element %d: %#x %v %#x = %#x, want NaN", name, i, x, op, y, g)
				bad++
			}
		} else if g != want {
			t.Errorf("%s: element %d: %#x %v %#x = %#x, want %#x", name, i, x, op, y, g, want)
			bad++
		}
		if bad > 5 {
			t.FailNow()
		}
	}
}

// TestReduceFloat32SumMatchesGo checks float32 sums bit for bit against
// Go's own float32 addition, which rounds each sum exactly once.
func TestReduceFloat32SumMatchesGo(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 1))
		const n = 4099
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
			b[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
		}
		ab, bb := make([]byte, 4*n), make([]byte, 4*n)
		for i := range a {
			binary.LittleEndian.PutUint32(ab[4*i:], math.Float32bits(a[i]))
			binary.LittleEndian.PutUint32(bb[4*i:], math.Float32bits(b[i]))
		}
		ReduceInto(ab, bb, Float32, Sum)
		for i := range a {
			got := binary.LittleEndian.Uint32(ab[4*i:])
			if want := math.Float32bits(a[i] + b[i]); got != want {
				t.Fatalf("element %d: %v + %v = %v, want %v", i, a[i], b[i], math.Float32frombits(got), a[i]+b[i])
			}
		}
	})
}

func TestFinalizeAvg(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, dt := range DTypes() {
			for _, n := range reduceTestLengths {
				for _, off := range []int{0, 1} {
					size := n * dt.Size()
					a, b := krefOffsetBuf(size, off), krefOffsetBuf(size, off)
					krefFill(rng, a, dt)
					krefFill(rng, b, dt)
					sum := bytes.Clone(a)
					ReduceInto(sum, b, dt, Avg.Combiner())
					krefCompare(t, fmt.Sprintf("%v/avg/n=%d/sum", dt, n), dt, Sum, a, b, sum)
					for _, count := range []int{1, 2, 3, 7, 300} {
						got := krefOffsetBuf(size, off)
						copy(got, sum)
						Finalize(got, dt, Avg, count)
						for i := range n {
							x, g := krefBits(sum, dt, i), krefBits(got, dt, i)
							want, nan := krefDivide(dt, x, count)
							if nan && !krefIsNaN(dt, g) || !nan && g != want {
								t.Fatalf("%v: Finalize(avg, %d) of element %d (%#x) = %#x, want %#x (NaN: %v)", dt, count, i, x, g, want, nan)
							}
						}
					}
				}
			}
		}
	})
}

func TestFinalizeOtherOpsNoop(t *testing.T) {
	buf := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, op := range []Op{Sum, Prod, Max, Min} {
		for _, dt := range DTypes() {
			b := bytes.Clone(buf)
			Finalize(b, dt, op, 4)
			if !bytes.Equal(b, buf) {
				t.Fatalf("Finalize(%v, %v) changed the buffer", dt, op)
			}
		}
	}
}

func TestReduceSpecialFloats(t *testing.T) {
	nan32, inf32 := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		op      Op
		a, b    float32
		want    float32
		wantNaN bool
	}{
		{Max, 1, nan32, 0, true},
		{Max, nan32, 1, 0, true},
		{Min, 1, nan32, 0, true},
		{Min, nan32, -inf32, 0, true},
		{Max, 0, negZero, 0, false},
		{Max, negZero, 0, 0, false},
		{Min, 0, negZero, negZero, false},
		{Min, negZero, 0, negZero, false},
		{Sum, inf32, -inf32, 0, true},
		{Prod, 0, inf32, 0, true},
		{Sum, negZero, negZero, negZero, false},
		{Sum, 1, -1, 0, false},
		{Max, -inf32, -3, -3, false},
		{Min, inf32, 3, 3, false},
	}
	for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
		kernelPaths(t, func(t *testing.T) {
			for _, c := range cases {
				// 40 copies, so that vector kernels see them in every lane.
				const n = 40
				a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				for i := range n {
					krefPutBits(a, dt, i, krefEncodeSpecial(dt, c.a))
					krefPutBits(b, dt, i, krefEncodeSpecial(dt, c.b))
				}
				ReduceInto(a, b, dt, c.op)
				for i := range n {
					g := krefBits(a, dt, i)
					if c.wantNaN != krefIsNaN(dt, g) || !c.wantNaN && g != krefEncodeSpecial(dt, c.want) {
						t.Fatalf("%v: %v %v %v = %#x (%v), want %v (NaN: %v)", dt, c.a, c.op, c.b, g, krefFloat(dt, g), c.want, c.wantNaN)
					}
				}
			}
		})
	}
}

// krefEncodeSpecial encodes a value that every float type represents
// exactly.
func krefEncodeSpecial(dt DType, f float32) uint64 {
	switch dt {
	case Float32:
		return uint64(math.Float32bits(f))
	case Float64:
		return math.Float64bits(float64(f))
	}
	if f != f {
		_, fracBits := krefFloatFormat(dt)
		expBits, _ := krefFloatFormat(dt)
		return uint64(1<<expBits-1)<<fracBits | 1<<(fracBits-1)
	}
	return krefRoundSmall(dt, float64(f))
}

func TestReduceHalfOverflowAndRounding(t *testing.T) {
	// float16: 65504 + 16 is the halfway point to 65536 and rounds to even,
	// which is +Inf; 65504 + 8 rounds back to 65504; 2048 + 1 is a tie that
	// goes to 2048 and 2050 + 1 one that goes to 2052.
	cases := []struct{ a, b, want uint16 }{
		{0x7bff, 0x4c00, 0x7c00}, // 65504 + 16 = Inf
		{0x7bff, 0x4800, 0x7bff}, // 65504 + 8 = 65504
		{0x6800, 0x3c00, 0x6800}, // 2048 + 1 = 2048
		{0x6801, 0x3c00, 0x6802}, // 2050 + 1 = 2052
		{0x0001, 0x0001, 0x0002}, // subnormal sum
		{0x0400, 0x8001, 0x03ff}, // smallest normal - smallest subnormal
	}
	kernelPaths(t, func(t *testing.T) {
		for _, c := range cases {
			a, b := make([]byte, 2*24), make([]byte, 2*24)
			for i := range 24 {
				binary.LittleEndian.PutUint16(a[2*i:], c.a)
				binary.LittleEndian.PutUint16(b[2*i:], c.b)
			}
			ReduceInto(a, b, Float16, Sum)
			for i := range 24 {
				if g := binary.LittleEndian.Uint16(a[2*i:]); g != c.want {
					t.Fatalf("float16 %#04x + %#04x = %#04x, want %#04x", c.a, c.b, g, c.want)
				}
			}
		}
	})
}

func TestReducePanics(t *testing.T) {
	buf8 := make([]byte, 8)
	big := make([]byte, 64)
	cases := []struct {
		name string
		f    func()
		msg  string
	}{
		{"avg", func() { ReduceInto(buf8, buf8, Float32, Avg) }, "Finalize"},
		{"bad op", func() { ReduceInto(buf8, buf8, Float32, Op(9)) }, "invalid reduction"},
		{"bad dtype", func() { ReduceInto(buf8, buf8, DType(42), Sum) }, "invalid dtype"},
		{"length mismatch", func() { ReduceInto(buf8, make([]byte, 4), Int8, Sum) }, "len(src) = 4"},
		{"partial element", func() { ReduceInto(buf8[:6], buf8[:6], Float32, Sum) }, "not a multiple"},
		{"reduce3 mismatch", func() { Reduce3(buf8, buf8, make([]byte, 16), Float64, Max) }, "len(b) = 16"},
		{"overlap", func() { Reduce3(big[8:16], big[4:12], big[32:40], Int32, Sum) }, "overlaps"},
		{"overlap in place", func() { ReduceInto(big[8:16], big[12:20], Int8, Sum) }, "overlap"},
		{"finalize count", func() { Finalize(buf8, Int32, Avg, 0) }, "not positive"},
		{"finalize length", func() { Finalize(buf8[:3], Int32, Avg, 2) }, "not a multiple"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				s, _ := r.(string)
				if !strings.Contains(s, c.msg) {
					t.Fatalf("panic %v, want one mentioning %q", r, c.msg)
				}
			}()
			c.f()
		})
	}
}

func TestReduceNoAllocs(t *testing.T) {
	a, b := make([]byte, 4096), make([]byte, 4096)
	for _, dt := range DTypes() {
		for _, op := range []Op{Sum, Prod, Max, Min} {
			if n := testing.AllocsPerRun(10, func() { ReduceInto(a, b, dt, op) }); n != 0 {
				t.Errorf("ReduceInto(%v, %v) allocates %v times", dt, op, n)
			}
			if n := testing.AllocsPerRun(10, func() { Reduce3(a, a, b, dt, op) }); n != 0 {
				t.Errorf("Reduce3(%v, %v) allocates %v times", dt, op, n)
			}
		}
		if n := testing.AllocsPerRun(10, func() { Finalize(a, dt, Avg, 3) }); n != 0 {
			t.Errorf("Finalize(%v) allocates %v times", dt, n)
		}
	}
}

// FuzzReduceKernelsAgree checks that the SIMD kernels, the portable loops and
// the element-by-element path compute the same elements for arbitrary bytes.
func FuzzReduceKernelsAgree(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{8, 7, 6, 5, 4, 3, 2, 1}, uint8(Float32), uint8(Sum))
	f.Add(bytes.Repeat([]byte{0xff, 0x7f, 0x00, 0x80}, 40), bytes.Repeat([]byte{0x00, 0x7c, 0x01, 0x00}, 40), uint8(Float16), uint8(Max))
	f.Add(bytes.Repeat([]byte{0x80, 0x7f, 0xc0, 0xff}, 50), bytes.Repeat([]byte{0x01, 0x80}, 100), uint8(BFloat16), uint8(Min))
	f.Add(bytes.Repeat([]byte{0x9c}, 99), bytes.Repeat([]byte{0x3}, 99), uint8(Int8), uint8(Prod))
	f.Add(bytes.Repeat([]byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 9), bytes.Repeat([]byte{0x2, 0, 0, 0, 0, 0, 0, 0x80}, 9), uint8(Uint64), uint8(Max))
	f.Fuzz(func(t *testing.T, a, b []byte, dtRaw, opRaw uint8) {
		dt, op := DType(dtRaw%uint8(numDTypes)), Op(opRaw%4)
		n := min(len(a), len(b)) / dt.Size() * dt.Size()
		a, b = a[:n], b[:n]

		saveVector, saveTyped := useVector, useTyped
		defer func() { useVector, useTyped = saveVector, saveTyped }()
		run := func(vector, typed bool) []byte {
			useVector, useTyped = vector, typed
			dst := make([]byte, n)
			Reduce3(dst, a, b, dt, op)
			return dst
		}
		want := run(false, false)
		for _, got := range [][]byte{run(vectorAvailable, littleEndian), run(false, littleEndian)} {
			for i := range n / dt.Size() {
				g, w := krefBits(got, dt, i), krefBits(want, dt, i)
				if g != w && !(dt.IsFloat() && krefIsNaN(dt, g) && krefIsNaN(dt, w)) {
					t.Fatalf("%v %v element %d: paths disagree: %#x vs %#x", dt, op, i, g, w)
				}
			}
		}
	})
}
