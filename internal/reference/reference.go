// Package reference computes the inputs and expected results of
// collectives independently of occl's kernels and schedules. Tests and
// occl-bench's result check use it.
//
// Inputs are small integers chosen per reduction so that every result is
// exact in every dtype whatever the order of reduction; expected values are
// computed serially in each dtype's own domain (wrapping integers of the
// type's width, float64 for floats) and only then encoded, so a kernel or
// schedule bug cannot hide behind the same code computing both sides.
package reference

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/algo/half"
)

// val is a value in the reference domain of a dtype.
type val struct {
	i int64   // signed integer types
	u uint64  // unsigned integer types
	f float64 // floating point types
}

func isSigned(dt algo.DType) bool {
	return dt == algo.Int8 || dt == algo.Int32 || dt == algo.Int64
}

func isUnsigned(dt algo.DType) bool {
	return dt == algo.Uint8 || dt == algo.Uint32 || dt == algo.Uint64
}

func width(dt algo.DType) uint { return uint(8 * dt.Size()) }

func wrapS(v int64, w uint) int64 {
	if w == 64 {
		return v
	}
	return v << (64 - w) >> (64 - w)
}

func wrapU(v uint64, w uint) uint64 {
	if w == 64 {
		return v
	}
	return v & (1<<w - 1)
}

// Gen is the input of rank at global element index idx for reduction op.
func Gen(op algo.Op, rank, idx int) int64 {
	switch op {
	case algo.Prod:
		return [...]int64{1, -1, 2, 1, -1}[(rank+idx)%5]
	case algo.Min, algo.Max:
		return int64((rank*37+idx*11)%201) - 100
	default:
		return int64((rank*5+idx*3+(rank*idx)%5)%7) - 3
	}
}

func toVal(dt algo.DType, x int64) val {
	switch {
	case isSigned(dt):
		return val{i: wrapS(x, width(dt))}
	case isUnsigned(dt):
		return val{u: wrapU(uint64(x), width(dt))}
	}
	return val{f: float64(x)}
}

func combine(dt algo.DType, op algo.Op, a, b val) val {
	w := width(dt)
	switch {
	case isSigned(dt):
		switch op {
		case algo.Prod:
			return val{i: wrapS(a.i*b.i, w)}
		case algo.Min:
			return val{i: min(a.i, b.i)}
		case algo.Max:
			return val{i: max(a.i, b.i)}
		}
		return val{i: wrapS(a.i+b.i, w)}
	case isUnsigned(dt):
		switch op {
		case algo.Prod:
			return val{u: wrapU(a.u*b.u, w)}
		case algo.Min:
			return val{u: min(a.u, b.u)}
		case algo.Max:
			return val{u: max(a.u, b.u)}
		}
		return val{u: wrapU(a.u+b.u, w)}
	}
	switch op {
	case algo.Prod:
		return val{f: a.f * b.f}
	case algo.Min:
		return val{f: math.Min(a.f, b.f)}
	case algo.Max:
		return val{f: math.Max(a.f, b.f)}
	}
	return val{f: a.f + b.f}
}

// finish applies Avg's division by n as the dtype defines it.
func finish(dt algo.DType, op algo.Op, v val, n int) val {
	if op != algo.Avg {
		return v
	}
	switch {
	case isSigned(dt):
		return val{i: v.i / int64(n)}
	case isUnsigned(dt):
		return val{u: v.u / uint64(n)}
	case dt == algo.Float64:
		return val{f: v.f / float64(n)}
	}
	return val{f: float64(float32(v.f) / float32(n))}
}

func put(dt algo.DType, b []byte, v val) {
	switch dt {
	case algo.Int8:
		b[0] = byte(v.i)
	case algo.Uint8:
		b[0] = byte(v.u)
	case algo.Int32:
		binary.LittleEndian.PutUint32(b, uint32(v.i))
	case algo.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(v.u))
	case algo.Int64:
		binary.LittleEndian.PutUint64(b, uint64(v.i))
	case algo.Uint64:
		binary.LittleEndian.PutUint64(b, v.u)
	case algo.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v.f)))
	case algo.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v.f))
	case algo.Float16:
		binary.LittleEndian.PutUint16(b, uint16(half.Float16FromFloat32(float32(v.f))))
	case algo.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(half.BFloat16FromFloat32(float32(v.f))))
	default:
		panic(fmt.Sprint("dtype ", dt))
	}
}

// Input returns rank's input of n elements starting at global index base.
func Input(dt algo.DType, op algo.Op, rank, base, n int) []byte {
	b := make([]byte, n*dt.Size())
	FillInput(b, dt, op, rank, base)
	return b
}

// FillInput writes rank's input starting at global index base into b.
func FillInput(b []byte, dt algo.DType, op algo.Op, rank, base int) {
	es := dt.Size()
	for i := 0; i < len(b)/es; i++ {
		put(dt, b[i*es:], toVal(dt, Gen(op, rank, base+i)))
	}
}

// Reduced returns the reduction with op over ranks 0..size-1 of the inputs
// at global indices base..base+n-1, as every rank should see it.
func Reduced(dt algo.DType, op algo.Op, size, base, n int) []byte {
	b := make([]byte, n*dt.Size())
	FillReduced(b, dt, op, size, base)
	return b
}

// FillReduced writes Reduced's result for len(b) bytes into b.
func FillReduced(b []byte, dt algo.DType, op algo.Op, size, base int) {
	es := dt.Size()
	red := op
	if red == algo.Avg {
		red = algo.Sum
	}
	for i := 0; i < len(b)/es; i++ {
		acc := toVal(dt, Gen(op, 0, base+i))
		for r := 1; r < size; r++ {
			acc = combine(dt, red, acc, toVal(dt, Gen(op, r, base+i)))
		}
		put(dt, b[i*es:], finish(dt, op, acc, size))
	}
}
