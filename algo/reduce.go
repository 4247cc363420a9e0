package algo

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/occl/occl/algo/half"
)

// Elementwise reduction kernels.
//
// Buffers are byte slices holding little-endian elements of a DType. On
// little-endian machines the bytes are viewed in place as typed slices;
// where the machine has them, SIMD kernels (reduce_amd64.s) process the bulk
// of each buffer and portable Go loops the rest. Every path computes the same
// bits for the same inputs, except that when the result is a NaN its payload
// may depend on the path. float16 and bfloat16 are widened to float32,
// combined, and rounded back to nearest even; float32 carries more than
// twice their precision, so this equals rounding the exact result once.
//
// Integer arithmetic wraps around, as Go's does. For floating-point Max and
// Min a NaN in either operand gives a NaN, and -0 orders below +0, as with Go's
// built-in max and min (IEEE 754-2019 maximum and minimum). Sum and Prod
// follow IEEE 754 (and Go) arithmetic.

// littleEndian reports whether the target stores integers least significant
// byte first, so that wire-format buffers can be used as typed slices.
const littleEndian = runtime.GOARCH == "386" || runtime.GOARCH == "amd64" ||
	runtime.GOARCH == "arm" || runtime.GOARCH == "arm64" ||
	runtime.GOARCH == "loong64" || runtime.GOARCH == "mips64le" ||
	runtime.GOARCH == "mipsle" || runtime.GOARCH == "ppc64le" ||
	runtime.GOARCH == "riscv64" || runtime.GOARCH == "wasm"

// unalignedOK reports whether the target loads and stores misaligned words
// in hardware at full speed, so that typed views need no alignment.
const unalignedOK = runtime.GOARCH == "386" || runtime.GOARCH == "amd64" ||
	runtime.GOARCH == "arm64" || runtime.GOARCH == "ppc64le"

// Kernel selection. Both are on whenever the machine allows; tests switch
// them off to run the portable paths against the same references.
var (
	// useTyped views buffers as typed slices instead of decoding each
	// element with encoding/binary.
	useTyped = littleEndian
	// useVector enables the architecture's SIMD kernels.
	useVector = vectorAvailable
)

// vectorMin is the fewest bytes a SIMD kernel is called for. The kernels
// run whole blocks of 16 or 32 bytes and leave the rest to the portable
// loops, so below the smallest block a call does nothing but its dispatch:
// a float32 sum of 2 elements took 25 ns through Reduce3 with the call.
const vectorMin = 16

// vectorFor reports whether the SIMD kernels run on s (see vectorMin).
func vectorFor[T any](s []T) bool {
	return useVector && len(s)*int(unsafe.Sizeof(*new(T))) >= vectorMin
}

// ReduceInto combines src into dst elementwise: dst[i] = dst[i] op src[i],
// where the bytes are little-endian elements of dt.
//
// op must be Sum, Prod, Max or Min; an average is computed by reducing with
// Avg.Combiner() and then calling Finalize. len(dst) must equal len(src) and
// be a multiple of dt.Size(). ReduceInto panics if these preconditions do not
// hold; callers validate user input before reaching it. It allocates nothing.
func ReduceInto(dst, src []byte, dt DType, op Op) {
	checkReduceArgs("ReduceInto", dst, dt, op)
	if len(src) != len(dst) {
		panic(fmt.Sprintf("algo.ReduceInto: len(dst) = %d but len(src) = %d", len(dst), len(src)))
	}
	if partialOverlap(dst, src) {
		panic("algo.ReduceInto: dst and src overlap without being the same buffer")
	}
	reduceBuffers(dst, dst, src, dt, op)
}

// Reduce3 stores a op b into dst elementwise: dst[i] = a[i] op b[i]. dst may
// be a or b (the same slice), which makes it ReduceInto; otherwise it must not
// overlap them. The preconditions are those of ReduceInto, for all three
// buffers.
func Reduce3(dst, a, b []byte, dt DType, op Op) {
	checkReduceArgs("Reduce3", dst, dt, op)
	if len(a) != len(dst) || len(b) != len(dst) {
		panic(fmt.Sprintf("algo.Reduce3: len(dst) = %d but len(a) = %d and len(b) = %d", len(dst), len(a), len(b)))
	}
	if partialOverlap(dst, a) || partialOverlap(dst, b) {
		panic("algo.Reduce3: dst overlaps a source without being the same buffer")
	}
	reduceBuffers(dst, a, b, dt, op)
}

// checkReduceArgs panics unless dt is valid, op is elementwise and dst holds
// whole elements.
func checkReduceArgs(fn string, dst []byte, dt DType, op Op) {
	if !dt.Valid() {
		panic(fmt.Sprintf("algo.%s: invalid dtype %v", fn, dt))
	}
	switch op {
	case Sum, Prod, Max, Min:
	case Avg:
		panic(fmt.Sprintf("algo.%s: avg is not an elementwise reduction; reduce with Avg.Combiner() and call Finalize", fn))
	default:
		panic(fmt.Sprintf("algo.%s: invalid reduction %v", fn, op))
	}
	if len(dst)&(dt.Size()-1) != 0 { // sizes are powers of two: no division
		panic(fmt.Sprintf("algo.%s: buffer length %d is not a multiple of the %v size %d", fn, len(dst), dt, dt.Size()))
	}
}

// partialOverlap reports whether x and y share memory without starting at
// the same address.
func partialOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	px, py := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return px != py && px < py+uintptr(len(y)) && py < px+uintptr(len(x))
}

// Finalize completes a reduction: for op == Avg it divides every element of
// buf by n, the number of contributions; for every other op it does nothing.
//
// Integers are divided with Go's truncating division of the value as stored
// in its type. Floating-point elements are divided in float32 for float16,
// bfloat16 and float32, and in float64 for float64, and rounded to the type.
// n must be positive and len(buf) a multiple of dt.Size().
func Finalize(buf []byte, dt DType, op Op, n int) {
	if op != Avg {
		return
	}
	if !dt.Valid() {
		panic(fmt.Sprintf("algo.Finalize: invalid dtype %v", dt))
	}
	if n <= 0 {
		panic(fmt.Sprintf("algo.Finalize: count %d is not positive", n))
	}
	if len(buf)%dt.Size() != 0 {
		panic(fmt.Sprintf("algo.Finalize: buffer length %d is not a multiple of the %v size %d", len(buf), dt, dt.Size()))
	}
	if n == 1 || len(buf) == 0 {
		return
	}
	if !canView(buf, buf, buf, dt.Size()) {
		divideBytes(buf, dt, n)
		return
	}
	switch dt {
	case Int8:
		divideInts(viewAs[int8](buf), n)
	case Uint8:
		divideUints(viewAs[uint8](buf), n)
	case Int32:
		divideInts(viewAs[int32](buf), n)
	case Uint32:
		divideUints(viewAs[uint32](buf), n)
	case Int64:
		divideInts(viewAs[int64](buf), n)
	case Uint64:
		divideUints(viewAs[uint64](buf), n)
	case Float16:
		divideFloat16(viewAs[half.Float16](buf), n)
	case BFloat16:
		divideBFloat16(viewAs[half.BFloat16](buf), n)
	case Float32:
		divideFloat32(viewAs[float32](buf), n)
	case Float64:
		divideFloat64(viewAs[float64](buf), n)
	}
}

// canView reports whether the three buffers may be used as typed slices of
// elements of the given size.
func canView(dst, a, b []byte, size int) bool {
	if !useTyped {
		return false
	}
	if unalignedOK {
		return true
	}
	m := uintptr(size - 1)
	return (uintptr(unsafe.Pointer(unsafe.SliceData(dst)))|
		uintptr(unsafe.Pointer(unsafe.SliceData(a)))|
		uintptr(unsafe.Pointer(unsafe.SliceData(b))))&m == 0
}

// view returns the bytes of b as a slice of T, which must be a fixed-size
// type without pointers. len(b) must be a multiple of T's size.
func viewAs[T any](b []byte) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))/unsafe.Sizeof(zero))
}

func reduceBuffers(dst, a, b []byte, dt DType, op Op) {
	if len(dst) == 0 {
		return
	}
	if len(dst) <= tinyReduction && op == Sum && canView(dst, a, b, dt.Size()) && sumTiny(dst, a, b, dt) {
		return
	}
	if !canView(dst, a, b, dt.Size()) {
		reduceBytes(dst, a, b, dt, op)
		return
	}
	switch dt {
	case Int8:
		reduceInts(viewAs[int8](dst), viewAs[int8](a), viewAs[int8](b), op)
	case Uint8:
		reduceInts(viewAs[uint8](dst), viewAs[uint8](a), viewAs[uint8](b), op)
	case Int32:
		reduceInts(viewAs[int32](dst), viewAs[int32](a), viewAs[int32](b), op)
	case Uint32:
		reduceInts(viewAs[uint32](dst), viewAs[uint32](a), viewAs[uint32](b), op)
	case Int64:
		reduceInts(viewAs[int64](dst), viewAs[int64](a), viewAs[int64](b), op)
	case Uint64:
		reduceInts(viewAs[uint64](dst), viewAs[uint64](a), viewAs[uint64](b), op)
	case Float16:
		reduceFloat16(viewAs[half.Float16](dst), viewAs[half.Float16](a), viewAs[half.Float16](b), op)
	case BFloat16:
		reduceBFloat16(viewAs[half.BFloat16](dst), viewAs[half.BFloat16](a), viewAs[half.BFloat16](b), op)
	case Float32:
		reduceFloat32(viewAs[float32](dst), viewAs[float32](a), viewAs[float32](b), op)
	case Float64:
		reduceFloat64(viewAs[float64](dst), viewAs[float64](a), viewAs[float64](b), op)
	}
}

// tinyReduction is the largest buffer sumTiny takes: a scalar or two, as
// a loss or a counter is all-reduced, whose time is the calls down to the
// loops, not the loop.
const tinyReduction = 16

// sumTiny sums a and b into dst, of at most tinyReduction bytes of the
// common types (float32, float64, int32, int64), in place of the generic
// path's calls, and reports whether it did.
func sumTiny(dst, a, b []byte, dt DType) bool {
	switch dt {
	case Float32:
		addInto(viewAs[float32](dst), viewAs[float32](a), viewAs[float32](b))
	case Float64:
		addInto(viewAs[float64](dst), viewAs[float64](a), viewAs[float64](b))
	case Int32:
		addInto(viewAs[int32](dst), viewAs[int32](a), viewAs[int32](b))
	case Int64:
		addInto(viewAs[int64](dst), viewAs[int64](a), viewAs[int64](b))
	default:
		return false
	}
	return true
}

// addInto stores a[i]+b[i] into dst[i]; the loads of an element precede
// its store, so dst may be a or b. It is small enough to be inlined.
func addInto[T float32 | float64 | int32 | int64](dst, a, b []T) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}
