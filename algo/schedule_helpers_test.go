package algo

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo/half"
	"github.com/occl/occl/algo/internal/fakepeers"
)

// testTimeout bounds every simulated collective, so that a deadlock fails
// the test with the list of blocked ranks instead of hanging.
const testTimeout = 20 * time.Second

// runRanks runs fn on n ranks of a fake network and fails the test on any error,
// protocol mismatch or undelivered message.
func runRanks(t testing.TB, n int, opts fakepeers.Options, fn func(ctx context.Context, rank int, p Peers) error) {
	t.Helper()
	if opts.Seed == 0 {
		opts.Seed = testSeed(t)
	}
	if err := tryRunRanks(n, opts, fn); err != nil {
		t.Fatal(err)
	}
}

func tryRunRanks(n int, opts fakepeers.Options, fn func(ctx context.Context, rank int, p Peers) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return fakepeers.Run(ctx, n, opts, func(ctx context.Context, rank int, p fakepeers.Peers) error {
		return fn(ctx, rank, p)
	})
}

// testSeeds holds every test's fakepeers seed, by test name.
var testSeeds sync.Map

// testSeed returns t's seed for the random delays of its fake networks,
// the same for every network it runs (fakepeers.SeedEnv fixes it), and
// logs it once, so a failure can be rerun with the same delays.
func testSeed(t testing.TB) uint64 {
	if s, ok := testSeeds.Load(t.Name()); ok {
		return s.(uint64)
	}
	s, loaded := testSeeds.LoadOrStore(t.Name(), fakepeers.NewSeed())
	if !loaded {
		t.Logf("fake network seed %d (%s=%d repeats its delays)", s, fakepeers.SeedEnv, s)
	}
	return s.(uint64)
}

// netConfigs are the network behaviours every schedule is tested under.
var netConfigs = []struct {
	name string
	opts fakepeers.Options
}{
	{"rendezvous", fakepeers.Options{EagerLimit: -1}},
	{"eager0", fakepeers.Options{EagerLimit: 0}},
	{"eager64", fakepeers.Options{EagerLimit: 64}},
	{"buffered", fakepeers.Options{EagerLimit: 1 << 30}},
	{"noeager", fakepeers.Options{EagerLimit: 256, HideEager: true}},
	{"delays", fakepeers.Options{EagerLimit: 0, MaxDelay: 100 * time.Microsecond, DelayProb: 0.1}},
}

// netConfig picks a network configuration by index, cycling.
func netConfig(i int) (string, fakepeers.Options) {
	c := netConfigs[i%len(netConfigs)]
	return c.name, c.opts
}

var (
	testRanks  = []int{1, 2, 3, 4, 5, 6, 7, 8}
	testDTypes = []DType{Int32, Float32, Float64, Uint8}
	testOps    = []Op{Sum, Max, Prod, Min}
)

// testCounts returns the element counts tested for p ranks: empty, tiny,
// around p, primes, without duplicates.
func testCounts(p int) []int {
	var out []int
	seen := map[int]bool{}
	for _, c := range []int{0, 1, 2, p - 1, p + 1, 13, 1031} {
		if c >= 0 && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

type combo struct {
	dt DType
	op Op
}

// combos lists every tested (dtype, op) pair plus the 16-bit floats (Sum,
// Max and Min, whose results on small integers are exact) and Avg, which
// schedules reduce as Sum.
func combos() []combo {
	var out []combo
	for _, op := range testOps {
		for _, dt := range testDTypes {
			out = append(out, combo{dt, op})
		}
	}
	return append(out,
		combo{Float16, Sum}, combo{BFloat16, Max}, combo{Float16, Min},
		combo{Int64, Sum}, combo{Int8, Prod}, combo{Uint64, Max}, combo{Float32, Avg})
}

// inputValue is rank's integer input at index i for op: small enough that
// float sums and products are exact in any order (|sum| <= 8*30, |product|
// <= 3^8), varied enough to catch misplaced elements.
func inputValue(op Op, rank, i int) int64 {
	switch op {
	case Prod:
		vals := [...]int64{1, 2, -1, 3, -2, 1, 1}
		return vals[(rank*3+i*5)%len(vals)]
	case Max, Min:
		return int64((rank*7919+i*104729)%1999) - 999
	}
	return int64((rank*131+i*7)%61) - 30
}

// makeInput returns rank's input vector of count elements.
func makeInput(dt DType, op Op, rank, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		v := inputValue(op, rank, i)
		if dt == BFloat16 || dt == Float16 {
			// Keep 16-bit float values exactly representable.
			v %= 200
		}
		putElemInt(b, dt, i, v)
	}
	return b
}

// putElemInt stores v converted to dt (integers wrap) as element i.
func putElemInt(b []byte, dt DType, i int, v int64) {
	switch dt {
	case Int8, Uint8:
		b[i] = byte(v)
	case Int32, Uint32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	case Int64, Uint64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	case Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case Float64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(v)))
	case Float16:
		binary.LittleEndian.PutUint16(b[2*i:], half.Float16FromFloat32(float32(v)).Bits())
	case BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], half.BFloat16FromFloat32(float32(v)).Bits())
	default:
		panic(fmt.Sprint("putElemInt: unsupported dtype ", dt))
	}
}

type schedNumber interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// schedCombine applies op (its combiner, for Avg) with Go arithmetic on T.
func schedCombine[T schedNumber](op Op, a, b T) T {
	switch op.Combiner() {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Max:
		return max(a, b)
	case Min:
		return min(a, b)
	}
	panic("schedCombine: bad op")
}

// schedFold folds the inputs elementwise in rank order with plain Go
// arithmetic on T, reading and writing elements with get and put.
func schedFold[T schedNumber](op Op, inputs [][]byte, size int, get func([]byte) T, put func([]byte, T)) []byte {
	out := append([]byte(nil), inputs[0]...)
	for _, in := range inputs[1:] {
		for i := 0; i+size <= len(out); i += size {
			put(out[i:], schedCombine(op, get(out[i:]), get(in[i:])))
		}
	}
	return out
}

// serialReduce returns the serial reduction of inputs (one per rank).
func serialReduce(dt DType, op Op, inputs [][]byte) []byte {
	le := binary.LittleEndian
	switch dt {
	case Int8:
		return schedFold(op, inputs, 1, func(b []byte) int8 { return int8(b[0]) }, func(b []byte, v int8) { b[0] = byte(v) })
	case Uint8:
		return schedFold(op, inputs, 1, func(b []byte) uint8 { return b[0] }, func(b []byte, v uint8) { b[0] = v })
	case Int32:
		return schedFold(op, inputs, 4, func(b []byte) int32 { return int32(le.Uint32(b)) }, func(b []byte, v int32) { le.PutUint32(b, uint32(v)) })
	case Uint32:
		return schedFold(op, inputs, 4, le.Uint32, func(b []byte, v uint32) { le.PutUint32(b, v) })
	case Int64:
		return schedFold(op, inputs, 8, func(b []byte) int64 { return int64(le.Uint64(b)) }, func(b []byte, v int64) { le.PutUint64(b, uint64(v)) })
	case Uint64:
		return schedFold(op, inputs, 8, le.Uint64, func(b []byte, v uint64) { le.PutUint64(b, v) })
	case Float32:
		return schedFold(op, inputs, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) },
			func(b []byte, v float32) { le.PutUint32(b, math.Float32bits(v)) })
	case Float64:
		return schedFold(op, inputs, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) },
			func(b []byte, v float64) { le.PutUint64(b, math.Float64bits(v)) })
	case Float16:
		return schedFold(op, inputs, 2, func(b []byte) float32 { return half.Float16FromBits(le.Uint16(b)).Float32() },
			func(b []byte, v float32) { le.PutUint16(b, half.Float16FromFloat32(v).Bits()) })
	case BFloat16:
		return schedFold(op, inputs, 2, func(b []byte) float32 { return half.BFloat16FromBits(le.Uint16(b)).Float32() },
			func(b []byte, v float32) { le.PutUint16(b, half.BFloat16FromFloat32(v).Bits()) })
	}
	panic(fmt.Sprint("serialReduce: unsupported dtype ", dt))
}

// rankInputs returns every rank's input.
func rankInputs(dt DType, op Op, p, count int) [][]byte {
	in := make([][]byte, p)
	for r := range in {
		in[r] = makeInput(dt, op, r, count)
	}
	return in
}

// firstDiff describes the first element where got and want differ.
func firstDiff(got, want []byte, esize int) string {
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := 0; i < len(got); i += esize {
		e := min(i+esize, len(got))
		if string(got[i:e]) != string(want[i:e]) {
			return fmt.Sprintf("element %d: got % x, want % x", i/esize, got[i:e], want[i:e])
		}
	}
	return ""
}

func f16Bits(f float32) uint16 { return half.Float16FromFloat32(f).Bits() }

func f16Value(b uint16) float64 { return half.Float16FromBits(b).Float64() }
