package algo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/occl/occl/algo/internal/fakepeers"
)

type allReduceFunc func(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, chunkBytes int) error

var allReduces = []struct {
	name string
	fn   allReduceFunc
}{
	{"ring", AllReduceRing},
	{"rhd", func(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, _ int) error {
		return AllReduceRHD(ctx, p, ws, data, dt, op)
	}},
	{"rd", func(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, _ int) error {
		return AllReduceRD(ctx, p, ws, data, dt, op)
	}},
}

// checkAllReduce runs one allreduce on p ranks and compares every rank's
// result with the serial reference.
func checkAllReduce(t *testing.T, fn allReduceFunc, opts fakepeers.Options, p, count int, dt DType, op Op, chunk int) {
	t.Helper()
	in := rankInputs(dt, op, p, count)
	want := serialReduce(dt, op, in)
	got := make([][]byte, p)
	for r := range got {
		got[r] = append([]byte(nil), in[r]...)
	}
	runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
		return fn(ctx, peers, new(Workspace), got[rank], dt, op, chunk)
	})
	for r := range got {
		if d := firstDiff(got[r], want, dt.Size()); d != "" {
			t.Fatalf("rank %d: %s", r, d)
		}
	}
}

func TestAllReduce(t *testing.T) {
	cs := combos()
	for _, ar := range allReduces {
		t.Run(ar.name, func(t *testing.T) {
			t.Parallel()
			i := 0
			for _, p := range testRanks {
				for _, count := range testCounts(p) {
					for _, chunk := range []int{64, 0} {
						c := cs[i%len(cs)]
						net, opts := netConfig(i)
						i++
						name := fmt.Sprintf("p%d/n%d/chunk%d/%v/%v/%s", p, count, chunk, c.dt, c.op, net)
						t.Run(name, func(t *testing.T) {
							checkAllReduce(t, ar.fn, opts, p, count, c.dt, c.op, chunk)
						})
					}
				}
			}
		})
	}
}

// TestAllReduceTypes runs every dtype and op at a few rank counts.
func TestAllReduceTypes(t *testing.T) {
	for _, ar := range allReduces {
		t.Run(ar.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range []int{3, 6, 8} {
				for i, c := range combos() {
					net, opts := netConfig(i + p)
					t.Run(fmt.Sprintf("p%d/%v/%v/%s", p, c.dt, c.op, net), func(t *testing.T) {
						checkAllReduce(t, ar.fn, opts, p, 1031, c.dt, c.op, 96)
					})
				}
			}
		})
	}
}

func TestAllReduceLarge(t *testing.T) {
	const count = 1 << 18
	for _, ar := range allReduces {
		for _, p := range []int{3, 8} {
			t.Run(fmt.Sprintf("%s/p%d", ar.name, p), func(t *testing.T) {
				t.Parallel()
				checkAllReduce(t, ar.fn, fakepeers.Options{EagerLimit: 4096}, p, count, Float32, Sum, 16<<10)
			})
		}
	}
}

// TestAllReduceBitIdentical checks that every rank ends with the same bits
// when summing random floats, for which the order of additions matters.
func TestAllReduceBitIdentical(t *testing.T) {
	for _, ar := range allReduces {
		for _, dt := range []DType{Float32, Float64, Float16} {
			for _, p := range []int{2, 3, 5, 6, 7, 8} {
				t.Run(fmt.Sprintf("%s/%v/p%d", ar.name, dt, p), func(t *testing.T) {
					t.Parallel()
					const count = 1031
					rng := rand.New(rand.NewPCG(uint64(p), uint64(dt)))
					in := make([][]byte, p)
					exact := make([]float64, count)
					for r := range in {
						in[r] = make([]byte, count*dt.Size())
						for i := 0; i < count; i++ {
							v := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-3))
							putElemFloat(in[r], dt, i, v)
							exact[i] += elemFloat(in[r], dt, i)
						}
					}
					_, opts := netConfig(p)
					runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
						return ar.fn(ctx, peers, new(Workspace), in[rank], dt, Sum, 256)
					})
					for r := 1; r < p; r++ {
						if d := firstDiff(in[r], in[0], dt.Size()); d != "" {
							t.Fatalf("rank %d differs from rank 0: %s", r, d)
						}
					}
					tol := 1e-4
					if dt == Float16 {
						tol = 1e-1
					}
					for i, e := range exact {
						if g := elemFloat(in[0], dt, i); math.Abs(g-e) > tol*(1+math.Abs(e))*float64(p) {
							t.Fatalf("element %d: got %g, want about %g", i, g, e)
						}
					}
				})
			}
		}
	}
}

func putElemFloat(b []byte, dt DType, i int, v float64) {
	switch dt {
	case Float32:
		putElemBits(b, 4, i, uint64(math.Float32bits(float32(v))))
	case Float64:
		putElemBits(b, 8, i, math.Float64bits(v))
	case Float16:
		putElemBits(b, 2, i, uint64(f16Bits(float32(v))))
	}
}

func elemFloat(b []byte, dt DType, i int) float64 {
	switch dt {
	case Float32:
		return float64(math.Float32frombits(uint32(elemBits(b, 4, i))))
	case Float64:
		return math.Float64frombits(elemBits(b, 8, i))
	case Float16:
		return f16Value(uint16(elemBits(b, 2, i)))
	}
	panic("elemFloat: unsupported dtype")
}

func putElemBits(b []byte, size, i int, v uint64) {
	for k := 0; k < size; k++ {
		b[i*size+k] = byte(v >> (8 * k))
	}
}

func elemBits(b []byte, size, i int) uint64 {
	var v uint64
	for k := 0; k < size; k++ {
		v |= uint64(b[i*size+k]) << (8 * k)
	}
	return v
}

// TestAllReduceDetectsMismatch runs different allreduce algorithms on
// different ranks and checks that the step labels expose it as an error
// rather than a wrong result or a hang.
func TestAllReduceDetectsMismatch(t *testing.T) {
	const p, count = 4, 1000
	err := tryRunRanks(p, fakepeers.Options{EagerLimit: 1 << 20}, func(ctx context.Context, rank int, peers Peers) error {
		data := makeInput(Int32, Sum, rank, count)
		if rank == 0 {
			return AllReduceRing(ctx, peers, new(Workspace), data, Int32, Sum, 0)
		}
		return AllReduceRHD(ctx, peers, new(Workspace), data, Int32, Sum)
	})
	if err == nil {
		t.Fatal("mismatched algorithms ran without error")
	}
	t.Log(err)
}

// TestRingOneProcessorInline: in a process with one processor, a ring
// allreduce whose blocks are above 64 KiB and several chunks long runs on
// the calling goroutine (no sender goroutine, which could not overlap the
// copies there): each step sends a window of chunks before it receives,
// the whole step when a block fits the next rank's eager limit, else as
// many chunks as the limit holds. Every rank has sent one window (4
// chunks) when it first receives; uneven counts and rank numbers are
// checked against the serial reference.
func TestRingOneProcessorInline(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, tc := range []struct {
		name         string
		chunk, eager int
		p, count     int
	}{
		{"whole step", 64 << 10, 1 << 20, 4, 4 * 200 << 10 / 4}, // 200 KiB blocks: 4 chunks
		{"windows", 16 << 10, 64 << 10, 2, 2 * 50000},           // 200 KB blocks: windows of 4 chunks
		{"windows", 16 << 10, 64 << 10, 3, 3*50000 + 7},
		{"windows", 16 << 10, 64 << 10, 5, 123457},
	} {
		t.Run(fmt.Sprintf("%s/p%d/n%d", tc.name, tc.p, tc.count), func(t *testing.T) {
			in := rankInputs(Float32, Sum, tc.p, tc.count)
			want := serialReduce(Float32, Sum, in)
			rec := make([]*sendsFirst, tc.p)
			got := make([][]byte, tc.p)
			runRanks(t, tc.p, fakepeers.Options{EagerLimit: tc.eager}, func(ctx context.Context, rank int, peers Peers) error {
				got[rank] = append([]byte(nil), in[rank]...)
				rec[rank] = &sendsFirst{Peers: peers}
				return AllReduceRing(ctx, rec[rank], new(Workspace), got[rank], Float32, Sum, tc.chunk)
			})
			for r := range got {
				if d := firstDiff(got[r], want, 4); d != "" {
					t.Fatalf("rank %d: %s", r, d)
				}
				if s := rec[r]; s.atFirstRecv != 4 {
					t.Errorf("rank %d: %d chunks sent when the first receive started, want one window of 4", r, s.atFirstRecv)
				}
			}
		})
	}
}
