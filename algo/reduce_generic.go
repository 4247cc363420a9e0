package algo

import (
	"encoding/binary"
	"math"

	"github.com/occl/occl/algo/half"
)

// Portable reduction loops over typed slices, and the element-by-element
// path for big-endian or alignment-strict machines.

// reducible is the set of element types reduced with Go arithmetic directly.
type reducible interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// reducibleInt is the set of integer element types.
type reducibleInt interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64
}

func reduceInts[T reducibleInt](dst, a, b []T, op Op) {
	i := 0
	if vectorFor(dst) {
		i = reduceIntsVector(dst, a, b, op)
	}
	reduceSlices(dst[i:], a[i:], b[i:], op)
}

func reduceFloat32(dst, a, b []float32, op Op) {
	i := 0
	if vectorFor(dst) {
		i = reduceFloat32Vector(dst, a, b, op)
	}
	reduceSlices(dst[i:], a[i:], b[i:], op)
}

func reduceFloat64(dst, a, b []float64, op Op) {
	i := 0
	if vectorFor(dst) {
		i = reduceFloat64Vector(dst, a, b, op)
	}
	reduceSlices(dst[i:], a[i:], b[i:], op)
}

// reduceSlices sets dst[i] = a[i] op b[i]; a and b are at least as long as
// dst.
func reduceSlices[T reducible](dst, a, b []T, op Op) {
	switch op {
	case Sum:
		sumSlices(dst, a, b)
	case Prod:
		prodSlices(dst, a, b)
	case Max:
		maxSlices(dst, a, b)
	case Min:
		minSlices(dst, a, b)
	}
}

// The loops below are unrolled by eight; converting to array pointers leaves
// one bounds check per block. Loads of an element precede the store to it,
// so dst may be a or b.

func sumSlices[T reducible](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; n-i >= 8; i += 8 {
		d, x, y := (*[8]T)(dst[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d[0] = x[0] + y[0]
		d[1] = x[1] + y[1]
		d[2] = x[2] + y[2]
		d[3] = x[3] + y[3]
		d[4] = x[4] + y[4]
		d[5] = x[5] + y[5]
		d[6] = x[6] + y[6]
		d[7] = x[7] + y[7]
	}
	for ; i < n; i++ {
		dst[i] = a[i] + b[i]
	}
}

func prodSlices[T reducible](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; n-i >= 8; i += 8 {
		d, x, y := (*[8]T)(dst[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d[0] = x[0] * y[0]
		d[1] = x[1] * y[1]
		d[2] = x[2] * y[2]
		d[3] = x[3] * y[3]
		d[4] = x[4] * y[4]
		d[5] = x[5] * y[5]
		d[6] = x[6] * y[6]
		d[7] = x[7] * y[7]
	}
	for ; i < n; i++ {
		dst[i] = a[i] * b[i]
	}
}

func maxSlices[T reducible](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; n-i >= 8; i += 8 {
		d, x, y := (*[8]T)(dst[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d[0] = max(x[0], y[0])
		d[1] = max(x[1], y[1])
		d[2] = max(x[2], y[2])
		d[3] = max(x[3], y[3])
		d[4] = max(x[4], y[4])
		d[5] = max(x[5], y[5])
		d[6] = max(x[6], y[6])
		d[7] = max(x[7], y[7])
	}
	for ; i < n; i++ {
		dst[i] = max(a[i], b[i])
	}
}

func minSlices[T reducible](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; n-i >= 8; i += 8 {
		d, x, y := (*[8]T)(dst[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d[0] = min(x[0], y[0])
		d[1] = min(x[1], y[1])
		d[2] = min(x[2], y[2])
		d[3] = min(x[3], y[3])
		d[4] = min(x[4], y[4])
		d[5] = min(x[5], y[5])
		d[6] = min(x[6], y[6])
		d[7] = min(x[7], y[7])
	}
	for ; i < n; i++ {
		dst[i] = min(a[i], b[i])
	}
}

// apply returns x op y.
func applyOp[T reducible](op Op, x, y T) T {
	switch op {
	case Sum:
		return x + y
	case Prod:
		return x * y
	case Max:
		return max(x, y)
	default:
		return min(x, y)
	}
}

// divideInts divides signed integers by n > 0, truncating. The quotient of a
// value of T by a positive divisor always fits in T, so the division is done
// in int64 to keep n from wrapping.
func divideInts[T ~int8 | ~int32 | ~int64](buf []T, n int) {
	d := int64(n)
	for i, x := range buf {
		buf[i] = T(int64(x) / d)
	}
}

// divideUints divides unsigned integers by n > 0, truncating.
func divideUints[T ~uint8 | ~uint32 | ~uint64](buf []T, n int) {
	d := uint64(n)
	for i, x := range buf {
		buf[i] = T(uint64(x) / d)
	}
}

func divideFloat32(buf []float32, n int) {
	d := float32(n)
	i := 0
	if vectorFor(buf) {
		i = divideFloat32Vector(buf, d)
	}
	for ; i < len(buf); i++ {
		buf[i] /= d
	}
}

func divideFloat64(buf []float64, n int) {
	d := float64(n)
	i := 0
	if vectorFor(buf) {
		i = divideFloat64Vector(buf, d)
	}
	for ; i < len(buf); i++ {
		buf[i] /= d
	}
}

// reduceBytes is the reduction for machines where buffers cannot be viewed
// as typed slices: it decodes and encodes every element explicitly.
func reduceBytes(dst, a, b []byte, dt DType, op Op) {
	le := binary.LittleEndian
	switch dt {
	case Int8:
		for i := range dst {
			dst[i] = byte(applyOp(op, int8(a[i]), int8(b[i])))
		}
	case Uint8:
		for i := range dst {
			dst[i] = applyOp(op, a[i], b[i])
		}
	case Int32:
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], uint32(applyOp(op, int32(le.Uint32(a[i:])), int32(le.Uint32(b[i:])))))
		}
	case Uint32:
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], applyOp(op, le.Uint32(a[i:]), le.Uint32(b[i:])))
		}
	case Int64:
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], uint64(applyOp(op, int64(le.Uint64(a[i:])), int64(le.Uint64(b[i:])))))
		}
	case Uint64:
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], applyOp(op, le.Uint64(a[i:]), le.Uint64(b[i:])))
		}
	case Float16:
		for i := 0; i < len(dst); i += 2 {
			x := half.Float16(le.Uint16(a[i:])).Float32()
			y := half.Float16(le.Uint16(b[i:])).Float32()
			le.PutUint16(dst[i:], uint16(half.Float16FromFloat32(applyOp(op, x, y))))
		}
	case BFloat16:
		for i := 0; i < len(dst); i += 2 {
			x := half.BFloat16(le.Uint16(a[i:])).Float32()
			y := half.BFloat16(le.Uint16(b[i:])).Float32()
			le.PutUint16(dst[i:], uint16(half.BFloat16FromFloat32(applyOp(op, x, y))))
		}
	case Float32:
		for i := 0; i < len(dst); i += 4 {
			x := math.Float32frombits(le.Uint32(a[i:]))
			y := math.Float32frombits(le.Uint32(b[i:]))
			le.PutUint32(dst[i:], math.Float32bits(applyOp(op, x, y)))
		}
	case Float64:
		for i := 0; i < len(dst); i += 8 {
			x := math.Float64frombits(le.Uint64(a[i:]))
			y := math.Float64frombits(le.Uint64(b[i:]))
			le.PutUint64(dst[i:], math.Float64bits(applyOp(op, x, y)))
		}
	}
}

// divideBytes is Finalize's division for machines where buffers cannot be
// viewed as typed slices.
func divideBytes(buf []byte, dt DType, n int) {
	le := binary.LittleEndian
	switch dt {
	case Int8:
		for i, x := range buf {
			buf[i] = byte(int64(int8(x)) / int64(n))
		}
	case Uint8:
		for i, x := range buf {
			buf[i] = byte(uint64(x) / uint64(n))
		}
	case Int32:
		for i := 0; i < len(buf); i += 4 {
			le.PutUint32(buf[i:], uint32(int64(int32(le.Uint32(buf[i:])))/int64(n)))
		}
	case Uint32:
		for i := 0; i < len(buf); i += 4 {
			le.PutUint32(buf[i:], uint32(uint64(le.Uint32(buf[i:]))/uint64(n)))
		}
	case Int64:
		for i := 0; i < len(buf); i += 8 {
			le.PutUint64(buf[i:], uint64(int64(le.Uint64(buf[i:]))/int64(n)))
		}
	case Uint64:
		for i := 0; i < len(buf); i += 8 {
			le.PutUint64(buf[i:], le.Uint64(buf[i:])/uint64(n))
		}
	case Float16:
		d := float32(n)
		for i := 0; i < len(buf); i += 2 {
			x := half.Float16(le.Uint16(buf[i:])).Float32()
			le.PutUint16(buf[i:], uint16(half.Float16FromFloat32(x/d)))
		}
	case BFloat16:
		d := float32(n)
		for i := 0; i < len(buf); i += 2 {
			x := half.BFloat16(le.Uint16(buf[i:])).Float32()
			le.PutUint16(buf[i:], uint16(half.BFloat16FromFloat32(x/d)))
		}
	case Float32:
		d := float32(n)
		for i := 0; i < len(buf); i += 4 {
			le.PutUint32(buf[i:], math.Float32bits(math.Float32frombits(le.Uint32(buf[i:]))/d))
		}
	case Float64:
		d := float64(n)
		for i := 0; i < len(buf); i += 8 {
			le.PutUint64(buf[i:], math.Float64bits(math.Float64frombits(le.Uint64(buf[i:]))/d))
		}
	}
}
