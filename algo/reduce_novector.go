//go:build !amd64 || purego

package algo

import "github.com/occl/occl/algo/half"

// Without SIMD kernels every element goes through the portable loops.

const vectorAvailable = false

func reduceIntsVector[T reducibleInt](dst, a, b []T, op Op) int { return 0 }
func reduceFloat32Vector(dst, a, b []float32, op Op) int        { return 0 }
func reduceFloat64Vector(dst, a, b []float64, op Op) int        { return 0 }
func reduceFloat16Vector(dst, a, b []half.Float16, op Op) int   { return 0 }
func reduceBFloat16Vector(dst, a, b []half.BFloat16, op Op) int { return 0 }
func divideFloat32Vector(buf []float32, d float32) int          { return 0 }
func divideFloat64Vector(buf []float64, d float64) int          { return 0 }
func divideFloat16Vector(buf []half.Float16, d float32) int     { return 0 }
func divideBFloat16Vector(buf []half.BFloat16, d float32) int   { return 0 }
