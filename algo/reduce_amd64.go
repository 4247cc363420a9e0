//go:build !purego

package algo

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/occl/occl/algo/half"
)

// AVX2 dispatch for the kernels in reduce_amd64.s. Each entry point hands the
// largest whole number of blocks to the assembly and returns how many
// elements it covered; the portable loops finish the rest.

var (
	vectorAvailable = cpu.X86.HasAVX2
	// hasF16C gates the float16 kernels, which convert with F16C.
	hasF16C = cpu.X86.HasF16C
)

// kernelChunk bounds the bytes handed to one assembly call. Assembly cannot
// be preempted, so huge buffers are cut into pieces to keep goroutine
// preemption (and with it garbage-collection pauses) prompt.
const kernelChunk = 256 << 10

// reduceKernel computes dst = a op b over n bytes, n a positive multiple of the
// kernel's block.
type reduceKernel func(dst, a, b unsafe.Pointer, n int)

// divKernel divides n bytes of buf in place by d.
type divKernel[F float32 | float64] func(buf unsafe.Pointer, n int, d F)

//go:noescape
func addF32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulF32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxF32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minF32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addF64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulF64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxF64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minF64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addBF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulBF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxBF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minBF16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addI8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulI8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxS8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minS8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxU8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minU8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addI32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulI32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxS32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minS32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxU32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minU32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addI64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulI64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxS64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minS64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxU64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minU64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func divF32(buf unsafe.Pointer, n int, d float32)

//go:noescape
func divF64(buf unsafe.Pointer, n int, d float64)

//go:noescape
func divF16(buf unsafe.Pointer, n int, d float32)

//go:noescape
func divBF16(buf unsafe.Pointer, n int, d float32)

// Kernels indexed by Op (Sum, Prod, Max, Min).
var (
	float32Kernels  = [4]reduceKernel{Sum: addF32, Prod: mulF32, Max: maxF32, Min: minF32}
	float64Kernels  = [4]reduceKernel{Sum: addF64, Prod: mulF64, Max: maxF64, Min: minF64}
	float16Kernels  = [4]reduceKernel{Sum: addF16, Prod: mulF16, Max: maxF16, Min: minF16}
	bfloat16Kernels = [4]reduceKernel{Sum: addBF16, Prod: mulBF16, Max: maxBF16, Min: minBF16}
	int8Kernels     = [4]reduceKernel{Sum: addI8, Prod: mulI8, Max: maxS8, Min: minS8}
	uint8Kernels    = [4]reduceKernel{Sum: addI8, Prod: mulI8, Max: maxU8, Min: minU8}
	int32Kernels    = [4]reduceKernel{Sum: addI32, Prod: mulI32, Max: maxS32, Min: minS32}
	uint32Kernels   = [4]reduceKernel{Sum: addI32, Prod: mulI32, Max: maxU32, Min: minU32}
	int64Kernels    = [4]reduceKernel{Sum: addI64, Prod: mulI64, Max: maxS64, Min: minS64}
	uint64Kernels   = [4]reduceKernel{Sum: addI64, Prod: mulI64, Max: maxU64, Min: minU64}
)

// runKernel applies k to the longest prefix of dst made of whole blocks of
// the given size in bytes, and returns the prefix's length in elements.
func runKernel[T any](k reduceKernel, dst, a, b []T, block int) int {
	a, b = a[:len(dst)], b[:len(dst)] // the assembly reads len(dst) elements of each
	size := int(unsafe.Sizeof(*new(T)))
	total := len(dst) * size / block * block
	pd := unsafe.Pointer(unsafe.SliceData(dst))
	pa := unsafe.Pointer(unsafe.SliceData(a))
	pb := unsafe.Pointer(unsafe.SliceData(b))
	for off := 0; off < total; off += kernelChunk {
		n := min(total-off, kernelChunk)
		k(unsafe.Add(pd, off), unsafe.Add(pa, off), unsafe.Add(pb, off), n)
	}
	return total / size
}

// runDivKernel is runKernel for the division kernels.
func runDivKernel[T any, F float32 | float64](k divKernel[F], buf []T, d F, block int) int {
	size := int(unsafe.Sizeof(*new(T)))
	total := len(buf) * size / block * block
	p := unsafe.Pointer(unsafe.SliceData(buf))
	for off := 0; off < total; off += kernelChunk {
		k(unsafe.Add(p, off), min(total-off, kernelChunk), d)
	}
	return total / size
}

func reduceIntsVector[T reducibleInt](dst, a, b []T, op Op) int {
	var ks *[4]reduceKernel
	switch any(dst).(type) {
	case []int8:
		ks = &int8Kernels
	case []uint8:
		ks = &uint8Kernels
	case []int32:
		ks = &int32Kernels
	case []uint32:
		ks = &uint32Kernels
	case []int64:
		ks = &int64Kernels
	case []uint64:
		ks = &uint64Kernels
	default:
		return 0
	}
	return runKernel(ks[op], dst, a, b, 32)
}

func reduceFloat32Vector(dst, a, b []float32, op Op) int {
	return runKernel(float32Kernels[op], dst, a, b, 32)
}

func reduceFloat64Vector(dst, a, b []float64, op Op) int {
	return runKernel(float64Kernels[op], dst, a, b, 32)
}

func reduceFloat16Vector(dst, a, b []half.Float16, op Op) int {
	if !hasF16C {
		return 0
	}
	return runKernel(float16Kernels[op], dst, a, b, 16)
}

func reduceBFloat16Vector(dst, a, b []half.BFloat16, op Op) int {
	return runKernel(bfloat16Kernels[op], dst, a, b, 32)
}

func divideFloat32Vector(buf []float32, d float32) int {
	return runDivKernel(divF32, buf, d, 32)
}

func divideFloat64Vector(buf []float64, d float64) int {
	return runDivKernel(divF64, buf, d, 32)
}

func divideFloat16Vector(buf []half.Float16, d float32) int {
	if !hasF16C {
		return 0
	}
	return runDivKernel(divF16, buf, d, 16)
}

func divideBFloat16Vector(buf []half.BFloat16, d float32) int {
	return runDivKernel(divBF16, buf, d, 32)
}
