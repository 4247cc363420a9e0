package shm_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/internal/membarrier"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/shm"
	"github.com/occl/occl/transport/transporttest"
)

// connectPair runs both sides of Connect over an in-process control pipe.
func connectPair(t testing.TB, ca, cb shm.Config) (*shm.Conn, *shm.Conn, error, error) {
	t.Helper()
	// A pipe that buffers nothing: setup must not rely on buffering.
	x, y := mem.Pipe(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *shm.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := shm.Connect(ctx, y, cb)
		ch <- res{c, err}
	}()
	a, erra := shm.Connect(ctx, x, ca)
	r := <-ch
	return a, r.c, erra, r.err
}

// configs returns the two sides' configs of a test pair. Send sends by
// descriptor from the threshold on, so that the tests of single-copy
// transfers run through Send; lendPair's tests turn it off.
func configs(capacity int, dir string) (shm.Config, shm.Config) {
	comm := rand.Uint64()
	return shm.Config{Comm: comm, Epoch: 1, Self: 0, Peer: 1, Capacity: capacity, Dir: dir, SendByDescriptor: true},
		shm.Config{Comm: comm, Epoch: 1, Self: 1, Peer: 0, Capacity: capacity, Dir: dir, SendByDescriptor: true}
}

func pair(t testing.TB, capacity int) (*shm.Conn, *shm.Conn) {
	t.Helper()
	return pairWith(t, func(c *shm.Config) { c.Capacity = capacity })
}

// pairWith connects a pair whose two configs are edited by edit.
func pairWith(t testing.TB, edit func(*shm.Config)) (*shm.Conn, *shm.Conn) {
	t.Helper()
	ca, cb := configs(0, "")
	edit(&ca)
	edit(&cb)
	a, b, erra, errb := connectPair(t, ca, cb)
	if erra != nil || errb != nil {
		t.Fatalf("Connect: %v / %v", erra, errb)
	}
	assertNoFiles(t, shm.DefaultDir(), ca.Comm)
	return a, b
}

// assertNoFiles fails if dir holds a ring file of communicator comm.
func assertNoFiles(t testing.TB, dir string, comm uint64) {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("occl-%016x-*", comm)))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) > 0 {
		t.Fatalf("ring files left behind: %v", m)
	}
}

// runConformance runs the conformance suite on pairs made with edit,
// checking first that single-copy transfers are used as expected, and
// plain publications where both sides poll and can fence.
func runConformance(t *testing.T, cma bool, edit func(*shm.Config)) {
	t.Helper()
	var cfg shm.Config
	edit(&cfg)
	plain := cfg.Spin > 0 && membarrier.GlobalReady()
	transporttest.Run(t, func(t testing.TB) (transport.Conn, transport.Conn) {
		a, b := pairWith(t, edit)
		for _, c := range []*shm.Conn{a, b} {
			if send, recv := c.CMA(); send != cma || recv != cma {
				t.Fatalf("CMA() = %v, %v, want %v in both directions", send, recv, cma)
			}
			if shm.Plain(c) != plain {
				t.Fatalf("plain publications %v, want %v", shm.Plain(c), plain)
			}
		}
		return a, b
	})
}

// Defaults: frames from DefaultCMAThreshold on go by descriptor.
func TestConformance(t *testing.T) {
	runConformance(t, true, func(c *shm.Config) {})
}

// Offers from 32 KiB, loans from 1 MiB, Send through the ring.
func TestConformanceOffers(t *testing.T) {
	runConformance(t, true, func(c *shm.Config) { c.SendByDescriptor, c.CMAThreshold, c.OfferThreshold = false, 1<<20, 32<<10 })
}

func TestConformanceNoCMA(t *testing.T) {
	runConformance(t, false, func(c *shm.Config) { c.NoCMA = true })
}

// skipUnderRace skips a conformance variant under the race detector, where
// the suite runs 5 to 10 times slower, when the variants named by covered
// run its concurrent paths there: it differs from them in a size or a
// mapping, not in how the two sides wait for each other. It runs without
// the detector in the same CI.
func skipUnderRace(t *testing.T, covered string) {
	t.Helper()
	if raceEnabled {
		t.Skipf("under the race detector %s run the same concurrent paths; this variant runs without it", covered)
	}
}

// With an 8 KiB threshold every frame of the suite above that size goes
// by descriptor (the allocation test's 4 KiB frames must stay eager).
func TestConformanceCMASmallThreshold(t *testing.T) {
	skipUnderRace(t, "TestConformance and TestConformanceOffers (frames by descriptor)")
	runConformance(t, true, func(c *shm.Config) { c.CMAThreshold = 8 << 10 })
}

// A small ring makes every frame wrap and every large frame stream.
func TestConformanceSmallRing(t *testing.T) {
	runConformance(t, true, func(c *shm.Config) { c.Capacity = 16 << 10 })
}

func TestConformanceSmallRingNoCMA(t *testing.T) {
	skipUnderRace(t, "TestConformanceSmallRing and TestConformanceNoCMA")
	runConformance(t, false, func(c *shm.Config) { c.Capacity, c.NoCMA = 16<<10, true })
}

// Rings mapped page by page as they are first touched (Lazy) carry the
// same traffic.
func TestConformanceLazy(t *testing.T) {
	skipUnderRace(t, "TestConformanceNoCMA (the same rings, mapped at once)")
	runConformance(t, false, func(c *shm.Config) { c.Lazy, c.NoCMA = true, true })
}

// Both sides polling (Spin), a short spin so that waits sleep often:
// every publication is a plain store and every sleep fences first.
func TestConformancePlain(t *testing.T) {
	requireFence(t)
	runConformance(t, false, func(c *shm.Config) { c.Spin, c.NoCMA = time.Microsecond, true })
}

// A small ring: producers sleep for space, consumers for data, both
// after plain publications.
func TestConformancePlainSmallRing(t *testing.T) {
	requireFence(t)
	runConformance(t, false, func(c *shm.Config) { c.Spin, c.Capacity, c.NoCMA = time.Microsecond, 16<<10, true })
}

// requireFence skips t where this process cannot fence: there no
// connection publishes with plain stores.
func requireFence(t *testing.T) {
	t.Helper()
	if !membarrier.GlobalReady() {
		t.Skip("membarrier's global expedited command is not available: connections publish with atomic stores")
	}
}

// TestPlain: a connection publishes with plain stores only where both
// sides poll and can fence; a fence returns without error then.
func TestPlain(t *testing.T) {
	requireFence(t)
	if err := membarrier.Global(); err != nil {
		t.Fatalf("fence: %v", err)
	}
	for _, tc := range []struct {
		a, b time.Duration
		want bool
	}{
		{0, 0, false},
		{time.Second, 0, false},
		{0, time.Second, false},
		{time.Second, time.Second, true},
	} {
		ca, cb := configs(0, "")
		ca.Spin, cb.Spin = tc.a, tc.b
		a, b, erra, errb := connectPair(t, ca, cb)
		if erra != nil || errb != nil {
			t.Fatalf("Connect: %v / %v", erra, errb)
		}
		if shm.Plain(a) != tc.want || shm.Plain(b) != tc.want {
			t.Errorf("spin %v / %v: plain %v / %v, want %v", tc.a, tc.b, shm.Plain(a), shm.Plain(b), tc.want)
		}
		a.Close()
		b.Close()
	}
}

// TestRandomFramesPlain streams frames both ways through small rings with
// plain publications and waits that sleep after a microsecond.
func TestRandomFramesPlain(t *testing.T) {
	requireFence(t)
	a, b := pairWith(t, func(c *shm.Config) { c.Spin, c.Capacity = time.Microsecond, 16<<10 })
	defer a.Close()
	defer b.Close()
	if !shm.Plain(a) || !shm.Plain(b) {
		t.Fatal("no plain publications between two polling sides")
	}
	streamBothWays(t, a, b, 2000, 40<<10)
}

func TestConnectBadCapacity(t *testing.T) {
	ca, cb := configs(0, "")
	ca.Capacity = 12345
	a, b, erra, errb := connectPair(t, ca, cb)
	if a != nil || b != nil {
		t.Fatal("Connect succeeded with an invalid capacity")
	}
	if !errors.Is(erra, shm.ErrUnavailable) || !errors.Is(errb, shm.ErrUnavailable) {
		t.Fatalf("errors = %v / %v, want ErrUnavailable on both sides", erra, errb)
	}
	if !strings.Contains(errb.Error(), "capacity") {
		t.Fatalf("peer's error does not say why: %v", errb)
	}
	assertNoFiles(t, shm.DefaultDir(), ca.Comm)
}

func TestConnectDifferentDirs(t *testing.T) {
	ca, cb := configs(64<<10, t.TempDir())
	cb.Dir = t.TempDir()
	a, b, erra, errb := connectPair(t, ca, cb)
	if erra != nil || errb != nil {
		t.Fatalf("Connect: %v / %v", erra, errb)
	}
	defer a.Close()
	defer b.Close()
	assertNoFiles(t, ca.Dir, ca.Comm)
	assertNoFiles(t, cb.Dir, ca.Comm)
	ctx := context.Background()
	h := transport.Header{Kind: transport.KindP2P, Comm: ca.Comm, Epoch: 1, Seq: 1}
	if err := a.Send(ctx, h, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if err := b.Recv(ctx, h, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("Recv = %v, %q", err, buf)
	}
}

// After a refused setup the control connection is still in step and can
// carry data.
func TestConnectFallbackKeepsControl(t *testing.T) {
	x, y := mem.Pipe(mem.DefaultCapacity)
	ca, cb := configs(0, "")
	cb.Dir = "/nonexistent-occl-dir"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := shm.Connect(ctx, y, cb)
		errc <- err
	}()
	_, erra := shm.Connect(ctx, x, ca)
	errb := <-errc
	if !errors.Is(erra, shm.ErrUnavailable) || !errors.Is(errb, shm.ErrUnavailable) {
		t.Fatalf("errors = %v / %v, want ErrUnavailable on both sides", erra, errb)
	}
	h := transport.Header{Kind: transport.KindP2P, Comm: 1, Seq: 1}
	if err := x.Send(ctx, h, []byte("tcp")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if err := y.Recv(ctx, h, buf); err != nil || string(buf) != "tcp" {
		t.Fatalf("control connection after fallback: %v %q", err, buf)
	}
	assertNoFiles(t, shm.DefaultDir(), ca.Comm)
}

// Setup messages of another communicator are rejected, not acted upon.
func TestConnectWrongComm(t *testing.T) {
	ca, cb := configs(0, "")
	cb.Comm++
	_, _, erra, errb := connectPair(t, ca, cb)
	var me *transport.MismatchError
	if !errors.As(erra, &me) || !errors.As(errb, &me) {
		t.Fatalf("errors = %v / %v, want MismatchError", erra, errb)
	}
	assertNoFiles(t, shm.DefaultDir(), ca.Comm)
	assertNoFiles(t, shm.DefaultDir(), cb.Comm)
}

// A peer that never answers makes Connect fail when ctx ends, leaving no
// file behind.
func TestConnectTimeout(t *testing.T) {
	x, y := mem.Pipe(0)
	defer y.Close()
	ca, _ := configs(0, "")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := shm.Connect(ctx, x, ca); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect = %v, want DeadlineExceeded", err)
	}
	assertNoFiles(t, shm.DefaultDir(), ca.Comm)
}

// Frames interleave both directions with random sizes across a small ring.
func TestRandomFrames(t *testing.T) {
	a, b := pair(t, 64<<10)
	defer a.Close()
	defer b.Close()
	streamBothWays(t, a, b, 500, 300<<10)
}

// streamBothWays streams n frames of random sizes below maxSize each way
// between a and b at once, checking every frame.
func streamBothWays(t *testing.T, a, b *shm.Conn, n, maxSize int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 4)
	for dir, ends := range [][2]*shm.Conn{{a, b}, {b, a}} {
		go func() { errs <- streamFrames(ctx, ends[0], uint64(dir), n, maxSize) }()
		go func() { errs <- checkFrames(ctx, ends[1], uint64(dir), n, maxSize) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// streamFrames sends n frames of sizes in [0, maxSize) derived from seed.
func streamFrames(ctx context.Context, c transport.Conn, seed uint64, n, maxSize int) error {
	r := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, maxSize)
	for i := range n {
		size := frameSize(r, maxSize)
		fillSeq(buf[:size], seed, i)
		h := transport.Header{Kind: transport.KindP2P, Comm: 9, Seq: uint64(i), Step: uint32(seed)}
		if err := c.Send(ctx, h, buf[:size]); err != nil {
			return fmt.Errorf("send %d (%d bytes): %w", i, size, err)
		}
	}
	return nil
}

// checkFrames receives and checks what streamFrames sends.
func checkFrames(ctx context.Context, c transport.Conn, seed uint64, n, maxSize int) error {
	r := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, maxSize)
	want := make([]byte, maxSize)
	for i := range n {
		size := frameSize(r, maxSize)
		h := transport.Header{Kind: transport.KindP2P, Comm: 9, Seq: uint64(i), Step: uint32(seed)}
		if err := c.Recv(ctx, h, buf[:size]); err != nil {
			return fmt.Errorf("recv %d (%d bytes): %w", i, size, err)
		}
		fillSeq(want[:size], seed, i)
		if string(buf[:size]) != string(want[:size]) {
			return fmt.Errorf("frame %d (%d bytes) corrupted", i, size)
		}
	}
	return nil
}

func frameSize(r *rand.Rand, maxSize int) int {
	switch r.IntN(4) {
	case 0:
		return r.IntN(64)
	case 1:
		return r.IntN(4096)
	default:
		return r.IntN(maxSize)
	}
}

func fillSeq(b []byte, seed uint64, i int) {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	for j := 0; j < len(b); j += 8 {
		v := r.Uint64()
		for k := 0; k < 8 && j+k < len(b); k++ {
			b[j+k] = byte(v >> (8 * k))
		}
	}
}

func TestCloseUnblocksSend(t *testing.T) {
	a, b := pair(t, 64<<10)
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		done <- a.Send(context.Background(), transport.Header{Kind: transport.KindP2P}, make([]byte, 1<<20))
	}()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	a.Close() // idempotent
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Send blocked on a full ring, then closed = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Send")
	}
	// The peer gets what fitted, then the close.
	err := b.Recv(context.Background(), transport.Header{Kind: transport.KindP2P}, make([]byte, 1<<20))
	if !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv of a frame cut by Close = %v, want ErrPeerClosed", err)
	}
	if err := b.Send(context.Background(), transport.Header{Kind: transport.KindP2P}, nil); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Send to a closed peer = %v, want ErrPeerClosed", err)
	}
}

// Frames sent before Close are still delivered.
func TestCloseDeliversBuffered(t *testing.T) {
	a, b := pair(t, 0)
	defer b.Close()
	ctx := context.Background()
	for i := range 10 {
		if err := a.Send(ctx, transport.Header{Kind: transport.KindP2P, Seq: uint64(i)}, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	buf := make([]byte, 1)
	for i := range 10 {
		if err := b.Recv(ctx, transport.Header{Kind: transport.KindP2P, Seq: uint64(i)}, buf); err != nil || buf[0] != byte(i) {
			t.Fatalf("frame %d after peer close: %v %v", i, err, buf)
		}
	}
	if err := b.Recv(ctx, transport.Header{Kind: transport.KindP2P, Seq: 10}, buf); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv past the end = %v, want ErrPeerClosed", err)
	}
}

// Close racing with traffic in both directions never touches unmapped
// memory and every call returns.
func TestCloseDuringTraffic(t *testing.T) {
	for i := range 20 {
		a, b := pair(t, 64<<10)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs := make(chan error, 4)
		for dir, ends := range [][2]*shm.Conn{{a, b}, {b, a}} {
			go func() { errs <- streamFrames(ctx, ends[0], uint64(dir), 1000, 200<<10) }()
			go func() { errs <- checkFrames(ctx, ends[1], uint64(dir), 1000, 200<<10) }()
		}
		time.Sleep(time.Duration(i) * time.Millisecond)
		if i%2 == 0 {
			a.Close()
		} else {
			b.Close()
		}
		for range 4 {
			if err := <-errs; err != nil && !errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrPeerClosed) {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		a.Close()
		b.Close()
		cancel()
	}
}

func TestCleanStale(t *testing.T) {
	dir := t.TempDir()
	dead := deadPID(t)
	stale := filepath.Join(dir, fmt.Sprintf("occl-%016x-0-1-3-%d-00112233", uint64(0xabc), dead))
	live := filepath.Join(dir, fmt.Sprintf("occl-%016x-1-0-3-%d-44556677", uint64(0xabc), os.Getpid()))
	other := filepath.Join(dir, "occl-not-a-ring")
	unrelated := filepath.Join(dir, fmt.Sprintf("other-%016x-0-1-3-%d-00112233", uint64(0xabc), dead))
	for _, p := range []string{stale, live, other, unrelated} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := shm.CleanStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("CleanStale removed %d files, want 1", n)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale file still there: %v", err)
	}
	for _, p := range []string{live, other, unrelated} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}
}

// BenchmarkSendRecv measures one-way throughput in process, through the
// rings (ring) and by descriptor (cma: the threshold is set to the message
// size).
func BenchmarkSendRecv(b *testing.B) {
	for _, mode := range []string{"ring", "cma"} {
		for _, size := range benchSizes {
			b.Run(mode+"/"+sizeName(size), func(b *testing.B) {
				transporttest.Bench(b, func(t testing.TB) (transport.Conn, transport.Conn) {
					return pairWith(t, func(c *shm.Config) { c.NoCMA, c.CMAThreshold = mode == "ring", size })
				}, size)
			})
		}
	}
}

// BenchmarkPingPong measures the round trip of a small frame: one side
// sends, the other echoes it back.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{8, 16, 4 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			x, y := pair(b, 0)
			defer x.Close()
			defer y.Close()
			ctx := context.Background()
			h := transport.Header{Kind: transport.KindP2P, Comm: 1, Seq: 1}
			buf, echo := make([]byte, size), make([]byte, size)
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for range b.N {
					if err := y.Recv(ctx, h, echo); err != nil {
						done <- err
						return
					}
					if err := y.Send(ctx, h, echo); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				if err := x.Send(ctx, h, buf); err != nil {
					b.Fatal(err)
				}
				if err := x.Recv(ctx, h, buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkCopy is the memcpy limit on the same sizes: a ring moves each
// byte twice, so half of this is the ceiling for BenchmarkSendRecv.
func BenchmarkCopy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			src := make([]byte, size)
			dst := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

var benchSizes = []int{4 << 10, 1 << 20, 4 << 20, 16 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// TestWaitYields: a polling wait lets other goroutines run unless its
// context says it need not (transport.WithoutYield) and the peer is in
// another process; a peer in this process is always let run.
func TestWaitYields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		local     bool
		noYield   bool
		wantYield bool
	}{
		{"default", false, false, true},
		{"without yield", false, true, false},
		{"without yield, peer here", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.Spin = time.Minute })
			defer a.Close()
			defer b.Close()
			if !shm.Local(a) {
				t.Fatal("a pair made in one process does not see its peer as local")
			}
			shm.SetLocal(a, tc.local)
			var yields atomic.Int64
			shm.SetYieldHook(a, func() { yields.Add(1) })
			ctx := context.Background()
			if tc.noYield {
				ctx = transport.WithoutYield(ctx)
			}
			recvLate(t, ctx, ctx, a, b, 5*time.Millisecond)
			if got := yields.Load() > 0; got != tc.wantYield {
				t.Errorf("yielded %d times during a 5 ms wait, want yields: %v", yields.Load(), tc.wantYield)
			}
		})
	}
}

// recvLate receives 8 bytes on a under ctx that b sends under sendCtx
// after delay, and fails t if either side fails.
func recvLate(t *testing.T, ctx, sendCtx context.Context, a, b *shm.Conn, delay time.Duration) {
	t.Helper()
	h := transport.Header{Kind: transport.KindCollective, Seq: 1, Len: 8}
	sent := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		sent <- b.Send(sendCtx, h, make([]byte, 8))
	}()
	if err := a.Recv(ctx, h, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// TestWaitLocksThread: when the processes outnumber the cores (Spin 0), a
// wait of a large operation (no transport.WithCoreYield) whose process has
// nothing else to run (transport.WithoutYield) yields as a thread locked to
// its goroutine, which sleeps until the scheduler hands the processor back
// (a plain goroutine's yield would come straight back and keep the core
// busy), and unlocks before it returns; a wait that yields to the process's
// other goroutines does not lock.
func TestWaitLocksThread(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noYield  bool
		wantLock bool
	}{{"without yield", true, true}, {"default", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.Spin = 0 })
			defer a.Close()
			defer b.Close()
			shm.SetLocal(a, false)
			var events []bool
			var yields atomic.Int64
			shm.SetLockHook(a, func(locked bool) { events = append(events, locked) })
			shm.SetYieldHook(a, func() { yields.Add(1) })
			ctx := context.Background()
			if tc.noYield {
				ctx = transport.WithoutYield(ctx)
			}
			recvLate(t, ctx, context.Background(), a, b, 5*time.Millisecond)
			want := []bool(nil)
			if tc.wantLock {
				want = []bool{true, false}
			}
			if fmt.Sprint(events) != fmt.Sprint(want) {
				t.Errorf("lock events %v, want %v", events, want)
			}
			if yields.Load() == 0 {
				t.Error("the wait never yielded")
			}
		})
	}
}

// TestWaitCopyWait: when the processes outnumber the cores (Spin 0), a
// wait under transport.WithCopyWait whose process has nothing else to run
// (transport.WithoutYield) gives its core away (sched_yield) between polls,
// neither locking its thread nor yielding to the process's goroutines
// first; it stops when its bound has passed, and its deadline holds while it
// yields. Without the setting, or beside other goroutines of its operation
// (transport.WithYield), the same wait never gives its core away.
func TestWaitCopyWait(t *testing.T) {
	const bound = 5 * time.Millisecond
	for _, tc := range []struct {
		name     string
		copyWait bool
		delay    time.Duration
	}{{"copy wait", true, 2 * time.Millisecond}, {"large operation", false, 2 * time.Millisecond}, {"stalled peer", true, 12 * bound},
		{"other goroutines", true, 2 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.Spin = 0 })
			defer a.Close()
			defer b.Close()
			shm.SetLocal(a, false)
			shm.SetCopyWaitYield(a, bound)
			var locks atomic.Int64
			var ends []time.Time // when each core yield ended
			shm.SetLockHook(a, func(bool) { locks.Add(1) })
			shm.SetCoreYieldHook(a, func() { ends = append(ends, time.Now()) })
			ctx := transport.WithoutYield(context.Background())
			if tc.name == "other goroutines" {
				// A schedule's goroutine beside others of its
				// operation: the wait must let them run.
				ctx = transport.WithYield(ctx)
			}
			if tc.copyWait {
				ctx = transport.WithCopyWait(ctx)
			}
			recvLate(t, ctx, context.Background(), a, b, tc.delay)
			want := tc.copyWait && transport.Yields(ctx) == false
			if got := len(ends) > 0; got != want {
				t.Fatalf("%d core yields, want some: %v", len(ends), want)
			}
			if !want {
				return
			}
			if tc.delay < bound && locks.Load() != 0 {
				t.Errorf("a copy wait locked its thread %d times", locks.Load())
			}
			// The first yield ends after the wait began: a yield that
			// ends more than the bound after it began after the bound
			// had passed. The wait looks before every yield, so at most
			// the one under way then ends later.
			late := 0
			for _, e := range ends {
				if e.Sub(ends[0]) > bound {
					late++
				}
			}
			if late > 1 {
				t.Errorf("%d of %d core yields ended more than %v into the wait", late, len(ends), bound)
			}
		})
	}
	t.Run("deadline", func(t *testing.T) {
		a, b := pairWith(t, func(c *shm.Config) { c.Spin = 0 })
		defer a.Close()
		defer b.Close()
		shm.SetLocal(a, false)
		shm.SetCopyWaitYield(a, time.Minute)
		ctx, cancel := context.WithTimeout(transport.WithCopyWait(transport.WithoutYield(context.Background())), 5*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := a.Recv(ctx, transport.Header{Kind: transport.KindCollective, Seq: 1, Len: 8}, make([]byte, 8))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Recv with nothing sent: %v, want the deadline", err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("Recv returned %v after a 5 ms deadline, inside a minute of copy waits", took)
		}
	})
}

// overlapFlag is a transport.Overlap that says what its flag holds.
type overlapFlag struct{ atomic.Bool }

func (f *overlapFlag) Overlapping() bool { return f.Load() }

// TestWaitOverlap: a wait whose caller computes meanwhile
// (transport.WithOverlap) polls only briefly and then sleeps, however long
// the connection's spin time, as a small operation's wait that gives its
// core away does, also when the caller says so after the wait began;
// without it, or while the caller does not say so, the same wait polls for
// its spin time and never sleeps. The message arrives whole either way.
func TestWaitOverlap(t *testing.T) {
	base := transport.WithoutYield(context.Background())
	plain := func(ctx context.Context, _ transport.Overlap) context.Context { return ctx }
	small := func(ctx context.Context, o transport.Overlap) context.Context {
		return transport.WithCoreYield(transport.WithOverlap(ctx, o))
	}
	for _, tc := range []struct {
		name      string
		wrap      func(context.Context, transport.Overlap) context.Context
		from      time.Duration // when the caller says so (-1: never)
		wantSleep bool
	}{
		{"polling", plain, 0, false},
		{"not overlapping", transport.WithOverlap, -1, false},
		{"overlap", transport.WithOverlap, 0, true},
		{"overlap said late", transport.WithOverlap, 10 * time.Millisecond, true},
		{"overlap, small operation", small, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.Spin = time.Minute })
			defer a.Close()
			defer b.Close()
			shm.SetLocal(a, false)
			var sleeps atomic.Int64
			shm.SetSleepHook(a, func() { sleeps.Add(1) })
			var o overlapFlag
			if tc.from == 0 {
				o.Store(true)
			} else if tc.from > 0 {
				time.AfterFunc(tc.from, func() { o.Store(true) })
			}
			h := transport.Header{Kind: transport.KindCollective, Seq: 1, Len: 8}
			want := []byte("overlaps")
			sent := make(chan error, 1)
			go func() {
				time.Sleep(50 * time.Millisecond)
				sent <- b.Send(context.Background(), h, want)
			}()
			got := make([]byte, 8)
			if err := a.Recv(tc.wrap(base, &o), h, got); err != nil {
				t.Fatal(err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("received %q, want %q", got, want)
			}
			if got := sleeps.Load() > 0; got != tc.wantSleep {
				t.Errorf("slept %d times during a 50 ms wait with a minute's spin time, want sleeps: %v", sleeps.Load(), tc.wantSleep)
			}
		})
	}
}

// TestWaitYieldsCore: when the processes outnumber the cores (Spin 0) a
// wait under transport.WithCoreYield gives its core to the other processes
// between polls, and stops doing so, sleeping instead, once a yield kept
// it away for a time slice (another program holds the core, not a peer
// that answers at once); a wait without it never does.
func TestWaitYieldsCore(t *testing.T) {
	for _, tc := range []struct {
		name string
		core bool // transport.WithCoreYield
		slow int  // yields that take 2 ms: -1 every one, else the first slow ones
	}{{"fast yields", true, 0}, {"slow yields", true, -1}, {"one slow yield", true, 1}, {"large operation", false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.Spin = 0 })
			defer a.Close()
			defer b.Close()
			var yields atomic.Int64
			shm.SetCoreYieldHook(a, func() {
				if n := yields.Add(1); tc.slow < 0 || n <= int64(tc.slow) {
					time.Sleep(2 * time.Millisecond)
				}
			})
			ctx := context.Background()
			if tc.core {
				ctx = transport.WithCoreYield(ctx)
			}
			// Waits of 10 ms, or, when every yield is slow, of 3 ms: the
			// two slow yields that stop them start a back-off of 20 ms,
			// which must outlast the three waits on a loaded machine too.
			delay := 10 * time.Millisecond
			if tc.slow < 0 {
				delay = 3 * time.Millisecond
			}
			for i := 0; i < 3; i++ {
				recvLate(t, ctx, context.Background(), a, b, delay)
			}
			switch n := yields.Load(); {
			case !tc.core && n != 0:
				t.Errorf("%d core yields without WithCoreYield, want none", n)
			case tc.slow < 0 && n != 2:
				t.Errorf("%d core yields over 3 waits when each takes 2 ms, want 2 (then sleep)", n)
			case tc.slow > 0 && n <= int64(tc.slow):
				t.Errorf("%d core yields over 3 waits of 10 ms after %d slow one: a lone slow yield stopped them", n, tc.slow)
			case tc.core && n == 0:
				// (How many depends on what else runs: a busy machine
				// can make a yield slow too.)
				t.Error("no core yield over 3 waits of 10 ms")
			}
		})
	}
}

// TestWaitPollsWhileThePeerRuns: when the processes outnumber the cores, a
// small operation's wait for a peer marked running (on another core) polls
// instead of giving its core away, and one for a peer marked off core
// yields at once; a wait that yields marks its own side off core while it
// does.
func TestWaitPollsWhileThePeerRuns(t *testing.T) {
	for _, tc := range []struct {
		name      string
		peerOff   bool
		wantYield bool
	}{{"peer running", false, false}, {"peer off core", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.Spin = 0 })
			defer a.Close()
			defer b.Close()
			// As if in two processes; a polls for as long as the
			// peer is marked running.
			shm.SetLocal(a, false)
			shm.AddOffCore(a)
			shm.SetPeerSpin(a, 1<<40)
			if tc.peerOff {
				shm.MarkOffCore(b, true)
			}
			var yields atomic.Int64
			var markedOff atomic.Bool
			shm.SetCoreYieldHook(a, func() {
				yields.Add(1)
				markedOff.Store(shm.PeerOffCore(b))
			})
			recvLate(t, transport.WithCoreYield(context.Background()), context.Background(), a, b, 10*time.Millisecond)
			n := yields.Load()
			switch {
			case tc.wantYield && n == 0:
				t.Error("no core yield over a 10 ms wait for a peer marked off core")
			case !tc.wantYield && n != 0:
				t.Errorf("%d core yields while the peer was marked running, want none", n)
			case tc.wantYield && !markedOff.Load():
				t.Error("a wait yielding its core did not mark its side off core")
			}
			if shm.PeerOffCore(b) {
				t.Error("a's side still marked off core after its wait")
			}
		})
	}
}

// TestOffCoreWords: a connection to another process adds its side's words
// to the process's, a yield or sleep marks them while it lasts, and Close
// removes them before it unmaps them.
func TestOffCoreWords(t *testing.T) {
	a, b := pair(t, 0)
	defer b.Close()
	before := shm.OffCoreWords()
	shm.SetLocal(a, false)
	shm.AddOffCore(a)
	if n := shm.OffCoreWords(); n != before+2 {
		t.Fatalf("%d words after adding a connection to %d, want 2 more", n, before)
	}
	shm.OffCoreDuring(func() {
		if !shm.PeerOffCore(b) {
			t.Error("the peer does not see the process off core during a yield")
		}
		// Another wait of the process yields meanwhile: its end
		// leaves the process off core, since this one still is.
		shm.OffCoreDuring(func() {})
		if !shm.PeerOffCore(b) {
			t.Error("the peer sees the process on core while one of its waits still yields")
		}
	})
	if shm.PeerOffCore(b) {
		t.Error("the peer sees the process off core after the yield")
	}
	a.Close()
	if n := shm.OffCoreWords(); n != before {
		t.Errorf("%d words after Close, want %d", n, before)
	}
	// A connection added while a wait yields is marked at once.
	c, d := pair(t, 0)
	defer d.Close()
	defer c.Close()
	shm.SetLocal(c, false)
	shm.OffCoreDuring(func() {
		shm.AddOffCore(c)
		if !shm.PeerOffCore(d) {
			t.Error("a connection added during a yield is not marked off core")
		}
	})
	if shm.PeerOffCore(d) {
		t.Error("a connection added during a yield is still marked off core after it")
	}
}

// background calls step for 0 .. n-1 on a goroutine of its own, and sends
// its first error, or nil once every step has returned, on the channel it
// returns: the peer side of a benchmark.
func background(n int, step func(i int) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := step(i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}
