package shm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/shm"
)

// Each side's config decides whether it offers its memory and reads the
// peer's; the directions agree, the eager limit stays below the threshold
// of a direction that uses descriptors, and each end says why single
// copies are off where they are.
func TestCMANegotiation(t *testing.T) {
	const (
		turnedOff  = "single copies are turned off on this side"
		offersNone = "offers no single copies"
	)
	cases := []struct {
		name         string
		a, b         func(*shm.Config)
		aSend, bSend bool
		aEager       int
		aOff, bOff   string // what CMAOff says on each end, "" for nil
	}{
		{"default", func(*shm.Config) {}, func(*shm.Config) {}, true, true, min(shm.DefaultCMAThreshold-1, shm.DefaultCapacity/4-transport.HeaderSize), "", ""},
		{"a off", func(c *shm.Config) { c.NoCMA = true }, func(*shm.Config) {}, false, false, shm.DefaultCapacity/4 - transport.HeaderSize, turnedOff, "rank 0 " + offersNone},
		{"b off", func(*shm.Config) {}, func(c *shm.Config) { c.NoCMA = true }, false, false, shm.DefaultCapacity/4 - transport.HeaderSize, "rank 1 " + offersNone, turnedOff},
		{"thresholds", func(c *shm.Config) { c.CMAThreshold = 64 << 10 }, func(c *shm.Config) { c.CMAThreshold = 8 << 20 }, true, true, 64<<10 - 1, "", ""},
		{"small ring", func(c *shm.Config) { c.Capacity = 64 << 10 }, func(*shm.Config) {}, true, true, 16<<10 - transport.HeaderSize, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ca, cb := configs(0, "")
			tc.a(&ca)
			tc.b(&cb)
			a, b, erra, errb := connectPair(t, ca, cb)
			if erra != nil || errb != nil {
				t.Fatalf("Connect: %v / %v", erra, errb)
			}
			defer a.Close()
			defer b.Close()
			as, ar := a.CMA()
			bs, br := b.CMA()
			if as != tc.aSend || br != tc.aSend || bs != tc.bSend || ar != tc.bSend {
				t.Fatalf("a.CMA() = %v, %v, b.CMA() = %v, %v, want a->b %v, b->a %v", as, ar, bs, br, tc.aSend, tc.bSend)
			}
			if got := a.EagerLimit(); got != tc.aEager {
				t.Fatalf("a.EagerLimit() = %d, want %d", got, tc.aEager)
			}
			for _, end := range []struct {
				name string
				err  error
				want string
			}{{"a", a.CMAOff(), tc.aOff}, {"b", b.CMAOff(), tc.bOff}} {
				if (end.err == nil) != (end.want == "") || (end.err != nil && !strings.Contains(end.err.Error(), end.want)) {
					t.Errorf("%s.CMAOff() = %v, want %q", end.name, end.err, end.want)
				}
			}
			// Each end knows what the other lends, by the other's
			// threshold, and that a direction off lends nothing.
			if a.LendMin() != b.LentMin() || b.LendMin() != a.LentMin() || (a.LendMin() > 0) != tc.aSend || (b.LendMin() > 0) != tc.bSend {
				t.Fatalf("LendMin / LentMin: a %d / %d, b %d / %d; want each end's LentMin the other's LendMin, lending a->b %v, b->a %v",
					a.LendMin(), a.LentMin(), b.LendMin(), b.LentMin(), tc.aSend, tc.bSend)
			}
			// Sizes around both thresholds, both ways.
			exchangeSizes(t, a, b, []int{64<<10 - 1, 64 << 10, 1<<20 + 1, 8<<20 + 3})
		})
	}
}

func TestConnectBadCMAThreshold(t *testing.T) {
	ca, cb := configs(0, "")
	ca.CMAThreshold = -1
	_, _, erra, errb := connectPair(t, ca, cb)
	if !errors.Is(erra, shm.ErrUnavailable) || !errors.Is(errb, shm.ErrUnavailable) {
		t.Fatalf("errors = %v / %v, want ErrUnavailable on both sides", erra, errb)
	}
}

// cmaSizes are the payload sizes around threshold that the tests move.
func cmaSizes(threshold int) []int {
	return []int{
		threshold - 1, threshold, threshold + 1,
		3<<20 + 5,                    // not a multiple of 4 KiB
		2*shm.PieceSize + 4096 + 111, // several pieces, the last one partial
		16 << 20,
		threshold,
	}
}

// exchangeSizes sends frames of each size both ways at once, from and into
// buffers at odd offsets, and checks their contents.
func exchangeSizes(t *testing.T, a, b transport.Conn, sizes []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 4)
	for dir, ends := range [][2]transport.Conn{{a, b}, {b, a}} {
		go func() { errs <- sendSizes(ctx, ends[0], uint64(dir), sizes) }()
		go func() { errs <- recvSizes(ctx, ends[1], uint64(dir), sizes) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func sendSizes(ctx context.Context, c transport.Conn, seed uint64, sizes []int) error {
	for i, n := range sizes {
		buf := make([]byte, n+3)[3:] // not aligned
		fillSeq(buf, seed, i)
		h := transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: uint64(i), Step: uint32(seed)}
		if err := c.Send(ctx, h, buf); err != nil {
			return fmt.Errorf("send %d (%d bytes): %w", i, n, err)
		}
		// The buffer may be reused at once: later frames must not see
		// this.
		clear(buf)
	}
	return nil
}

// sendSizesShared is sendSizes from buffers of hugemem.Alloc (shared from
// hugemem.SharedMin bytes up), each freed once its frame is sent.
func sendSizesShared(ctx context.Context, c transport.Conn, seed uint64, sizes []int) error {
	for i, n := range sizes {
		b, err := hugemem.Alloc(n + 3)
		if err != nil {
			return err
		}
		buf := b[3:] // not aligned
		fillSeq(buf, seed, i)
		h := transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: uint64(i), Step: uint32(seed)}
		err = c.Send(ctx, h, buf)
		if ferr := hugemem.Free(b); err == nil {
			err = ferr
		}
		if err != nil {
			return fmt.Errorf("send %d (%d bytes): %w", i, n, err)
		}
	}
	return nil
}

func recvSizes(ctx context.Context, c transport.Conn, seed uint64, sizes []int) error {
	for i, n := range sizes {
		buf := make([]byte, n+1)[1:]
		h := transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: uint64(i), Step: uint32(seed)}
		if err := c.Recv(ctx, h, buf); err != nil {
			return fmt.Errorf("recv %d (%d bytes): %w", i, n, err)
		}
		want := make([]byte, n)
		fillSeq(want, seed, i)
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("frame %d (%d bytes) corrupted", i, n)
		}
	}
	return nil
}

func TestCMASizes(t *testing.T) {
	for _, thr := range []int{shm.DefaultCMAThreshold, 256 << 10} {
		t.Run(sizeName(thr), func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.CMAThreshold = thr })
			defer a.Close()
			defer b.Close()
			exchangeSizes(t, a, b, cmaSizes(thr))
		})
	}
}

// Frames sent by descriptor and through the ring interleave in order, and
// a mismatched header is reported before the descriptor is touched.
func TestCMAMixed(t *testing.T) {
	a, b := pairWith(t, func(c *shm.Config) { c.Capacity, c.CMAThreshold = 64<<10, 32<<10 })
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- streamFrames(ctx, a, 3, 400, 300<<10) }()
	go func() { errs <- checkFrames(ctx, b, 3, 400, 300<<10) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

}

// A frame sent by descriptor whose header does not match is reported as a
// mismatch before the descriptor is read; the receiver then closes, as
// after any error, and the waiting sender fails.
func TestCMAMismatch(t *testing.T) {
	h := transport.Header{Kind: transport.KindP2P, Comm: 1, Seq: 1}
	for _, tc := range []struct {
		name string
		want transport.Header
		n    int
	}{
		{"seq", transport.Header{Kind: transport.KindP2P, Comm: 1, Seq: 2}, 40 << 10},
		{"length", h, 41 << 10},
		{"length below threshold", h, 4 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) { c.CMAThreshold = 32 << 10 })
			defer a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sent := make(chan error, 1)
			go func() { sent <- a.Send(ctx, h, make([]byte, 40<<10)) }()
			var me *transport.MismatchError
			if err := b.Recv(ctx, tc.want, make([]byte, tc.n)); !errors.As(err, &me) {
				t.Fatalf("Recv = %v, want a MismatchError", err)
			}
			b.Close()
			if err := <-sent; !errors.Is(err, transport.ErrPeerClosed) {
				t.Fatalf("Send whose receiver closed = %v, want ErrPeerClosed", err)
			}
		})
	}
}

// The descriptor path allocates nothing either.
func TestCMANoAllocs(t *testing.T) {
	a, b := pair(t, 0)
	defer a.Close()
	defer b.Close()
	if send, _ := a.CMA(); !send {
		t.Fatal("single-copy transfers unavailable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	size := shm.DefaultCMAThreshold + 4096
	sbuf, rbuf := make([]byte, size), make([]byte, size)
	h := transport.Header{Kind: transport.KindP2P, Comm: 1}
	start, sent := make(chan struct{}), make(chan error)
	defer close(start)
	go func() {
		for range start {
			sent <- a.Send(ctx, h, sbuf)
		}
	}()
	allocs := testing.AllocsPerRun(100, func() {
		start <- struct{}{}
		if err := b.Recv(ctx, h, rbuf); err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("Send+Recv by descriptor allocates %.1f times per message", allocs)
	}
}

// A Send given up while nobody read its buffer closes its end: the
// receiver then fails instead of delivering whatever the buffer holds by
// the time it reads it.
func TestCMAAbandonedSend(t *testing.T) {
	a, b := pair(t, 0)
	defer a.Close()
	defer b.Close()
	h := transport.Header{Kind: transport.KindP2P, Comm: 1}
	buf := make([]byte, 2*shm.DefaultCMAThreshold)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.Send(ctx, h, buf); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send nobody receives = %v, want DeadlineExceeded", err)
	}
	for i := range buf {
		buf[i] = 0xee // the caller reuses its buffer
	}
	rbuf := make([]byte, len(buf))
	err := b.Recv(context.Background(), h, rbuf)
	if !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv of an abandoned transfer = %v, want ErrPeerClosed", err)
	}
}

// Close unblocks a Send waiting for its transfer, and the receiver is told.
func TestCMACloseDuringSend(t *testing.T) {
	a, b := pair(t, 0)
	defer b.Close()
	h := transport.Header{Kind: transport.KindP2P, Comm: 1}
	sent := make(chan error, 1)
	go func() { sent <- a.Send(context.Background(), h, make([]byte, 4<<20)) }()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	select {
	case err := <-sent:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Send after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a Send waiting for its transfer")
	}
	if err := b.Recv(context.Background(), h, make([]byte, 4<<20)); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv after the sender closed = %v, want ErrPeerClosed", err)
	}
}

// A receiver that closes, or gives up a Recv, makes the waiting sender fail
// (the one that gave up closes its Conn, as after any error).
func TestCMAReceiverCloses(t *testing.T) {
	a, b := pair(t, 0)
	defer a.Close()
	h := transport.Header{Kind: transport.KindP2P, Comm: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, h, make([]byte, 4<<20)) }()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-sent:
		if !errors.Is(err, transport.ErrPeerClosed) {
			t.Fatalf("Send after the receiver closed = %v, want ErrPeerClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the receiver's Close did not unblock Send")
	}
}

// A cancelled Recv in the middle of a transfer returns promptly.
func TestCMACancelDuringRecv(t *testing.T) {
	a, b := pair(t, 0)
	defer a.Close()
	defer b.Close()
	h := transport.Header{Kind: transport.KindP2P, Comm: 1}
	size := 16 * shm.PieceSize
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	sent := make(chan error, 1)
	go func() { sent <- a.Send(sctx, h, make([]byte, size)) }()
	ctx, cancel := context.WithCancel(context.Background())
	shm.SetPieceHook(b, func(done int) {
		if done == shm.PieceSize {
			cancel()
		}
	})
	if err := b.Recv(ctx, h, make([]byte, size)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv cancelled mid-transfer = %v, want Canceled", err)
	}
	b.Close()
	if err := <-sent; !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Send whose receiver gave up = %v, want ErrPeerClosed", err)
	}
}

// lendPair connects a pair that lends payloads of 64 KiB or more and
// sends every payload through the ring.
func lendPair(t *testing.T) (*shm.Conn, *shm.Conn) {
	t.Helper()
	return pairWith(t, func(c *shm.Config) { c.SendByDescriptor, c.CMAThreshold = false, 64<<10 })
}

// TestLend: a connection that lends keeps the ring's eager limit for Send;
// lent frames and frames through the ring, large and small, interleave in
// order while the receiver does nothing; Settle waits until the receiver
// has copied the lent ones; a payload below the threshold is refused and
// nothing of it reaches the peer.
func TestLend(t *testing.T) {
	a, b := lendPair(t)
	defer a.Close()
	defer b.Close()
	if got, want := a.EagerLimit(), shm.DefaultCapacity/4-transport.HeaderSize; got != want {
		t.Fatalf("EagerLimit() = %d, want %d: Send waits for no receiver when it lends nothing", got, want)
	}
	if got := a.LendMin(); got != 64<<10 {
		t.Fatalf("LendMin() = %d, want %d", got, 64<<10)
	}
	// The receiving end knows what its peer lends.
	if got := b.LentMin(); got != a.LendMin() {
		t.Fatalf("the receiver's LentMin() = %d, the sender's LendMin() %d", got, a.LendMin())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	frames := []struct {
		n    int
		lend bool
	}{{64 << 10, true}, {8, false}, {200<<10 + 3, true}, {100 << 10, false}, {1<<20 + 5, true}, {300 << 10, false}}
	hdr := func(i int) transport.Header {
		return transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: uint64(i), Step: 3}
	}
	for i, f := range frames {
		buf := make([]byte, f.n)
		fillSeq(buf, 3, i)
		var err error
		if f.lend {
			err = a.Lend(ctx, hdr(i), buf)
		} else {
			err = a.Send(ctx, hdr(i), buf)
		}
		if err != nil {
			t.Fatalf("frame %d (%d bytes, lent %v): %v", i, f.n, f.lend, err)
		}
	}
	settled := make(chan error, 1)
	go func() { settled <- a.Settle(ctx) }()
	select {
	case err := <-settled:
		t.Fatalf("Settle returned (%v) before the receiver copied anything", err)
	case <-time.After(20 * time.Millisecond):
	}
	for i, f := range frames {
		buf := make([]byte, f.n)
		if err := b.Recv(ctx, hdr(i), buf); err != nil {
			t.Fatalf("recv %d (%d bytes): %v", i, f.n, err)
		}
		want := make([]byte, f.n)
		fillSeq(want, 3, i)
		if !bytes.Equal(buf, want) {
			t.Fatalf("frame %d (%d bytes, lent %v): payload differs", i, f.n, f.lend)
		}
	}
	if err := <-settled; err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if err := a.Lend(ctx, hdr(len(frames)), make([]byte, 64<<10-1)); err == nil {
		t.Fatal("Lend below LendMin succeeded")
	}
	exchangeSizes(t, a, b, []int{10, 64 << 10})
}

// TestLendsWhole: below LendMin a connection that lends still lends a
// payload of SharedLendMin bytes or more in a shared buffer of
// hugemem.Alloc and, with Config.WholeLendThreshold, a payload of that
// size or more in any memory; not a smaller one, nor one on the heap
// without the threshold, where payloads are lent whole from LendMin. A
// threshold above LendMin keeps the heap's payloads below it from being
// lent whole. Lend lends what LendsWhole reports (and, below LendMin,
// nothing else), and the receiver takes it intact as any lent payload. A
// connection that lends nothing lends nothing whole, and a threshold below
// what every receiver accepts is refused at setup.
func TestLendsWhole(t *testing.T) {
	const whole = 32 << 10
	buf, err := hugemem.Alloc(512 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer hugemem.Free(buf)
	type payload struct {
		name string
		p    []byte
		want bool
	}
	for _, cfg := range []struct {
		name        string
		whole, ring int
		payloads    []payload
	}{
		{"no whole threshold", 0, 0, []payload{
			{"shared", buf[:shm.SharedLendMin], true},
			{"shared, inside", buf[5 : 5+shm.SharedLendMin+100], true},
			{"shared, small", buf[:shm.SharedLendMin-1], false},
			{"heap", make([]byte, shm.SharedLendMin), false},
			{"heap, at the would-be threshold", make([]byte, whole), false},
			{"heap, at LendMin", make([]byte, 64<<10), true},
		}},
		{"whole from 32 KiB", whole, 0, []payload{
			{"heap, at the threshold", make([]byte, whole), true},
			{"heap, 48 KiB", make([]byte, 48<<10), true},
			{"heap, below", make([]byte, whole-1), false},
			{"shared, below", buf[:shm.SharedLendMin], true},
			{"shared, small", buf[:shm.SharedLendMin-1], false},
		}},
		{"whole from 128 KiB, above LendMin", 128 << 10, 0, []payload{
			{"heap, at LendMin", make([]byte, 64<<10), false},
			{"heap, below the threshold", make([]byte, 128<<10-1), false},
			{"heap, at the threshold", make([]byte, 128<<10), true},
			{"shared", buf[:shm.SharedLendMin], true},
		}},
		{"through the ring from 256 KiB", 0, 256 << 10, []payload{
			{"heap, at LendMin", make([]byte, 64<<10), true},
			{"heap, below the ring threshold", make([]byte, 256<<10-1), true},
			{"heap, at the ring threshold", make([]byte, 256<<10), false},
			{"heap, above it", make([]byte, 300<<10), false},
			{"shared, above it", buf[:300<<10], true},
			{"shared, small", buf[:shm.SharedLendMin], true},
		}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			a, b := pairWith(t, func(c *shm.Config) {
				c.SendByDescriptor, c.CMAThreshold, c.WholeLendThreshold, c.WholeRingThreshold = false, 64<<10, cfg.whole, cfg.ring
			})
			defer a.Close()
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i, tc := range cfg.payloads {
				if got := a.LendsWhole(tc.p); got != tc.want {
					t.Errorf("%s: LendsWhole = %v, want %v", tc.name, got, tc.want)
				}
				if !tc.want && len(tc.p) >= a.LendMin() {
					continue // Lend lends it still; a schedule asks LendsWhole first
				}
				h := transport.Header{Kind: transport.KindP2P, Comm: 7, Step: uint32(i)}
				fillSeq(tc.p, uint64(i), 0)
				err := a.Lend(ctx, h, tc.p)
				if !tc.want {
					if err == nil {
						t.Fatalf("%s: Lend of %d bytes below LendMin %d succeeded", tc.name, len(tc.p), a.LendMin())
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: Lend of %d bytes (LendMin %d): %v", tc.name, len(tc.p), a.LendMin(), err)
				}
				got := make([]byte, len(tc.p))
				if err := b.Recv(ctx, h, got); err != nil {
					t.Fatal(err)
				}
				if err := a.Settle(ctx); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, tc.p) {
					t.Fatalf("%s: payload differs", tc.name)
				}
			}
		})
	}
	c, d := pairWith(t, func(c *shm.Config) { c.NoCMA = true })
	defer c.Close()
	defer d.Close()
	if c.LendsWhole(buf[:shm.SharedLendMin]) {
		t.Error("a connection without single copies lends a shared payload")
	}
	ca, cb := configs(0, "")
	ca.WholeLendThreshold = shm.SharedLendMin - 1
	if _, _, erra, _ := connectPair(t, ca, cb); erra == nil {
		t.Errorf("Connect with a whole-payload threshold of %d (below %d) succeeded", ca.WholeLendThreshold, shm.SharedLendMin)
	}
	for _, th := range [][2]int{{0, shm.SharedLendMin}, {128 << 10, 128 << 10}, {0, -1}} {
		ca, cb := configs(0, "")
		ca.WholeLendThreshold, ca.WholeRingThreshold = th[0], th[1]
		if _, _, erra, _ := connectPair(t, ca, cb); erra == nil {
			t.Errorf("Connect with a whole-payload ring threshold of %d (whole lending from %d) succeeded", th[1], th[0])
		}
	}
}

// TestLendBuffers: with nobody receiving, every Lend made while
// LendBuffers reports room returns, until the ring is full of their
// frames; the receiver then copies them all, in order and intact, Settle
// returns and there is room again. A connection that lends nothing, or a
// closed one, reports none.
func TestLendBuffers(t *testing.T) {
	const ring, n = 16 << 10, 4 << 10
	a, b := pairWith(t, func(c *shm.Config) { c.Capacity, c.CMAThreshold = ring, n })
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := func(i int) transport.Header {
		return transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: uint64(i), Step: 1}
	}
	// A frame without payload first (one line), so that the loans leave
	// a line free, too little for one more.
	if err := a.Send(ctx, hdr(-1), nil); err != nil {
		t.Fatal(err)
	}
	var lent [][]byte
	for a.LendBuffers() {
		if len(lent) == ring/64 {
			t.Fatalf("LendBuffers still true after %d unreceived loans", len(lent))
		}
		buf := make([]byte, n)
		fillSeq(buf, 5, len(lent))
		// Nobody receives: a Lend that waited would end at ctx's
		// deadline.
		if err := a.Lend(ctx, hdr(len(lent)), buf); err != nil {
			t.Fatalf("lend %d, with room reported: %v", len(lent), err)
		}
		lent = append(lent, buf)
	}
	// Each lent frame is a header and a descriptor: two lines of the ring.
	if want := (ring - 64) / 128; len(lent) != want {
		t.Fatalf("%d loans had room, want %d (a ring of %d bytes, 64 taken, 128 per lent frame)", len(lent), want, ring)
	}
	if err := b.Recv(ctx, hdr(-1), nil); err != nil {
		t.Fatal(err)
	}
	got, want := make([]byte, n), make([]byte, n)
	for i := range lent {
		if err := b.Recv(ctx, hdr(i), got); err != nil {
			t.Fatalf("recv %d of %d: %v", i, len(lent), err)
		}
		if fillSeq(want, 5, i); !bytes.Equal(got, want) {
			t.Fatalf("loan %d of %d: payload differs", i, len(lent))
		}
	}
	if err := a.Settle(ctx); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if !a.LendBuffers() {
		t.Fatal("no room for a loan after the receiver took them all")
	}
	// A connection that lends nothing reports no room.
	c, d := pairWith(t, func(c *shm.Config) { c.NoCMA = true })
	defer c.Close()
	defer d.Close()
	if c.LendBuffers() {
		t.Fatal("a connection that lends nothing reports room for a loan")
	}
	a.Close()
	if a.LendBuffers() {
		t.Fatal("a closed connection reports room for a loan")
	}
}

// TestSettleWithdraws: a Settle that gives up withdraws the lent payload:
// the receiver fails as from a peer that closed, and never delivers it.
func TestSettleWithdraws(t *testing.T) {
	a, b := lendPair(t)
	defer a.Close()
	defer b.Close()
	h := transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: 1}
	buf := bytes.Repeat([]byte{0xAB}, 128<<10)
	if err := a.Lend(context.Background(), h, buf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := a.Settle(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Settle with nobody receiving = %v, want DeadlineExceeded", err)
	}
	got := make([]byte, len(buf))
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := b.Recv(rctx, h, got); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv of a withdrawn payload = %v, want ErrPeerClosed", err)
	}
}

// BenchmarkLend measures a block lent and taken within one process, the
// receiver on another goroutine: Lend, the receiver's copy, Settle.
// Allocations are per block.
func BenchmarkLend(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			a, c := pairWith(b, func(cfg *shm.Config) { cfg.SendByDescriptor, cfg.CMAThreshold = false, 64<<10 })
			defer a.Close()
			defer c.Close()
			ctx := context.Background()
			out, in := make([]byte, size), make([]byte, size)
			h := transport.Header{Kind: transport.KindP2P, Comm: 7}
			done := background(b.N, func(i int) error {
				h := h
				h.Seq = uint64(i)
				return c.Recv(ctx, h, in)
			})
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				h := h
				h.Seq = uint64(i)
				if err := a.Lend(ctx, h, out); err != nil {
					b.Fatal(err)
				}
				if err := a.Settle(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// One process_vm_readv pays when it is faster than the rings' two copies
// (two and three quarters copies within one process), and never when it could
// not be measured; this machine's rates are measured once and are
// positive.
func TestSingleCopyRate(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		r    shm.SingleCopyRate
		pays bool
	}{
		{shm.SingleCopyRate{Block: 1, CMA: 30 * us, Copy: 9 * us}, false},
		{shm.SingleCopyRate{Block: 1, CMA: 49 * us, Copy: 47 * us}, true},
		{shm.SingleCopyRate{Block: 1, CMA: 25 * us, Copy: 9 * us}, false},
		{shm.SingleCopyRate{Block: 1, CMA: 24 * us, Copy: 9 * us}, true},
		{shm.SingleCopyRate{Block: 1, CMA: 18 * us, Copy: 9 * us}, true},
		{shm.SingleCopyRate{Block: 1, CMA: 1 * us, Copy: 9 * us, Err: errors.New("EPERM")}, false},
	} {
		if got := tc.r.Pays(); got != tc.pays {
			t.Errorf("%v: Pays() = %v, want %v", tc.r, got, tc.pays)
		}
	}
	r := shm.MeasureSingleCopy()
	if r.Err != nil || r.CMA <= 0 || r.Copy <= 0 || r.Block <= 0 {
		t.Fatalf("MeasureSingleCopy() = %+v", r)
	}
	if again := shm.MeasureSingleCopy(); again != r {
		t.Fatalf("measured again: %+v, then %+v", r, again)
	}
	t.Log(r)
}

// TestSettleAfterClose: a Settle of loans outstanding when the connection
// was closed (a communicator that failed while the receiver had not
// copied them) reports ErrClosed. Close has unmapped the rings by then,
// and the withdrawal Settle makes on other errors must not touch them.
func TestSettleAfterClose(t *testing.T) {
	a, b := lendPair(t)
	defer b.Close()
	h := transport.Header{Kind: transport.KindP2P, Comm: 7, Seq: 1}
	if err := a.Lend(context.Background(), h, make([]byte, 128<<10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Settle(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Settle after Close = %v, want ErrClosed", err)
	}
}
