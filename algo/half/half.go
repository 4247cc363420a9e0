// Package half implements the two 16-bit floating-point formats used for
// training data: IEEE 754 binary16 (Float16) and bfloat16 (BFloat16).
//
// Both types are stored as their bit pattern in a uint16, so a []Float16 or
// []BFloat16 has the memory layout of the corresponding C, CUDA or PyTorch
// array on a little-endian machine. Arithmetic is done by converting to
// float32, which represents every value of both formats exactly.
//
// Conversions to the 16-bit formats round to nearest, ties to even, as the
// IEEE 754 default rounding mode requires: values too large for the format
// become an infinity of the same sign, values too small become a subnormal or
// a zero of the same sign, and a NaN stays a NaN (always a quiet one, keeping
// the sign and as many leading payload bits as fit).
package half

import (
	"math"
	"strconv"
)

// Float16 is an IEEE 754 binary16 value: 1 sign bit, 5 exponent bits and 10
// fraction bits. Its largest finite value is 65504 and its smallest positive
// (subnormal) value is 2^-24.
type Float16 uint16

// BFloat16 is a bfloat16 value: the upper half of a float32, with 1 sign bit,
// 8 exponent bits and 7 fraction bits. It has the range of float32 and about
// three significant decimal digits.
type BFloat16 uint16

// Float16 constants.
const (
	Float16PosInf  Float16 = 0x7c00 // +Inf
	Float16NegInf  Float16 = 0xfc00 // -Inf
	Float16NaN     Float16 = 0x7e00 // the canonical quiet NaN
	Float16Max     Float16 = 0x7bff // 65504, the largest finite value
	Float16MinNorm Float16 = 0x0400 // 2^-14, the smallest positive normal value
	Float16MinSub  Float16 = 0x0001 // 2^-24, the smallest positive value
)

// BFloat16 constants.
const (
	BFloat16PosInf  BFloat16 = 0x7f80 // +Inf
	BFloat16NegInf  BFloat16 = 0xff80 // -Inf
	BFloat16NaN     BFloat16 = 0x7fc0 // the canonical quiet NaN
	BFloat16Max     BFloat16 = 0x7f7f // (2-2^-7)*2^127, the largest finite value
	BFloat16MinNorm BFloat16 = 0x0080 // 2^-126, the smallest positive normal value
	BFloat16MinSub  BFloat16 = 0x0001 // 2^-133, the smallest positive value
)

// Float16FromBits returns the Float16 with bit pattern b.
func Float16FromBits(b uint16) Float16 { return Float16(b) }

// Bits returns the bit pattern of h.
func (h Float16) Bits() uint16 { return uint16(h) }

// IsNaN reports whether h is a NaN.
func (h Float16) IsNaN() bool { return h&0x7c00 == 0x7c00 && h&0x03ff != 0 }

// IsInf reports whether h is an infinity, according to sign: sign > 0 asks
// for +Inf, sign < 0 for -Inf and sign == 0 for either.
func (h Float16) IsInf(sign int) bool {
	return (sign >= 0 && h == Float16PosInf) || (sign <= 0 && h == Float16NegInf)
}

// Float16FromFloat32 returns f rounded to the nearest Float16, ties to even.
// Magnitudes of 65520 and above become an infinity, magnitudes of 2^-25 and
// below become a signed zero, and NaNs become quiet NaNs.
func Float16FromFloat32(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	frac := b & 0x7fffff

	switch {
	case exp == 0xff: // Inf or NaN
		if frac == 0 {
			return Float16(sign | 0x7c00)
		}
		return Float16(sign | 0x7e00 | uint16(frac>>13))
	case exp > 127+15: // 2^16 and above overflow whatever the rounding
		return Float16(sign | 0x7c00)
	case exp >= 127-14: // normal in binary16 (rounding may carry into Inf)
		h := uint32(exp-(127-15))<<10 | frac>>13
		h += roundBit32(frac, 13)
		return Float16(sign | uint16(h))
	case exp >= 127-25: // subnormal in binary16 (rounding may carry into 2^-14)
		m := frac | 0x800000
		shift := uint(126 - exp) // units of 2^-24
		h := m >> shift
		h += roundBit32(m, shift)
		return Float16(sign | uint16(h))
	default: // below 2^-25: rounds to zero
		return Float16(sign)
	}
}

// Float16FromFloat64 returns f rounded to the nearest Float16, ties to even.
// It rounds once, so it can differ from Float16FromFloat32(float32(f)),
// which rounds twice.
func Float16FromFloat64(f float64) Float16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	exp := int(b>>52) & 0x7ff
	frac := b & (1<<52 - 1)

	switch {
	case exp == 0x7ff:
		if frac == 0 {
			return Float16(sign | 0x7c00)
		}
		return Float16(sign | 0x7e00 | uint16(frac>>42))
	case exp > 1023+15:
		return Float16(sign | 0x7c00)
	case exp >= 1023-14:
		h := uint64(exp-(1023-15))<<10 | frac>>42
		h += roundBit64(frac, 42)
		return Float16(sign | uint16(h))
	case exp >= 1023-25:
		m := frac | 1<<52
		shift := uint(1051 - exp) // units of 2^-24
		h := m >> shift
		h += roundBit64(m, shift)
		return Float16(sign | uint16(h))
	default:
		return Float16(sign)
	}
}

// Float32 returns h as a float32. The conversion is exact.
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch exp {
	case 0x1f: // Inf or NaN; NaNs are made quiet
		if frac == 0 {
			return math.Float32frombits(sign | 0x7f800000)
		}
		return math.Float32frombits(sign | 0x7fc00000 | frac<<13)
	case 0: // zero or subnormal: frac * 2^-24
		v := float32(frac) * 0x1p-24
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// Float64 returns h as a float64. The conversion is exact.
func (h Float16) Float64() float64 { return float64(h.Float32()) }

// String formats h like a float32 with the 'g' verb.
func (h Float16) String() string { return formatFloat32(h.Float32()) }

// BFloat16FromBits returns the BFloat16 with bit pattern b.
func BFloat16FromBits(b uint16) BFloat16 { return BFloat16(b) }

// Bits returns the bit pattern of h.
func (h BFloat16) Bits() uint16 { return uint16(h) }

// IsNaN reports whether h is a NaN.
func (h BFloat16) IsNaN() bool { return h&0x7f80 == 0x7f80 && h&0x007f != 0 }

// IsInf reports whether h is an infinity, according to sign: sign > 0 asks
// for +Inf, sign < 0 for -Inf and sign == 0 for either.
func (h BFloat16) IsInf(sign int) bool {
	return (sign >= 0 && h == BFloat16PosInf) || (sign <= 0 && h == BFloat16NegInf)
}

// BFloat16FromFloat32 returns f rounded to the nearest BFloat16, ties to
// even. Values beyond the largest finite BFloat16 by half a unit in the last
// place or more become an infinity, and NaNs become quiet NaNs.
func BFloat16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return BFloat16(b>>16 | 0x0040)
	}
	// Adding just under half a unit, plus the lowest kept bit, rounds to
	// nearest even; a carry out of the fraction correctly bumps the exponent,
	// up to Inf.
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// BFloat16FromFloat64 returns f rounded to the nearest BFloat16, ties to
// even. It rounds once, so it can differ from
// BFloat16FromFloat32(float32(f)), which rounds twice.
func BFloat16FromFloat64(f float64) BFloat16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	exp := int(b>>52) & 0x7ff
	frac := b & (1<<52 - 1)

	switch {
	case exp == 0x7ff:
		if frac == 0 {
			return BFloat16(sign | 0x7f80)
		}
		return BFloat16(sign | 0x7fc0 | uint16(frac>>45))
	case exp > 1023+127:
		return BFloat16(sign | 0x7f80)
	case exp >= 1023-126:
		h := uint64(exp-(1023-127))<<7 | frac>>45
		h += roundBit64(frac, 45)
		return BFloat16(sign | uint16(h))
	case exp >= 1023-134:
		m := frac | 1<<52
		shift := uint(942 - exp) // units of 2^-133
		h := m >> shift
		h += roundBit64(m, shift)
		return BFloat16(sign | uint16(h))
	default:
		return BFloat16(sign)
	}
}

// Float32 returns h as a float32. The conversion is exact; NaNs are made
// quiet.
func (h BFloat16) Float32() float32 {
	b := uint32(h) << 16
	if b&0x7fffffff > 0x7f800000 {
		b |= 0x00400000
	}
	return math.Float32frombits(b)
}

// Float64 returns h as a float64. The conversion is exact.
func (h BFloat16) Float64() float64 { return float64(h.Float32()) }

// String formats h like a float32 with the 'g' verb.
func (h BFloat16) String() string { return formatFloat32(h.Float32()) }

// roundBit32 returns 1 if the low shift bits of m, which are being dropped,
// call for rounding the kept part up under round-to-nearest-even, else 0.
// 1 <= shift <= 31.
func roundBit32(m uint32, shift uint) uint32 {
	half := uint32(1) << (shift - 1)
	rest := m & (half<<1 - 1)
	if rest > half || (rest == half && m&(half<<1) != 0) {
		return 1
	}
	return 0
}

// roundBit64 is roundBit32 for 64-bit m; 1 <= shift <= 63.
func roundBit64(m uint64, shift uint) uint64 {
	half := uint64(1) << (shift - 1)
	rest := m & (half<<1 - 1)
	if rest > half || (rest == half && m&(half<<1) != 0) {
		return 1
	}
	return 0
}

func formatFloat32(f float32) string {
	return strconv.FormatFloat(float64(f), 'g', -1, 32)
}
