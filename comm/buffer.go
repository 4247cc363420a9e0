package comm

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/algo/half"
)

// DType is the element type of a buffer.
type DType = algo.DType

// Element types.
const (
	Int8     = algo.Int8
	Uint8    = algo.Uint8
	Int32    = algo.Int32
	Uint32   = algo.Uint32
	Int64    = algo.Int64
	Uint64   = algo.Uint64
	Float16  = algo.Float16
	BFloat16 = algo.BFloat16
	Float32  = algo.Float32
	Float64  = algo.Float64
)

// Op is a reduction.
type Op = algo.Op

// Reductions. Avg divides the sum by the number of ranks (integer types
// truncate).
const (
	Sum  = algo.Sum
	Prod = algo.Prod
	Max  = algo.Max
	Min  = algo.Min
	Avg  = algo.Avg
)

// Number is the set of Go element types the typed API accepts. float16 and
// bfloat16 elements are half.Float16 and half.BFloat16.
type Number interface {
	int8 | uint8 | int32 | uint32 | int64 | uint64 | float32 | float64 | half.Float16 | half.BFloat16
}

// Buffer is a view of memory holding elements of one DType. It does not own
// the memory: collectives read and write the caller's slice directly. Build
// one with Slice (typed) or Raw (bytes plus dtype). The zero Buffer is an
// empty buffer, which is what non-root ranks may pass where only the root's
// buffer is used.
type Buffer struct {
	b  []byte
	dt DType
}

// Slice returns a Buffer over s without copying. The element type gives the
// DType.
func Slice[T Number](s []T) Buffer {
	var z T
	var b []byte
	if len(s) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
	}
	return Buffer{b: b, dt: DTypeOf[T]()}
}

// DTypeOf returns the DType of Go element type T.
func DTypeOf[T Number]() DType {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case half.Float16:
		return Float16
	default: // half.BFloat16, the only other member of Number
		return BFloat16
	}
}

// Raw returns a Buffer over b holding elements of type dt. len(b) must be a
// multiple of dt.Size(); collectives reject it otherwise.
func Raw(b []byte, dt DType) Buffer { return Buffer{b: b, dt: dt} }

// Bytes returns the memory the buffer views.
func (b Buffer) Bytes() []byte { return b.b }

// DType returns the element type.
func (b Buffer) DType() DType { return b.dt }

// Len returns the number of elements.
func (b Buffer) Len() int {
	if s := b.dt.Size(); s > 0 {
		// Sizes are powers of two: a shift, not a division.
		return len(b.b) >> bits.TrailingZeros(uint(s))
	}
	return 0
}

// Slice returns elements [i, j) of the buffer, viewing the same memory.
// It panics unless 0 <= i <= j <= Len(), as slicing does: bounds out of
// range are a bug of the caller's, which a buffer of another length
// would only hide (or turn into a collective that silently moves
// nothing). A buffer of unknown dtype has no elements.
func (b Buffer) Slice(i, j int) Buffer {
	// Bounds in elements: i*s and j*s of huge bounds overflow, possibly
	// back into the buffer.
	if n := b.Len(); i < 0 || i > j || j > n {
		panic(fmt.Sprintf("occl: Buffer.Slice bounds [%d:%d] out of range with length %d", i, j, n))
	}
	s := b.dt.Size()
	return Buffer{b: b.b[i*s : j*s], dt: b.dt}
}

// validate checks that the buffer is well formed.
func (b Buffer) validate(what string) error {
	if !b.dt.Valid() {
		return invalidf("%s: unknown dtype %d", what, uint8(b.dt))
	}
	// Every element size is a power of two: a mask, not a division.
	if len(b.b)&(b.dt.Size()-1) != 0 {
		return invalidf("%s: %d bytes is not a whole number of %s elements", what, len(b.b), b.dt)
	}
	return nil
}

// addr returns the address of the first byte (0 for an empty buffer).
func addr(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// same reports whether a and b are the same memory.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || addr(a) == addr(b))
}

// overlap reports whether a and b share any byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := addr(a), addr(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
