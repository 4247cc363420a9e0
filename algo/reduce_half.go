package algo

import "github.com/occl/occl/algo/half"

// Reductions of 16-bit floats: each element is widened to float32, combined,
// and rounded back to nearest even.

func reduceFloat16(dst, a, b []half.Float16, op Op) {
	i := 0
	if vectorFor(dst) {
		i = reduceFloat16Vector(dst, a, b, op)
	}
	dst, a, b = dst[i:], a[i:], b[i:]
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum:
		for i := range dst {
			dst[i] = half.Float16FromFloat32(a[i].Float32() + b[i].Float32())
		}
	case Prod:
		for i := range dst {
			dst[i] = half.Float16FromFloat32(a[i].Float32() * b[i].Float32())
		}
	case Max:
		for i := range dst {
			dst[i] = half.Float16FromFloat32(max(a[i].Float32(), b[i].Float32()))
		}
	case Min:
		for i := range dst {
			dst[i] = half.Float16FromFloat32(min(a[i].Float32(), b[i].Float32()))
		}
	}
}

func reduceBFloat16(dst, a, b []half.BFloat16, op Op) {
	i := 0
	if vectorFor(dst) {
		i = reduceBFloat16Vector(dst, a, b, op)
	}
	dst, a, b = dst[i:], a[i:], b[i:]
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum:
		for i := range dst {
			dst[i] = half.BFloat16FromFloat32(a[i].Float32() + b[i].Float32())
		}
	case Prod:
		for i := range dst {
			dst[i] = half.BFloat16FromFloat32(a[i].Float32() * b[i].Float32())
		}
	case Max:
		for i := range dst {
			dst[i] = half.BFloat16FromFloat32(max(a[i].Float32(), b[i].Float32()))
		}
	case Min:
		for i := range dst {
			dst[i] = half.BFloat16FromFloat32(min(a[i].Float32(), b[i].Float32()))
		}
	}
}

func divideFloat16(buf []half.Float16, n int) {
	d := float32(n)
	i := 0
	if vectorFor(buf) {
		i = divideFloat16Vector(buf, d)
	}
	for ; i < len(buf); i++ {
		buf[i] = half.Float16FromFloat32(buf[i].Float32() / d)
	}
}

func divideBFloat16(buf []half.BFloat16, n int) {
	d := float32(n)
	i := 0
	if vectorFor(buf) {
		i = divideBFloat16Vector(buf, d)
	}
	for ; i < len(buf); i++ {
		buf[i] = half.BFloat16FromFloat32(buf[i].Float32() / d)
	}
}
