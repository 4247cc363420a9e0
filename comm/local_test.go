package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/topo"
)

// runLocal runs fn on every rank of an in-process communicator of size
// ranks, each on its own goroutine, and returns the errors by rank.
func runLocal(t *testing.T, size int, fn func(ctx context.Context, c *comm.Communicator) error, opts ...comm.Option) []error {
	t.Helper()
	comms, err := comm.NewLocal(size, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := commtest.Each(comms, func(_ int, c *comm.Communicator) error { return fn(ctx, c) })
	for _, c := range comms {
		c.Close()
	}
	return errs
}

func requireOK(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestConformanceLocal(t *testing.T) {
	m := matrix{sizes: []int{0, 1, 2, 7, 13, 1031}, dtypes: allDTypes(), ops: allOps(), async: true}
	for _, size := range []int{1, 2, 3, 4, 5, 8} {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			t.Parallel()
			requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
				return conformance(ctx, c, m)
			}))
		})
	}
}

// TestEveryAlgorithm forces each schedule so that every one of them is
// checked on every rank count, not only the one the size selects.
func TestEveryAlgorithm(t *testing.T) {
	m := matrix{sizes: []int{0, 1, 5, 1031, 40000}, dtypes: []comm.DType{comm.Float32, comm.Int8, comm.BFloat16}, ops: []comm.Op{comm.Sum, comm.Min, comm.Avg}}
	sizes := []int{2, 3, 5, 6, 8}
	if testing.Short() {
		// The race detector's run: an odd, an even non-power-of-two
		// and a power-of-two group beyond 2 ranks, the smallest of
		// each (under it the 8-rank runs took 29-35 s each of the
		// 412 that comm's tests ran there, the 5-rank ones 63 s in
		// all), and a float and a 16-bit type with a plain and a
		// finalized reduction: the types and reductions differ in
		// their kernels, not in what runs concurrently, and the full
		// matrix runs without the race detector (with all three types
		// and reductions, under it this test took 89 of comm's 408 s).
		sizes = []int{2, 3, 4, 6}
		m.dtypes, m.ops = []comm.DType{comm.Float32, comm.BFloat16}, []comm.Op{comm.Sum, comm.Avg}
	}
	for _, a := range []algo.Algorithm{algo.AlgoRing, algo.AlgoRHD, algo.AlgoRD, algo.AlgoTree} {
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%s/np%d", a, size), func(t *testing.T) {
				t.Parallel()
				requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
					return conformance(ctx, c, m)
				}, comm.WithAlgorithm(a), comm.WithChunkSize(4096)))
			})
		}
	}
}

func TestLargeLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("large buffers")
	}
	for _, size := range []int{3, 4} {
		requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error { return large(ctx, c) }))
	}
}

// TestBitIdenticalFloats checks that every rank ends an AllReduce of
// arbitrary floats with exactly the same bits, whatever the schedule.
func TestBitIdenticalFloats(t *testing.T) {
	for _, a := range []algo.Algorithm{algo.AlgoRing, algo.AlgoRHD, algo.AlgoRD} {
		for _, size := range []int{3, 4, 7} {
			results := make([][]float32, size)
			requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
				rng := rand.New(rand.NewPCG(uint64(c.Rank()), 1))
				x := make([]float32, 10007)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * 1e3)
				}
				results[c.Rank()] = x
				return comm.AllReduce(ctx, c, x, x, comm.Sum)
			}, comm.WithAlgorithm(a), comm.WithChunkSize(1024)))
			for r := 1; r < size; r++ {
				for i := range results[0] {
					if math.Float32bits(results[r][i]) != math.Float32bits(results[0][i]) {
						t.Fatalf("%s np%d: rank %d element %d = %v, rank 0 has %v", a, size, r, i, results[r][i], results[0][i])
					}
				}
			}
		}
	}
}

// TestAsyncOrdering issues many operations without waiting and checks that
// they complete in issue order with the right results.
func TestAsyncOrdering(t *testing.T) {
	requireOK(t, runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
		const ops = 64
		bufs := make([][]int32, ops)
		reqs := make([]*comm.Request, ops)
		for i := range reqs {
			bufs[i] = []int32{int32(c.Rank() * i), int32(i)}
			if i%3 == 0 {
				reqs[i] = c.BroadcastAsync(ctx, comm.Slice(bufs[i]), comm.Slice(bufs[i]), i%4)
			} else {
				reqs[i] = c.AllReduceAsync(ctx, comm.Slice(bufs[i]), comm.Slice(bufs[i]), comm.Sum)
			}
		}
		// Wait in reverse order: completion must still follow issue order.
		for i := ops - 1; i >= 0; i-- {
			if err := reqs[i].Wait(ctx); err != nil {
				return err
			}
			for j := 0; j < i; j++ {
				if done, _ := reqs[j].Test(); !done {
					return fmt.Errorf("op %d done before op %d", i, j)
				}
			}
		}
		for i, b := range bufs {
			want := []int32{int32(6 * i), int32(4 * i)}
			if i%3 == 0 {
				want = []int32{int32((i % 4) * i), int32(i)}
			}
			if b[0] != want[0] || b[1] != want[1] {
				return fmt.Errorf("op %d: %v, want %v", i, b, want)
			}
		}
		return nil
	}))
}

func TestTypedAPI(t *testing.T) {
	requireOK(t, runLocal(t, 3, func(ctx context.Context, c *comm.Communicator) error {
		x := []float64{float64(c.Rank()), 1.5}
		if err := comm.AllReduce(ctx, c, x, x, comm.Max); err != nil {
			return err
		}
		if x[0] != 2 || x[1] != 1.5 {
			return fmt.Errorf("max = %v", x)
		}
		all := make([]uint32, 3)
		if err := comm.AllGather(ctx, c, []uint32{uint32(10 + c.Rank())}, all); err != nil {
			return err
		}
		if all[0] != 10 || all[1] != 11 || all[2] != 12 {
			return fmt.Errorf("allgather = %v", all)
		}
		if comm.DTypeOf[uint32]() != comm.Uint32 {
			return fmt.Errorf("DTypeOf")
		}
		return nil
	}))
}

func TestInvalidArguments(t *testing.T) {
	comms, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	defer comms[1].Close()
	c := comms[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f32 := comm.Slice(make([]float32, 4))
	backing := make([]float32, 8)
	cases := map[string]error{
		"length mismatch": c.AllReduce(ctx, f32, comm.Slice(make([]float32, 3)), comm.Sum),
		"dtype mismatch":  c.AllReduce(ctx, f32, comm.Slice(make([]int32, 4)), comm.Sum),
		"bad op":          c.AllReduce(ctx, f32, f32, comm.Op(42)),
		"bad dtype":       c.AllReduce(ctx, comm.Raw(make([]byte, 4), comm.DType(99)), comm.Raw(make([]byte, 4), comm.DType(99)), comm.Sum),
		"ragged bytes":    c.AllReduce(ctx, comm.Raw(make([]byte, 5), comm.Float32), comm.Raw(make([]byte, 5), comm.Float32), comm.Sum),
		"bad root":        c.Broadcast(ctx, f32, f32, 2),
		"negative root":   c.Reduce(ctx, f32, f32, comm.Sum, -1),
		"allgather size":  c.AllGather(ctx, f32, f32),
		"alltoall ragged": c.AllToAll(ctx, comm.Slice(make([]float32, 3)), comm.Slice(make([]float32, 3))),
		"alltoallv count": c.AllToAllV(ctx, f32, []int{1}, []int{0}, f32, []int{1, 1}, []int{0, 1}),
		"alltoallv range": c.AllToAllV(ctx, f32, []int{3, 3}, []int{0, 3}, f32, []int{1, 1}, []int{0, 1}),
		"alltoallv neg":   c.AllToAllV(ctx, f32, []int{-1, 1}, []int{0, 1}, f32, []int{1, 1}, []int{0, 1}),
		"alltoallv self":  c.AllToAllV(ctx, f32, []int{2, 1}, []int{0, 2}, f32, []int{1, 1}, []int{0, 1}),
		"overlap":         c.AllReduce(ctx, comm.Slice(backing[:4]), comm.Slice(backing[1:5]), comm.Sum),
		"send peer":       c.Send(ctx, f32, 5),
		"self unmatched":  c.NewGroup().Send(f32, 0).Run(ctx),
		"split color":     func() error { _, err := c.Split(ctx, -7, 0); return err }(),
	}
	for name, err := range cases {
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	// Invalid calls leave the communicator healthy.
	if c.Err() != nil {
		t.Fatalf("communicator failed after invalid calls: %v", c.Err())
	}
	var wg sync.WaitGroup
	for _, cc := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []int64{1}
			if err := comm.AllReduce(ctx, cc, x, x, comm.Sum); err != nil || x[0] != 2 {
				t.Errorf("AllReduce after invalid calls: %v %v", x, err)
			}
		}()
	}
	wg.Wait()
}

// TestMismatchLocal calls different collectives at the same sequence
// number and checks that every rank reports the mismatch, and where want
// is given that the error names what differs: the calls where they
// differ, else the message the ranks cut the same call into differently,
// with its sizes. Any rank may detect it first, so the error is checked
// for both sides' parts, not their order.
func TestMismatchLocal(t *testing.T) {
	cases := map[string]struct {
		fn   func(ctx context.Context, c *comm.Communicator) error
		want []string
	}{
		"op": {func(ctx context.Context, c *comm.Communicator) error {
			x := make([]float32, 100)
			if c.Rank() == 1 {
				return comm.Broadcast(ctx, c, x, x, 0)
			}
			return comm.AllReduce(ctx, c, x, x, comm.Sum)
		}, []string{"called Broadcast(count=100, float32, root=0)", "called AllReduce(count=100, float32, sum)"}},
		"count": {func(ctx context.Context, c *comm.Communicator) error {
			x := make([]float32, 100+c.Rank()%2)
			return comm.AllReduce(ctx, c, x, x, comm.Sum)
		}, nil},
		"dtype": {func(ctx context.Context, c *comm.Communicator) error {
			if c.Rank() == 2 {
				x := make([]int32, 10)
				return comm.AllReduce(ctx, c, x, x, comm.Sum)
			}
			x := make([]float32, 10)
			return comm.AllReduce(ctx, c, x, x, comm.Sum)
		}, nil},
		"root": {func(ctx context.Context, c *comm.Communicator) error {
			x := make([]float32, 10)
			return comm.Broadcast(ctx, c, x, x, c.Rank()/2)
		}, nil},
		"redop": {func(ctx context.Context, c *comm.Communicator) error {
			x := make([]float32, 10)
			op := comm.Sum
			if c.Rank() == 0 {
				op = comm.Max
			}
			return comm.AllReduce(ctx, c, x, x, op)
		}, nil},
		// Even ranks send every rank three elements and expect three,
		// odd ranks two: the same call, blocks of 12 and 8 bytes.
		"block": {func(ctx context.Context, c *comm.Communicator) error {
			n := 2 + (c.Rank()+1)%2
			counts, displs := make([]int, c.Size()), make([]int, c.Size())
			for j := range counts {
				counts[j], displs[j] = n, n*j
			}
			send, recv := make([]float32, n*c.Size()), make([]float32, n*c.Size())
			return c.AllToAllV(ctx, comm.Slice(send), counts, displs, comm.Slice(recv), counts, displs)
		}, []string{"in AllToAllV", "sent step ", "of 8 bytes", "of 12 bytes", "disagree on"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The mismatched call fails, or (if it happened to complete on
			// this rank) the next one does.
			errs := runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
				if err := tc.fn(ctx, c); err != nil {
					return err
				}
				return c.Barrier(ctx)
			}, comm.WithTimeout(20*time.Second))
			for r, err := range errs {
				if !errors.Is(err, comm.ErrMismatch) {
					t.Errorf("rank %d: %v, want ErrMismatch", r, err)
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: %q does not say %q", r, err, w)
					}
				}
			}
		})
	}
}

// TestMismatchProbe covers mismatched collectives that exchange no message
// with each other: only the stall probe can tell them apart from a slow
// rank, and it must do so long before the timeout.
func TestMismatchProbe(t *testing.T) {
	testMismatchProbe(t, 0)
}

// TestMismatchProbeAfterOperations is TestMismatchProbe after a run of
// collectives, so that the mismatched pair starts while the stall timer
// armed by an earlier collective is still pending: the probe must still
// come one stall interval after the pair started.
func TestMismatchProbeAfterOperations(t *testing.T) {
	testMismatchProbe(t, 50, comm.WithStallTimeout(300*time.Millisecond))
}

// TestMismatchProbeAfterIdle is TestMismatchProbe after collectives and
// then a pause of several stall intervals, during which the watchdog found
// nothing running: it must still look at the mismatched pair one stall
// interval after it started, not only when the operation times out.
func TestMismatchProbeAfterIdle(t *testing.T) {
	testMismatchProbeIdle(t, 5, time.Second, comm.WithStallTimeout(300*time.Millisecond), comm.WithTimeout(30*time.Second))
}

func testMismatchProbe(t *testing.T, before int, opts ...comm.Option) {
	testMismatchProbeIdle(t, before, 0, opts...)
}

func testMismatchProbeIdle(t *testing.T, before int, idle time.Duration, opts ...comm.Option) {
	start := time.Now()
	errs := runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
		x := make([]float32, 10)
		for range before {
			if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
				return err
			}
		}
		time.Sleep(idle)
		root := c.Rank() / 2 // ranks 0,1 use root 0; ranks 2,3 use root 1
		if err := comm.Broadcast(ctx, c, x, x, root); err != nil {
			return err
		}
		// Ranks whose broadcast completed learn of the failure too.
		return awaitFailure(c, 15*time.Second)
	}, append([]comm.Option{comm.WithTimeout(time.Minute)}, opts...)...)
	for r, err := range errs {
		if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "root=1") {
			t.Errorf("rank %d: %v, want ErrMismatch describing both calls", r, err)
		}
	}
	if d := time.Since(start) - idle; d > 20*time.Second {
		t.Errorf("mismatch found after %v", d)
	}
}

// awaitFailure returns c's failure once it has one, or an error after d.
func awaitFailure(c *comm.Communicator, d time.Duration) error {
	deadline := time.Now().Add(d)
	for c.Err() == nil {
		if time.Now().After(deadline) {
			return errors.New("no failure reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c.Err()
}

func TestAbortUnblocks(t *testing.T) {
	comms, err := comm.NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	errs := make(chan error, 2)
	for _, c := range comms[:2] {
		go func() {
			x := make([]float32, 1<<20)
			errs <- comm.AllReduce(ctx, c, x, x, comm.Sum)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	comms[2].Abort()
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			var pe *comm.PeerError
			if !errors.Is(err, comm.ErrAborted) || !errors.As(err, &pe) || pe.Peer != 2 {
				t.Fatalf("after abort: %v, want ErrAborted naming rank 2", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Abort did not unblock the other ranks")
		}
	}
	// Later operations fail at once too.
	x := []int32{1}
	if err := comm.AllReduce(ctx, comms[0], x, x, comm.Sum); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("after abort: %v", err)
	}
	for _, c := range comms {
		c.Close()
	}
}

func TestTimeout(t *testing.T) {
	comms, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	defer comms[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	x := []float32{1}
	start := time.Now()
	err = comm.AllReduce(ctx, comms[0], x, x, comm.Sum) // rank 1 never joins
	if !errors.Is(err, comm.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllReduce without a peer: %v, want a timeout", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
	// The other rank learns of it.
	if err := comms[1].Barrier(context.Background()); !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("peer after timeout: %v", err)
	}
}

func TestDefaultTimeoutOption(t *testing.T) {
	comms, err := comm.NewLocal(2, comm.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	defer comms[0].Close()
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("Barrier with a 100ms default timeout and no peer: %v", err)
	}
}

func TestClosedCommunicator(t *testing.T) {
	comms, err := comm.NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Barrier after Close: %v", err)
	}
}

// TestTopologySchedules runs the collectives with every topology-aware
// schedule forced, and with the cost model's choice, on emulated hosts.
func TestTopologySchedules(t *testing.T) {
	specs := []string{"hosts=4x2", "hosts=3x3", "hosts=2x4", "hosts=3x1", "hosts=1x3"}
	if testing.Short() {
		// The race detector's run (48 of comm's 408 s with all five):
		// several ranks per host on an even and an odd number of hosts,
		// and hosts of one rank; the full set runs without it.
		specs = []string{"hosts=4x2", "hosts=3x3", "hosts=3x1"}
	}
	for _, spec := range specs {
		for _, a := range []algo.Algorithm{algo.AlgoAuto, algo.AlgoHierarchical, algo.AlgoGateway, algo.Algo2D} {
			top, err := topo.FromSpec(spec)
			if err != nil {
				t.Fatal(err)
			}
			n := len(top.Ranks)
			t.Run(fmt.Sprintf("%s/%s", spec, a), func(t *testing.T) {
				t.Parallel()
				requireOK(t, runLocal(t, n, func(ctx context.Context, c *comm.Communicator) error {
					if c.NumHosts() != len(top.Hosts) {
						return fmt.Errorf("%d hosts, topology has %d", c.NumHosts(), len(top.Hosts))
					}
					if a != algo.AlgoAuto && c.Algorithm(algo.OpAllReduce, 1<<20) != a {
						return fmt.Errorf("forced %s, running %s", a, c.Algorithm(algo.OpAllReduce, 1<<20))
					}
					return topologyChecks(ctx, c)
				}, comm.WithTopology(top), comm.WithAlgorithm(a), comm.WithChunkSize(8192)))
			})
		}
	}
}

// topologyChecks runs the collectives that have topology-aware schedules.
func topologyChecks(ctx context.Context, c *comm.Communicator) error {
	k := checker{ctx: ctx, c: c}
	for _, n := range []int{0, 1, 1031, 20000} {
		for _, dt := range []comm.DType{comm.Float32, comm.BFloat16} {
			for _, op := range []comm.Op{comm.Sum, comm.Max} {
				for _, inPlace := range []bool{false, true} {
					if err := k.allReduce(dt, op, n, inPlace); err != nil {
						return err
					}
					if err := k.reduceScatter(dt, op, n, inPlace); err != nil {
						return err
					}
				}
			}
			for _, inPlace := range []bool{false, true} {
				if err := k.allGather(dt, n, inPlace); err != nil {
					return err
				}
			}
		}
	}
	return k.split()
}

// TestEmulatedFabric runs the topology-aware schedules with every link
// shaped by the emulated fabric (fast links, so it stays quick).
func TestEmulatedFabric(t *testing.T) {
	top, err := topo.FromSpec("hosts=2x2,hbd=20GB/s,eps=5GB/s")
	if err != nil {
		t.Fatal(err)
	}
	requireOK(t, runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
		if name := c.TransportName(); name != "emu(mem)" {
			return fmt.Errorf("transport %s, want emu(mem)", name)
		}
		return topologyChecks(ctx, c)
	}, comm.WithTopology(top), comm.WithEmulation(true)))
	if _, err := comm.NewLocal(2, comm.WithEmulation(true)); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("emulation without a topology: %v", err)
	}
}

// TestRingOrder runs the flat ring schedules along a topology's ring order
// (a permutation of the ranks, as a K-hop line or a Hamiltonian ring gives).
func TestRingOrder(t *testing.T) {
	top, _ := topo.FromSpec("hosts=5x1")
	top.Ring = []int{3, 0, 4, 1, 2}
	requireOK(t, runLocal(t, 5, func(ctx context.Context, c *comm.Communicator) error {
		return topologyChecks(ctx, c)
	}, comm.WithTopology(top), comm.WithAlgorithm(algo.AlgoRing), comm.WithChunkSize(4096)))
	bad, _ := topo.FromSpec("hosts=2x1")
	bad.Ring = []int{0, 0}
	if err := bad.Validate(); err == nil {
		t.Fatal("a ring that is not a permutation was accepted")
	}
}
