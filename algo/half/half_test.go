package half

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refFormat is an independent model of a small binary floating-point format
// with a sign bit: the exact value of every non-negative bit pattern,
// computed with math.Ldexp from the format's definition, and rounding by
// searching that table. It shares no code with the conversions under test.
type refFormat struct {
	name     string
	fracBits uint
	infBits  uint16 // the bit pattern of +Inf
	// values[i] is the exact value of bit pattern i for 0 <= i <= infBits.
	// values[infBits] applies the normal-number formula to the infinity
	// pattern, which gives the power of two just above the largest finite
	// value; its pattern has an even fraction (zero), so ties between the
	// largest finite value and it go to Inf, exactly as IEEE 754 overflow
	// under round-to-nearest-even requires.
	values []float64
}

func newRefFormat(name string, expBits, fracBits uint) *refFormat {
	bias := 1<<(expBits-1) - 1
	inf := (1<<expBits - 1) << fracBits
	r := &refFormat{name: name, fracBits: fracBits, infBits: uint16(inf), values: make([]float64, inf+1)}
	for i := 0; i <= inf; i++ {
		e := i >> fracBits
		f := i & (1<<fracBits - 1)
		if e == 0 {
			r.values[i] = math.Ldexp(float64(f), 1-bias-int(fracBits))
		} else {
			r.values[i] = math.Ldexp(float64(1<<fracBits+f), e-bias-int(fracBits))
		}
	}
	return r
}

var (
	refF16  = newRefFormat("float16", 5, 10)
	refBF16 = newRefFormat("bfloat16", 8, 7)
)

// decode returns the value of bit pattern b, NaN for every NaN pattern.
func (r *refFormat) decode(b uint16) float64 {
	mag := b & 0x7fff
	var v float64
	switch {
	case mag < r.infBits:
		v = r.values[mag]
	case mag == r.infBits:
		v = math.Inf(1)
	default:
		return math.NaN()
	}
	if b&0x8000 != 0 {
		v = math.Copysign(v, -1)
	}
	return v
}

// round returns the bit pattern nearest to x, ties to the even pattern. x
// must not be a NaN.
func (r *refFormat) round(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
		x = -x
	}
	vals := r.values
	if x >= vals[r.infBits] {
		return sign | r.infBits
	}
	i := sort.SearchFloat64s(vals, x) // vals[i] >= x, and i >= 1 unless x == 0
	if vals[i] == x {
		return sign | uint16(i)
	}
	lo, hi := vals[i-1], vals[i]
	mid := (lo + hi) / 2 // exact: both are short binary fractions
	switch {
	case x < mid:
		return sign | uint16(i-1)
	case x > mid:
		return sign | uint16(i)
	case i%2 == 0:
		return sign | uint16(i)
	default:
		return sign | uint16(i-1)
	}
}

func (r *refFormat) quietBit() uint16 { return 1 << (r.fracBits - 1) }

func TestRefTablesSorted(t *testing.T) {
	for _, r := range []*refFormat{refF16, refBF16} {
		for i := 1; i < len(r.values); i++ {
			if !(r.values[i] > r.values[i-1]) {
				t.Fatalf("%s: table not increasing at %#x", r.name, i)
			}
		}
	}
	if refF16.values[0x7bff] != 65504 || refF16.values[1] != math.Ldexp(1, -24) || refF16.values[0x400] != math.Ldexp(1, -14) {
		t.Fatal("float16 reference table is wrong")
	}
	if refBF16.values[0x7f7f] != math.Ldexp(255, 120) || refBF16.values[1] != math.Ldexp(1, -133) {
		t.Fatal("bfloat16 reference table is wrong")
	}
}

func TestFloat16DecodeExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := Float16(i)
		checkDecode(t, refF16, uint16(i), h.Float32(), h.Float64(), h.IsNaN(), h.IsInf(1), h.IsInf(-1))
	}
}

func TestBFloat16DecodeExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := BFloat16(i)
		checkDecode(t, refBF16, uint16(i), h.Float32(), h.Float64(), h.IsNaN(), h.IsInf(1), h.IsInf(-1))
	}
}

func checkDecode(t *testing.T, r *refFormat, b uint16, f32 float32, f64 float64, isNaN, isPosInf, isNegInf bool) {
	t.Helper()
	want := r.decode(b)
	if math.IsNaN(want) {
		bits := math.Float32bits(f32)
		if !math.IsNaN(f64) || f32 == f32 || bits&0x00400000 == 0 || bits>>31 != uint32(b>>15) || !isNaN {
			t.Fatalf("%s %#04x: got %#08x (%v), want a quiet NaN with the same sign", r.name, b, bits, f64)
		}
		return
	}
	if math.Float32bits(f32) != math.Float32bits(float32(want)) || math.Float64bits(f64) != math.Float64bits(want) {
		t.Fatalf("%s %#04x: got %v / %v, want %v", r.name, b, f32, f64, want)
	}
	if isNaN || isPosInf != math.IsInf(want, 1) || isNegInf != math.IsInf(want, -1) {
		t.Fatalf("%s %#04x: wrong classification", r.name, b)
	}
}

func TestFloat16RoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := Float16(i)
		if h.IsNaN() {
			continue
		}
		if g := Float16FromFloat32(h.Float32()); g != h {
			t.Fatalf("%#04x -> %v -> %#04x", i, h.Float32(), g)
		}
		if g := Float16FromFloat64(h.Float64()); g != h {
			t.Fatalf("%#04x -> %v -> %#04x (float64)", i, h.Float64(), g)
		}
	}
}

func TestBFloat16RoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := BFloat16(i)
		if h.IsNaN() {
			continue
		}
		if g := BFloat16FromFloat32(h.Float32()); g != h {
			t.Fatalf("%#04x -> %v -> %#04x", i, h.Float32(), g)
		}
		if g := BFloat16FromFloat64(h.Float64()); g != h {
			t.Fatalf("%#04x -> %v -> %#04x (float64)", i, h.Float64(), g)
		}
	}
}

// float32Inputs returns inputs that probe every rounding decision of r: each
// representable value and each halfway point between neighbours, with the
// adjacent float32 values on either side, in both signs; every float32
// exponent; and random bit patterns.
func float32Inputs(r *refFormat) []float32 {
	var in []float32
	add := func(x float32) {
		for _, v := range []float32{x, math.Nextafter32(x, 0), math.Nextafter32(x, float32(math.Inf(1)))} {
			in = append(in, v, -v)
		}
	}
	for i := 0; i < int(r.infBits); i++ {
		add(float32(r.values[i]))
		mid := (r.values[i] + r.values[i+1]) / 2
		if float64(float32(mid)) != mid {
			panic("halfway point not representable in float32")
		}
		add(float32(mid))
	}
	for e := 0; e < 256; e++ {
		for _, f := range []uint32{0, 1, 0x1000, 0x1fff, 0x2000, 0x7fff, 0x8000, 0x18000, 0x400000, 0x7fffff} {
			add(math.Float32frombits(uint32(e)<<23 | f))
		}
	}
	add(math.MaxFloat32)
	add(float32(math.Inf(1)))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		in = append(in, math.Float32frombits(rng.Uint32()))
	}
	return in
}

// float64Inputs is float32Inputs for float64, with neighbours one float64
// ulp away, which tell single rounding from rounding through float32.
func float64Inputs(r *refFormat) []float64 {
	var in []float64
	add := func(x float64) {
		for _, v := range []float64{x, math.Nextafter(x, 0), math.Nextafter(x, math.Inf(1))} {
			in = append(in, v, -v)
		}
	}
	for i := 0; i < int(r.infBits); i++ {
		add(r.values[i])
		add((r.values[i] + r.values[i+1]) / 2)
	}
	for e := 0; e < 2048; e++ {
		for _, f := range []uint64{0, 1, 1 << 41, 1 << 42, 1<<42 - 1, 1 << 44, 1 << 45, 1<<45 - 1, 1 << 51, 1<<52 - 1} {
			add(math.Float64frombits(uint64(e)<<52 | f))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1 << 20 {
		in = append(in, math.Float64frombits(rng.Uint64()))
		// Random values in the format's own range are more telling.
		in = append(in, float64(math.Float32frombits(rng.Uint32()>>1&0x47ffffff)))
	}
	return in
}

func checkEncode(t *testing.T, r *refFormat, x float64, got uint16, what string) {
	t.Helper()
	if math.IsNaN(x) {
		if got&0x7fff <= r.infBits || got&r.quietBit() == 0 || math.Signbit(x) != (got&0x8000 != 0) {
			t.Fatalf("%s(%v, bits %#x) = %#04x, want a quiet NaN with the same sign", what, x, math.Float64bits(x), got)
		}
		return
	}
	if want := r.round(x); got != want {
		t.Fatalf("%s(%v = %b) = %#04x (%v), want %#04x (%v)", what, x, x, got, r.decode(got), want, r.decode(want))
	}
}

func TestFloat16FromFloat32(t *testing.T) {
	for _, x := range float32Inputs(refF16) {
		checkEncode(t, refF16, float64(x), uint16(Float16FromFloat32(x)), "Float16FromFloat32")
	}
}

func TestFloat16FromFloat64(t *testing.T) {
	for _, x := range float64Inputs(refF16) {
		checkEncode(t, refF16, x, uint16(Float16FromFloat64(x)), "Float16FromFloat64")
	}
}

func TestBFloat16FromFloat32(t *testing.T) {
	for _, x := range float32Inputs(refBF16) {
		checkEncode(t, refBF16, float64(x), uint16(BFloat16FromFloat32(x)), "BFloat16FromFloat32")
	}
}

func TestBFloat16FromFloat64(t *testing.T) {
	for _, x := range float64Inputs(refBF16) {
		checkEncode(t, refBF16, x, uint16(BFloat16FromFloat64(x)), "BFloat16FromFloat64")
	}
}

func TestFloat16NaNs(t *testing.T) {
	for _, b := range []uint32{0x7f800001, 0xff800001, 0x7fc00000, 0xffc00000, 0x7f801fff, 0x7fbfffff, 0x7fffffff, 0xffffffff} {
		f := math.Float32frombits(b)
		checkEncode(t, refF16, float64(f), uint16(Float16FromFloat32(f)), "Float16FromFloat32")
		checkEncode(t, refBF16, float64(f), uint16(BFloat16FromFloat32(f)), "BFloat16FromFloat32")
		// float64(f) quiets a signalling NaN on amd64; check the 64-bit
		// encoders on signalling patterns too.
		d := math.Float64frombits(uint64(b>>31)<<63 | 0x7ff<<52 | uint64(b&0x7fffff)<<29)
		checkEncode(t, refF16, d, uint16(Float16FromFloat64(d)), "Float16FromFloat64")
		checkEncode(t, refBF16, d, uint16(BFloat16FromFloat64(d)), "BFloat16FromFloat64")
	}
	d := math.Float64frombits(0x7ff0000000000001) // payload only in low bits
	checkEncode(t, refF16, d, uint16(Float16FromFloat64(d)), "Float16FromFloat64")
	checkEncode(t, refBF16, d, uint16(BFloat16FromFloat64(d)), "BFloat16FromFloat64")
}

func TestFloat16KnownValues(t *testing.T) {
	cases := []struct {
		in   float64
		want Float16
	}{
		{0, 0},
		{math.Copysign(0, -1), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, Float16Max},
		{65519.99, Float16Max},
		{65520, Float16PosInf},
		{-65520, Float16NegInf},
		{1e6, Float16PosInf},
		{math.Ldexp(1, -14), Float16MinNorm},
		{math.Ldexp(1, -24), Float16MinSub},
		{math.Ldexp(1, -25), 0},                               // tie between 0 and 2^-24: even is 0
		{math.Ldexp(1.5, -24), 2},                             // tie between 1 and 2 units: even is 2
		{math.Ldexp(2.5, -24), 2},                             // tie between 2 and 3 units: even is 2
		{math.Ldexp(1023.5, -24), 0x400},                      // largest subnormal rounds up to the smallest normal
		{1 + math.Ldexp(1, -11), 0x3c00},                      // tie: even is 1
		{1 + math.Ldexp(3, -11), 0x3c02},                      // tie: even is 1+2^-9
		{1 + math.Ldexp(1, -11) + math.Ldexp(1, -40), 0x3c01}, // just above the tie
	}
	for _, c := range cases {
		if got := Float16FromFloat64(c.in); got != c.want {
			t.Errorf("Float16FromFloat64(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
		if float64(float32(c.in)) != c.in {
			continue // the float32 path rounds twice for this input
		}
		if got := Float16FromFloat32(float32(c.in)); got != c.want {
			t.Errorf("Float16FromFloat32(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestBFloat16KnownValues(t *testing.T) {
	cases := []struct {
		in   float32
		want BFloat16
	}{
		{0, 0},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3f80},
		{-2, 0xc000},
		{1 + 1.0/256, 0x3f80},     // tie: even is 1
		{1 + 3.0/256, 0x3f82},     // tie: even is 1+2^-6
		{math.MaxFloat32, 0x7f80}, // beyond the halfway point to 2^128
		{math.Float32frombits(0x7f7f7fff), 0x7f7f},
		{math.Float32frombits(0x7f7f8000), 0x7f80}, // tie rounds to even, which is Inf
		{math.Float32frombits(0x00000001), 0},      // float32 subnormals far below bfloat16's
		{math.Float32frombits(0x00008000), 0},      // tie with zero
		{math.Float32frombits(0x00008001), 1},
	}
	for _, c := range cases {
		if got := BFloat16FromFloat32(c.in); got != c.want {
			t.Errorf("BFloat16FromFloat32(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
		if got := BFloat16FromFloat64(float64(c.in)); got != c.want {
			t.Errorf("BFloat16FromFloat64(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestHalfString(t *testing.T) {
	if s := Float16FromFloat32(1.5).String(); s != "1.5" {
		t.Errorf("Float16 String = %q", s)
	}
	if s := BFloat16FromFloat32(-0.25).String(); s != "-0.25" {
		t.Errorf("BFloat16 String = %q", s)
	}
	if s := Float16NaN.String(); s != "NaN" {
		t.Errorf("Float16 NaN String = %q", s)
	}
}

func BenchmarkFloat16FromFloat32(b *testing.B) {
	in := make([]float32, 1024)
	for i := range in {
		in[i] = float32(i) * 0.37
	}
	var sink Float16
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		for _, x := range in {
			sink ^= Float16FromFloat32(x)
		}
	}
	_ = sink
}

func BenchmarkBFloat16FromFloat32(b *testing.B) {
	in := make([]float32, 1024)
	for i := range in {
		in[i] = float32(i) * 0.37
	}
	var sink BFloat16
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		for _, x := range in {
			sink ^= BFloat16FromFloat32(x)
		}
	}
	_ = sink
}
