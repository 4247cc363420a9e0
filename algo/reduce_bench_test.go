package algo

import (
	"fmt"
	"testing"
)

const benchBytes = 16 << 20

// BenchmarkCopy16MiB is the yardstick for the reduction benchmarks: copy()
// over buffers of the same size, in the same run.
func BenchmarkCopy16MiB(b *testing.B) {
	dst, src := make([]byte, benchBytes), make([]byte, benchBytes)
	fillBench(src)
	b.SetBytes(benchBytes)
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkReduceFloat32Sum16MiB measures the hot case of allreduce: an
// in-place float32 sum over 16 MiB.
func BenchmarkReduceFloat32Sum16MiB(b *testing.B) {
	benchReduce(b, Float32, Sum, benchBytes)
}

// BenchmarkReduce runs every dtype and op over 1 MiB buffers.
func BenchmarkReduce(b *testing.B) {
	for _, dt := range DTypes() {
		for _, op := range []Op{Sum, Prod, Max, Min} {
			b.Run(fmt.Sprintf("%v/%v", dt, op), func(b *testing.B) {
				benchReduce(b, dt, op, 1<<20)
			})
		}
	}
}

// BenchmarkFinalizeAvg measures Finalize's division over 1 MiB buffers.
func BenchmarkFinalizeAvg(b *testing.B) {
	for _, dt := range DTypes() {
		b.Run(dt.String(), func(b *testing.B) {
			buf := make([]byte, 1<<20)
			fillBench(buf)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				Finalize(buf, dt, Avg, 3)
			}
		})
	}
}

func benchReduce(b *testing.B, dt DType, op Op, size int) {
	dst, src := make([]byte, size), make([]byte, size)
	fillBench(dst)
	fillBench(src)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		ReduceInto(dst, src, dt, op)
	}
}

// fillBench fills buf with small positive numbers of every type, so that
// float sums neither overflow nor fall into subnormal arithmetic.
func fillBench(buf []byte) {
	for i := range buf {
		buf[i] = byte(i%7 + 0x31)
	}
}

// BenchmarkReduce3Small measures Reduce3 on a few elements, as a small
// all-reduce's recursive doubling runs it once per step: there the calls
// around the arithmetic are the cost.
func BenchmarkReduce3Small(b *testing.B) {
	for _, dt := range []DType{Float32, Float64, Int64, BFloat16} {
		for _, n := range []int{8, 64} {
			b.Run(fmt.Sprintf("%v/%dB", dt, n), func(b *testing.B) {
				x, y, d := make([]byte, n), make([]byte, n), make([]byte, n)
				fillBench(x)
				fillBench(y)
				b.ReportAllocs()
				for b.Loop() {
					Reduce3(d, x, y, dt, Sum)
				}
			})
		}
	}
}
