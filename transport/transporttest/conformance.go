// Package transporttest holds the conformance tests every transport.Conn
// implementation must pass: ordered delivery of every size, header checks,
// deadlines, cancellation, close semantics, eager sends and an allocation
// free hot path.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/transport"
)

// PairFunc makes a fresh connected pair of Conns for one test.
type PairFunc func(t testing.TB) (a, b transport.Conn)

// Run runs every conformance test on pairs made by newPair.
func Run(t *testing.T, newPair PairFunc) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, newPair) })
	t.Run("Ordered", func(t *testing.T) { testOrdered(t, newPair) })
	t.Run("Mismatch", func(t *testing.T) { testMismatch(t, newPair) })
	t.Run("Deadline", func(t *testing.T) { testDeadline(t, newPair) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newPair) })
	t.Run("PeerClose", func(t *testing.T) { testPeerClose(t, newPair) })
	t.Run("LocalClose", func(t *testing.T) { testLocalClose(t, newPair) })
	t.Run("CloseDuringTraffic", func(t *testing.T) { testCloseDuringTraffic(t, newPair) })
	t.Run("Eager", func(t *testing.T) { testEager(t, newPair) })
	t.Run("NoAllocs", func(t *testing.T) { testNoAllocs(t, newPair) })
	t.Run("Buffers", func(t *testing.T) { testBuffers(t, newPair) })
	t.Run("Offers", func(t *testing.T) { testOffers(t, newPair) })
	t.Run("Views", func(t *testing.T) { testViews(t, newPair) })
	t.Run("Duplex", func(t *testing.T) { testDuplex(t, newPair) })
}

// implements returns c as a T, the transport interface named name, and
// skips t if c is not one.
func implements[T any](t *testing.T, c transport.Conn, name string) T {
	x, ok := c.(T)
	if !ok {
		t.Skipf("%s does not implement transport.%s", transport.Name(c), name)
	}
	return x
}

func hdr(seq uint64, step uint32) transport.Header {
	return transport.Header{Kind: transport.KindCollective, Op: 1, DType: 7, Comm: 0xC0FFEE, Epoch: 3, Seq: seq, Step: step, Count: 99, Root: 2}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func testRoundTrip(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 30*time.Second)
	sizes := []int{0, 1, 55, 56, 57, 4095, 4096, 65537, 1<<20 + 3, 3 << 20, 9<<20 + 11}
	// Both directions at once, so a transport that serialises them or
	// mixes them up fails.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for dir, ends := range [][2]transport.Conn{{a, b}, {b, a}} {
		tx, rx := ends[0], ends[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, n := range sizes {
				buf := make([]byte, n)
				fill(buf, uint64(dir*100+i))
				if err := tx.Send(ctx, hdr(uint64(i), uint32(dir)), buf); err != nil {
					errs <- fmt.Errorf("dir %d send %d bytes: %w", dir, n, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i, n := range sizes {
				got := make([]byte, n)
				if err := rx.Recv(ctx, hdr(uint64(i), uint32(dir)), got); err != nil {
					errs <- fmt.Errorf("dir %d recv %d bytes: %w", dir, n, err)
					return
				}
				want := make([]byte, n)
				fill(want, uint64(dir*100+i))
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("dir %d: payload of %d bytes corrupted", dir, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testOrdered(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 30*time.Second)
	const n = 2000
	go func() {
		var buf [8]byte
		for i := 0; i < n; i++ {
			buf[0] = byte(i)
			if err := a.Send(ctx, hdr(uint64(i), 0), buf[:1+i%8]); err != nil {
				return
			}
		}
	}()
	var buf [8]byte
	for i := 0; i < n; i++ {
		if err := b.Recv(ctx, hdr(uint64(i), 0), buf[:1+i%8]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if buf[0] != byte(i) {
			t.Fatalf("message %d carried %d", i, buf[0])
		}
	}
}

func testMismatch(t *testing.T, newPair PairFunc) {
	ctx := ctxT(t, 10*time.Second)
	cases := []struct {
		name string
		edit func(h *transport.Header)
		n    int
	}{
		{"seq", func(h *transport.Header) { h.Seq++ }, 8},
		{"epoch", func(h *transport.Header) { h.Epoch++ }, 8},
		{"comm", func(h *transport.Header) { h.Comm++ }, 8},
		{"step", func(h *transport.Header) { h.Step++ }, 8},
		{"op", func(h *transport.Header) { h.Op++ }, 8},
		{"count", func(h *transport.Header) { h.Count++ }, 8},
		{"kind", func(h *transport.Header) { h.Kind = transport.KindP2P }, 8},
		{"length", func(h *transport.Header) {}, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t)
			defer a.Close()
			defer b.Close()
			if err := a.Send(ctx, hdr(7, 1), make([]byte, 8)); err != nil {
				t.Fatal(err)
			}
			want := hdr(7, 1)
			tc.edit(&want)
			err := b.Recv(ctx, want, make([]byte, tc.n))
			var me *transport.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("Recv = %v, want a MismatchError", err)
			}
			if me.Error() == "" {
				t.Fatal("empty mismatch message")
			}
		})
	}
}

func testDeadline(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Recv(ctx, hdr(1, 0), make([]byte, 4))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline honoured only after %v", d)
	}
	_ = a
}

func testCancel(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	// A large send with nobody receiving must block and then be cancelled.
	err := a.Send(ctx, hdr(1, 0), make([]byte, 64<<20))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want Canceled", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel2)
	if err := b.Recv(ctx2, hdr(9, 9), make([]byte, 1)); err == nil {
		t.Fatal("Recv after cancellation succeeded")
	}
}

func testPeerClose(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer b.Close()
	ctx := ctxT(t, 10*time.Second)
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.Close()
	}()
	err := b.Recv(ctx, hdr(1, 0), make([]byte, 4))
	if !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv after peer close = %v, want ErrPeerClosed", err)
	}
}

func testLocalClose(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer b.Close()
	ctx := ctxT(t, 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- a.Recv(ctx, hdr(1, 0), make([]byte, 4)) }()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Recv on a closed Conn succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
	if err := a.Send(ctx, hdr(2, 0), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

// testCloseDuringTraffic closes one end while both directions carry frames
// of every size class: every call at either end returns (nil, or an error:
// transport.ErrClosed at the closed end), and every frame received without
// an error holds exactly what was sent.
func testCloseDuringTraffic(t *testing.T, newPair PairFunc) {
	sizes := []int{8, 4096, 256 << 10}
	for round := range 12 {
		a, b := newPair(t)
		ctx := ctxT(t, 20*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		send := func(c transport.Conn, closed bool) {
			defer wg.Done()
			for i := uint64(0); ; i++ {
				p := make([]byte, sizes[i%uint64(len(sizes))])
				fill(p, i)
				if err := c.Send(ctx, hdr(i, 0), p); err != nil {
					errs <- closeErr("Send", i, err, closed)
					return
				}
			}
		}
		recv := func(c transport.Conn, closed bool) {
			defer wg.Done()
			for i := uint64(0); ; i++ {
				got, want := make([]byte, sizes[i%uint64(len(sizes))]), make([]byte, sizes[i%uint64(len(sizes))])
				if err := c.Recv(ctx, hdr(i, 0), got); err != nil {
					errs <- closeErr("Recv", i, err, closed)
					return
				}
				if fill(want, i); !bytes.Equal(got, want) {
					errs <- fmt.Errorf("frame %d of %d bytes received without error but corrupted", i, len(got))
					return
				}
			}
		}
		wg.Add(4)
		go send(a, true)
		go recv(a, true)
		go send(b, false)
		go recv(b, false)
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		a.Close()
		// b's calls end once they see the peer gone; a's at once.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: calls still blocked 15 s after Close", round)
		}
		b.Close()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
	}
}

// closeErr checks the error that ended a loop of calls during
// testCloseDuringTraffic: ErrClosed at the end that was closed, any error
// but a deadline at the other.
func closeErr(call string, i uint64, err error, closed bool) error {
	switch {
	case closed && !errors.Is(err, transport.ErrClosed):
		return fmt.Errorf("%s %d at the closed end: %v, want ErrClosed", call, i, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %d at the open end: still blocked at the deadline", call, i)
	}
	return nil
}

func testEager(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	n := a.EagerLimit()
	if n < 1024 {
		t.Fatalf("EagerLimit = %d, want at least 1 KiB", n)
	}
	ctx := ctxT(t, 5*time.Second)
	// Nobody receives yet: an eager send must still complete.
	if err := a.Send(ctx, hdr(1, 0), make([]byte, n)); err != nil {
		t.Fatalf("eager send of %d bytes: %v", n, err)
	}
	if err := b.Recv(ctx, hdr(1, 0), make([]byte, n)); err != nil {
		t.Fatal(err)
	}
}

// testBuffers checks transport.Buffered, where a Conn implements it: with
// nobody receiving, every Send it reports room for returns, until it
// reports none (within what the transport can hold); once the peer has
// received them all (in order, intact), there is room again. A closed end
// reports none.
func testBuffers(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	ba := implements[transport.Buffered](t, a, "Buffered")
	ctx := ctxT(t, 30*time.Second)
	const n, most = 1000, 1 << 16
	if ba.Buffers(-1) {
		t.Fatal("Buffers(-1) = true")
	}
	if !ba.Buffers(n) {
		t.Fatalf("a fresh connection has no room for %d bytes", n)
	}
	msg := make([]byte, n)
	sent := uint64(0)
	for ; ba.Buffers(n); sent++ {
		if sent == most {
			t.Fatalf("Buffers(%d) still true after %d unreceived sends", n, most)
		}
		fill(msg, sent)
		// Nobody receives: a Send that waited would end at ctx's
		// deadline.
		if err := a.Send(ctx, hdr(sent, 0), msg); err != nil {
			t.Fatalf("send %d, with room reported: %v", sent, err)
		}
	}
	if sent == 0 {
		t.Fatal("no send had room")
	}
	got, want := make([]byte, n), make([]byte, n)
	for i := range sent {
		if err := b.Recv(ctx, hdr(i, 0), got); err != nil {
			t.Fatalf("recv %d of %d: %v", i, sent, err)
		}
		if fill(want, i); !bytes.Equal(got, want) {
			t.Fatalf("message %d of %d corrupted", i, sent)
		}
	}
	// The peer's end may free the room on its own time (a TCP peer's
	// kernel acknowledges what it received): within the deadline.
	for !ba.Buffers(n) {
		if ctx.Err() != nil {
			t.Fatalf("no room for %d bytes after the peer received all %d messages", n, sent)
		}
		time.Sleep(time.Millisecond)
	}
	a.Close()
	if ba.Buffers(n) {
		t.Fatal("a closed connection reports room")
	}
}

// testOffers checks transport.Offerer, where a Conn implements it and
// offers some payload of up to 1 MiB: with nobody receiving, an offer and
// its Settle return, and the peer later receives the payload as it was
// offered although the sender has overwritten its buffer since; an offer
// followed by a Send arrives before it; an offer the peer receives at
// once arrives intact, and Settle returns after it.
func testOffers(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	oa := implements[transport.Offerer](t, a, "Offerer")
	n := 1 << 10
	for ; n <= 1<<20 && !oa.Offers(n); n *= 2 {
	}
	if n > 1<<20 {
		t.Skipf("%s offers no payload of up to 1 MiB", transport.Name(a))
	}
	ctx := ctxT(t, 30*time.Second)
	buf := make([]byte, n)
	// Nobody receives: an offer or a Settle that waited would end at
	// ctx's deadline.
	fill(buf, 1)
	if err := oa.Offer(ctx, hdr(1, 0), buf); err != nil {
		t.Fatalf("offer of %d bytes: %v", n, err)
	}
	if err := oa.Settle(ctx); err != nil {
		t.Fatalf("Settle of an offer nobody received: %v", err)
	}
	clear(buf)
	if !oa.Offers(n) {
		t.Fatalf("Offers(%d) = false after the offer before settled", n)
	}
	fill(buf, 2)
	if err := oa.Offer(ctx, hdr(2, 0), buf); err != nil {
		t.Fatalf("second offer: %v", err)
	}
	small := []byte("after the offer")
	if err := a.Send(ctx, hdr(3, 0), small); err != nil {
		t.Fatalf("send after an offer: %v", err)
	}
	clear(buf)
	got, want := make([]byte, n), make([]byte, n)
	for i := uint64(1); i <= 2; i++ {
		if err := b.Recv(ctx, hdr(i, 0), got); err != nil {
			t.Fatalf("recv of offer %d: %v", i, err)
		}
		if fill(want, i); !bytes.Equal(got, want) {
			t.Fatalf("offer %d: payload differs from what was offered", i)
		}
	}
	gotSmall := make([]byte, len(small))
	if err := b.Recv(ctx, hdr(3, 0), gotSmall); err != nil || !bytes.Equal(gotSmall, small) {
		t.Fatalf("the send after the offer: %q, %v", gotSmall, err)
	}
	// Received while offered.
	fill(buf, 4)
	if err := oa.Offer(ctx, hdr(4, 0), buf); err != nil {
		t.Fatalf("third offer: %v", err)
	}
	if err := b.Recv(ctx, hdr(4, 0), got); err != nil {
		t.Fatalf("recv of offer 4: %v", err)
	}
	if err := oa.Settle(ctx); err != nil {
		t.Fatalf("Settle of an offer received: %v", err)
	}
	if fill(want, 4); !bytes.Equal(got, want) {
		t.Fatal("offer 4: payload differs")
	}
}

// pieces is a transport.Consumer that checks the pieces of one payload
// against it as they come: in order, each byte once, every piece but the
// last whole elements of align bytes.
type pieces struct {
	want   []byte
	align  int
	next   int
	calls  int
	ragged bool // a piece before this one was not whole elements
	err    error
}

func (p *pieces) Consume(off int, piece []byte) {
	p.calls++
	switch {
	case p.err != nil:
	case off != p.next:
		p.err = fmt.Errorf("piece %d at offset %d, want %d", p.calls, off, p.next)
	case p.ragged:
		p.err = fmt.Errorf("piece %d follows one that was not whole elements of %d bytes", p.calls, p.align)
	case off+len(piece) > len(p.want):
		p.err = fmt.Errorf("piece %d ends at %d, past the payload's %d bytes", p.calls, off+len(piece), len(p.want))
	case !bytes.Equal(piece, p.want[off:off+len(piece)]):
		p.err = fmt.Errorf("piece %d (bytes %d to %d) differs from what was sent", p.calls, off, off+len(piece))
	}
	p.ragged = len(piece)%p.align != 0
	p.next = off + len(piece)
}

// testViews checks a Viewer's RecvView: payloads of every size, through
// the ring and (where the connection lends) lent, reach the consumer in
// order and whole; a header that does not match is reported before any
// piece.
func testViews(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	vb := implements[transport.Viewer](t, b, "Viewer")
	ctx := ctxT(t, 60*time.Second)
	sizes := []int{0, 1, 3, 8, 60, 4 << 10, 4<<10 + 2, 64<<10 + 6, 256<<10 + 4, 1<<20 + 12, 3<<20 + 2}
	aligns := []int{1, 2, 4, 8, 64}
	lender, _ := a.(transport.Lender)
	seq := uint64(0)
	for _, n := range sizes {
		for _, align := range aligns {
			for _, lend := range []bool{false, true} {
				if lend && (lender == nil || lender.LendMin() == 0 || n < lender.LendMin()) {
					continue
				}
				seq++
				payload := make([]byte, n)
				fill(payload, seq)
				errc := make(chan error, 1)
				go func(h transport.Header) {
					if lend {
						if err := lender.Lend(ctx, h, payload); err != nil {
							errc <- err
							return
						}
						errc <- lender.Settle(ctx)
						return
					}
					errc <- a.Send(ctx, h, payload)
				}(hdr(seq, 5))
				p := &pieces{want: payload, align: align}
				if err := vb.RecvView(ctx, hdr(seq, 5), make([]byte, n), align, p); err != nil {
					t.Fatalf("%d bytes, align %d, lent %v: RecvView: %v", n, align, lend, err)
				}
				if err := <-errc; err != nil {
					t.Fatalf("%d bytes, lent %v: send: %v", n, lend, err)
				}
				switch {
				case p.err != nil:
					t.Fatalf("%d bytes, align %d, lent %v: %v", n, align, lend, p.err)
				case p.next != n:
					t.Fatalf("%d bytes, align %d, lent %v: pieces ended at %d", n, align, lend, p.next)
				}
			}
		}
	}
	// A viewed receive allocates nothing.
	payload := make([]byte, 4<<10)
	fill(payload, seq)
	p := &pieces{want: payload, align: 8}
	buf := make([]byte, len(payload))
	allocs := testing.AllocsPerRun(50, func() {
		seq++
		if err := a.Send(ctx, hdr(seq, 5), payload); err != nil {
			t.Fatal(err)
		}
		p.next, p.ragged = 0, false
		if err := vb.RecvView(ctx, hdr(seq, 5), buf, 8, p); err != nil {
			t.Fatal(err)
		}
	})
	if p.err != nil || allocs != 0 {
		t.Fatalf("Send and RecvView of %d bytes: %v, %.1f allocations each", len(payload), p.err, allocs)
	}
	// A mismatch: nothing of the payload is handed over.
	seq++
	if err := a.Send(ctx, hdr(seq, 1), make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	p = &pieces{want: make([]byte, 16), align: 8}
	err := vb.RecvView(ctx, hdr(seq, 2), make([]byte, 16), 8, p)
	var me *transport.MismatchError
	if !errors.As(err, &me) || p.calls != 0 {
		t.Fatalf("RecvView of a mismatched frame = %v after %d pieces, want a MismatchError before any", err, p.calls)
	}
}

// testDuplex checks SendRecv: both sides at once, or against a Send and
// a Recv, in sizes from empty to larger than any socket buffer (capped by
// DuplexMax) and unequal in the two directions; a mismatched frame, an
// oversized message and a silent peer; no allocation.
func testDuplex(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	da := implements[transport.Duplex](t, a, "Duplex")
	db := implements[transport.Duplex](t, b, "Duplex")
	ctx := ctxT(t, 60*time.Second)
	limit := min(da.DuplexMax(), db.DuplexMax())
	sizes := []int{0, 1, 4 << 10, 256<<10 + 3, 1<<20 - 1, 8<<20 + 5}
	seq := uint64(0)
	for _, na := range sizes {
		for _, nb := range sizes {
			if na > limit || nb > limit {
				continue
			}
			for _, mixed := range []bool{false, true} {
				seq++
				pa, pb := make([]byte, na), make([]byte, nb)
				fill(pa, seq)
				fill(pb, seq+1<<32)
				ra, rb := make([]byte, nb), make([]byte, na)
				errc := make(chan error, 2)
				go func(ha, hb transport.Header) {
					if !mixed {
						errc <- da.SendRecv(ctx, ha, pa, hb, ra)
						return
					}
					// a sends and receives with two calls at once.
					go func() { errc <- a.Send(ctx, ha, pa) }()
					errc <- a.Recv(ctx, hb, ra)
				}(hdr(seq, 1), hdr(seq, 2))
				err := db.SendRecv(ctx, hdr(seq, 2), pb, hdr(seq, 1), rb)
				for range 1 + btoi(mixed) {
					if e := <-errc; err == nil {
						err = e
					}
				}
				if err != nil {
					t.Fatalf("%d and %d bytes, mixed %v: %v", na, nb, mixed, err)
				}
				if !bytes.Equal(ra, pb) || !bytes.Equal(rb, pa) {
					t.Fatalf("%d and %d bytes, mixed %v: payload corrupted", na, nb, mixed)
				}
			}
		}
	}
	if limit < 1<<30 {
		if err := da.SendRecv(ctx, hdr(1, 1), make([]byte, limit+1), hdr(1, 1), nil); err == nil {
			t.Fatalf("SendRecv of %d bytes over a limit of %d succeeded", limit+1, limit)
		}
	}
	// No allocation, both sides counted.
	m := min(limit, 64<<10)
	sbuf, rbuf, pbuf, qbuf := make([]byte, m), make([]byte, m), make([]byte, m), make([]byte, m)
	const runs = 50
	peer := make(chan error, 1)
	go func() {
		for i := range runs + 1 {
			if err := db.SendRecv(ctx, hdr(uint64(i), 3), pbuf, hdr(uint64(i), 3), qbuf); err != nil {
				peer <- err
				return
			}
		}
		peer <- nil
	}()
	i := uint64(0)
	allocs := testing.AllocsPerRun(runs, func() {
		if err := da.SendRecv(ctx, hdr(i, 3), sbuf, hdr(i, 3), rbuf); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if err := <-peer; err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("SendRecv of %d bytes both ways: %.1f allocations each", len(sbuf), allocs)
	}
	// A mismatched frame is reported, not taken.
	seq = 1 << 40
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, hdr(seq, 4), make([]byte, 16)) }()
	err := db.SendRecv(ctx, hdr(seq, 4), make([]byte, 16), hdr(seq, 5), make([]byte, 16))
	var me *transport.MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("SendRecv of a mismatched frame = %v, want a MismatchError", err)
	}
	<-errc

	// A peer that neither reads nor sends: the deadline ends the wait,
	// with the send stuck behind a full socket buffer or done.
	for _, n := range []int{16, min(limit, 64<<20)} {
		c, d := newPair(t)
		dc := c.(transport.Duplex)
		dctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		err := dc.SendRecv(dctx, hdr(1, 1), make([]byte, n), hdr(1, 1), make([]byte, 8))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SendRecv of %d bytes to a silent peer = %v, want DeadlineExceeded", n, err)
		}
		if e := time.Since(start); e > 5*time.Second {
			t.Fatalf("deadline honoured only after %v", e)
		}
		c.Close()
		d.Close()
	}
	// The peer closes, or this side does, while the exchange waits on a
	// full socket buffer: it fails at once, not at its deadline.
	for _, local := range []bool{false, true} {
		c, d := newPair(t)
		dc := c.(transport.Duplex)
		closer := d
		if local {
			closer = c
		}
		time.AfterFunc(30*time.Millisecond, func() { closer.Close() })
		start := time.Now()
		err := dc.SendRecv(ctx, hdr(1, 1), make([]byte, min(limit, 64<<20)), hdr(1, 1), make([]byte, 8))
		if err == nil {
			t.Fatalf("SendRecv with a closed connection (local %v) succeeded", local)
		}
		if e := time.Since(start); e > 5*time.Second {
			t.Fatalf("SendRecv noticed the close (local %v) only after %v: %v", local, e, err)
		}
		if local && !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("SendRecv on a connection closed meanwhile = %v, want ErrClosed", err)
		}
		if !local && !errors.Is(err, transport.ErrPeerClosed) {
			t.Fatalf("SendRecv to a peer that closed = %v, want ErrPeerClosed", err)
		}
		c.Close()
		d.Close()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func testNoAllocs(t *testing.T, newPair PairFunc) {
	a, b := newPair(t)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 30*time.Second)
	sbuf := make([]byte, 4096)
	rbuf := make([]byte, 4096)
	h := hdr(1, 0)
	ba, buffered := a.(transport.Buffered)
	allocs := testing.AllocsPerRun(200, func() {
		if buffered {
			ba.Buffers(len(sbuf))
		}
		if err := a.Send(ctx, h, sbuf); err != nil {
			t.Fatal(err)
		}
		if err := b.Recv(ctx, h, rbuf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("Buffers+Send+Recv allocates %.1f times per message", allocs)
	}
}

// Bench measures one-way Send+Recv of size bytes on a pair, pipelined by a
// sending goroutine.
func Bench(b *testing.B, newPair PairFunc, size int) {
	x, y := newPair(b)
	defer x.Close()
	defer y.Close()
	ctx := context.Background()
	sbuf := make([]byte, size)
	rbuf := make([]byte, size)
	h := hdr(1, 0)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			if err := x.Send(ctx, h, sbuf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < b.N; i++ {
		if err := y.Recv(ctx, h, rbuf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
