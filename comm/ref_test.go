package comm_test

// An independent reference for collective results. Inputs are small
// integers chosen per reduction so that every result is exact in every
// dtype whatever the order of reduction; expected values are computed
// serially in each dtype's own domain (wrapping integers of the type's
// width, float64 for floats) and only then encoded, so a kernel or schedule
// bug cannot hide behind the same code computing both sides.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/occl/occl/algo/half"
	"github.com/occl/occl/comm"
)

// val is a value in the reference domain of a dtype.
type val struct {
	i int64   // signed integer types
	u uint64  // unsigned integer types
	f float64 // floating point types
}

func isSigned(dt comm.DType) bool {
	return dt == comm.Int8 || dt == comm.Int32 || dt == comm.Int64
}

func isUnsigned(dt comm.DType) bool {
	return dt == comm.Uint8 || dt == comm.Uint32 || dt == comm.Uint64
}

func width(dt comm.DType) uint { return uint(8 * dt.Size()) }

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

// gen is the input of rank at global element index idx for reduction op.
func gen(op comm.Op, rank, idx int) int64 {
	switch op {
	case comm.Prod:
		return [...]int64{1, -1, 2, 1, -1}[(rank+idx)%5]
	case comm.Min, comm.Max:
		return int64((rank*37+idx*11)%201) - 100
	default:
		return int64((rank*7+idx*3)%7) - 3
	}
}

func toVal(dt comm.DType, x int64) val {
	switch {
	case isSigned(dt):
		return val{i: wrapS(x, width(dt))}
	case isUnsigned(dt):
		return val{u: wrapU(uint64(x), width(dt))}
	}
	return val{f: float64(x)}
}

func combine(dt comm.DType, op comm.Op, a, b val) val {
	w := width(dt)
	switch {
	case isSigned(dt):
		switch op {
		case comm.Prod:
			return val{i: wrapS(a.i*b.i, w)}
		case comm.Min:
			return val{i: min(a.i, b.i)}
		case comm.Max:
			return val{i: max(a.i, b.i)}
		}
		return val{i: wrapS(a.i+b.i, w)}
	case isUnsigned(dt):
		switch op {
		case comm.Prod:
			return val{u: wrapU(a.u*b.u, w)}
		case comm.Min:
			return val{u: min(a.u, b.u)}
		case comm.Max:
			return val{u: max(a.u, b.u)}
		}
		return val{u: wrapU(a.u+b.u, w)}
	}
	switch op {
	case comm.Prod:
		return val{f: a.f * b.f}
	case comm.Min:
		return val{f: math.Min(a.f, b.f)}
	case comm.Max:
		return val{f: math.Max(a.f, b.f)}
	}
	return val{f: a.f + b.f}
}

// finish applies Avg's division by n as the dtype defines it.
func finish(dt comm.DType, op comm.Op, v val, n int) val {
	if op != comm.Avg {
		return v
	}
	switch {
	case isSigned(dt):
		return val{i: v.i / int64(n)}
	case isUnsigned(dt):
		return val{u: v.u / uint64(n)}
	case dt == comm.Float64:
		return val{f: v.f / float64(n)}
	}
	return val{f: float64(float32(v.f) / float32(n))}
}

func put(dt comm.DType, b []byte, v val) {
	switch dt {
	case comm.Int8:
		b[0] = byte(v.i)
	case comm.Uint8:
		b[0] = byte(v.u)
	case comm.Int32:
		binary.LittleEndian.PutUint32(b, uint32(v.i))
	case comm.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(v.u))
	case comm.Int64:
		binary.LittleEndian.PutUint64(b, uint64(v.i))
	case comm.Uint64:
		binary.LittleEndian.PutUint64(b, v.u)
	case comm.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v.f)))
	case comm.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v.f))
	case comm.Float16:
		binary.LittleEndian.PutUint16(b, uint16(half.Float16FromFloat32(float32(v.f))))
	case comm.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(half.BFloat16FromFloat32(float32(v.f))))
	default:
		panic(fmt.Sprint("dtype ", dt))
	}
}

// input returns rank's input of n elements starting at global index base.
func input(dt comm.DType, op comm.Op, rank, base, n int) []byte {
	es := dt.Size()
	b := make([]byte, n*es)
	for i := 0; i < n; i++ {
		put(dt, b[i*es:], toVal(dt, gen(op, rank, base+i)))
	}
	return b
}

// reduced returns the reduction over ranks 0..size-1 of the inputs at
// global indices base..base+n-1.
func reduced(dt comm.DType, op comm.Op, size, base, n int) []byte {
	es := dt.Size()
	red := op
	if red == comm.Avg {
		red = comm.Sum
	}
	b := make([]byte, n*es)
	for i := 0; i < n; i++ {
		acc := toVal(dt, gen(op, 0, base+i))
		for r := 1; r < size; r++ {
			acc = combine(dt, red, acc, toVal(dt, gen(op, r, base+i)))
		}
		put(dt, b[i*es:], finish(dt, op, acc, size))
	}
	return b
}
