package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
)

var tiny = func(c *Config) { c.Slots, c.SlotSize = 4, 256 }

// With a window of 4 slots and a receiver that is slow, the sender runs
// out of credits and waits; it never writes into a slot the receiver has
// not consumed (the receiver checks every arrival against its window),
// and no message ever finds the receiver without a posted receive.
func TestCreditsExhausted(t *testing.T) {
	a, b, _, eb := pairDevs(t, pairOpts{a: tiny, b: tiny})
	ctx := ctxT(t, 20*time.Second)
	const n = 200
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := a.Send(ctx, hdr(uint64(i), 0), pattern(100+i%150, byte(i))); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < n; i++ {
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond) // let the sender fill the window
		}
		buf := make([]byte, 100+i%150)
		if err := b.Recv(ctx, hdr(uint64(i), 0), buf); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(buf, pattern(len(buf), byte(i))) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if st.CreditWaits == 0 {
		t.Errorf("the sender never waited for credits: %+v", st)
	}
	if bs := b.Stats(); bs.CreditsReturned == 0 || bs.CreditMessages > bs.CreditsReturned {
		t.Errorf("receiver stats %+v", bs)
	}
	if s := eb.Stats(); s.RNRWaits != 0 {
		t.Errorf("%d messages found no receive posted: %+v", s.RNRWaits, s)
	}
}

// Messages much larger than the window stream through it, in both
// directions at once, with rendezvous off.
func TestLargerThanWindow(t *testing.T) {
	noRndv := func(c *Config) { c.Slots, c.SlotSize, c.RendezvousThreshold = 4, 4096, -1 }
	a, b := pairWith(t, pairOpts{a: noRndv, b: noRndv})
	ctx := ctxT(t, 20*time.Second)
	sizes := []int{16 << 10, 16<<10 + 1, 1<<20 + 7, 3 << 20}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for dir, ends := range [][2]*Conn{{a, b}, {b, a}} {
		tx, rx := ends[0], ends[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, n := range sizes {
				if err := tx.Send(ctx, hdr(uint64(i), uint32(dir)), pattern(n, byte(i+dir))); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i, n := range sizes {
				buf := make([]byte, n)
				if err := rx.Recv(ctx, hdr(uint64(i), uint32(dir)), buf); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, pattern(n, byte(i+dir))) {
					errs <- fmt.Errorf("dir %d: %d bytes corrupted", dir, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total int
	for _, n := range sizes {
		total += n
	}
	if st := a.Stats(); st.RendezvousFrames != 0 || st.SlotWrites < uint64(total/4096) {
		t.Fatalf("stats %+v", st)
	}
}

// Large frames go by rendezvous, straight into the receiver's buffer, and
// the second send of the same buffers hits the registration cache.
func TestRendezvous(t *testing.T) {
	a, b := pairWith(t, pairOpts{a: func(c *Config) { c.RendezvousChunk = 1 << 20 }})
	ctx := ctxT(t, 20*time.Second)
	src := pattern(5<<20+3, 9)
	dst := make([]byte, len(src))
	for round := 0; round < 2; round++ {
		clear(dst)
		errc := make(chan error, 1)
		go func() { errc <- a.Send(ctx, hdr(uint64(round), 0), src) }()
		if err := b.Recv(ctx, hdr(uint64(round), 0), dst); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, dst) {
			t.Fatal("rendezvous payload corrupted")
		}
	}
	if st := a.Stats(); st.RendezvousFrames != 2 || st.EagerFrames != 0 {
		t.Fatalf("stats %+v", st)
	}
	for _, c := range []*Conn{a, b} {
		if s := c.dev.Cache().Stats(); s.Hits != 1 || s.Misses != 1 {
			t.Fatalf("cache of %s: %+v", c.dev.Name(), s)
		}
	}
	// A pipelined sender sends chunks of one buffer: they all hit the
	// region registered for the first (it extends to the capacity).
	big := pattern(8<<20, 1)
	before := a.dev.Cache().Stats()
	for i := 0; i < 4; i++ {
		chunk := big[i*(2<<20) : (i+1)*(2<<20)]
		got := make([]byte, len(chunk))
		errc := make(chan error, 1)
		go func() { errc <- a.Send(ctx, hdr(10, uint32(i)), chunk) }()
		if err := b.Recv(ctx, hdr(10, uint32(i)), got); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, chunk) {
			t.Fatalf("chunk %d corrupted", i)
		}
	}
	after := a.dev.Cache().Stats()
	if after.Misses-before.Misses != 1 || after.Hits-before.Hits != 3 {
		t.Fatalf("chunks of one buffer: %d misses, %d hits", after.Misses-before.Misses, after.Hits-before.Hits)
	}
}

// A side that cannot register a buffer still delivers it: the receiver
// declines the rendezvous and the sender streams through the window; a
// sender that cannot register streams without asking.
func TestRendezvousWithoutRegistration(t *testing.T) {
	for _, side := range []string{"receiver", "sender"} {
		t.Run(side, func(t *testing.T) {
			limited := verbs.EmuConfig{MaxMR: 3} // the connection's own regions only
			o := pairOpts{emuB: &limited}
			if side == "sender" {
				o = pairOpts{emu: limited, emuB: &verbs.EmuConfig{}}
			}
			a, b := pairWith(t, o)
			ctx := ctxT(t, 20*time.Second)
			src := pattern(3<<20+5, 3)
			dst := make([]byte, len(src))
			errc := make(chan error, 1)
			go func() { errc <- a.Send(ctx, hdr(1, 0), src) }()
			if err := b.Recv(ctx, hdr(1, 0), dst); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("payload corrupted")
			}
			if side == "receiver" && b.Stats().DeclinedRendezvous != 1 {
				t.Fatalf("receiver stats %+v", b.Stats())
			}
			if st := a.Stats(); st.RendezvousFrames != 0 || st.EagerFrames != 1 {
				t.Fatalf("sender stats %+v", st)
			}
		})
	}
}

// Zero-length frames in every mode, interleaved with others.
func TestZeroLength(t *testing.T) {
	for name, edit := range map[string]func(*Config){"default": nil, "tiny": tiny,
		"no-rendezvous": func(c *Config) { c.RendezvousThreshold = -1 }} {
		t.Run(name, func(t *testing.T) {
			a, b := pairWith(t, pairOpts{a: edit, b: edit})
			ctx := ctxT(t, 10*time.Second)
			sizes := []int{0, 0, 5, 0, 1 << 20, 0}
			go func() {
				for i, n := range sizes {
					a.Send(ctx, hdr(uint64(i), 0), pattern(n, 1))
				}
			}()
			for i, n := range sizes {
				buf := make([]byte, n)
				if err := b.Recv(ctx, hdr(uint64(i), 0), buf); err != nil {
					t.Fatalf("frame %d (%d bytes): %v", i, n, err)
				}
				if !bytes.Equal(buf, pattern(n, 1)) {
					t.Fatalf("frame %d corrupted", i)
				}
			}
			// A zero-length frame is still checked against what is expected.
			a.Send(ctx, hdr(50, 0), nil)
			var me *transport.MismatchError
			if err := b.Recv(ctx, hdr(50, 0), make([]byte, 1)); !errors.As(err, &me) {
				t.Fatalf("zero-length frame received into 1 byte: %v", err)
			}
		})
	}
}

// The eager guarantee holds frame after frame, whatever credits the
// receiver holds back: a send of EagerLimit bytes completes while nobody
// receives, provided every earlier frame was received.
func TestEagerGuarantee(t *testing.T) {
	for name, edit := range map[string]func(*Config){"default": nil, "tiny": tiny,
		"odd": func(c *Config) { c.Slots, c.SlotSize, c.EagerLimit = 7, 320, 1<<30 }} {
		t.Run(name, func(t *testing.T) {
			a, b := pairWith(t, pairOpts{a: edit, b: edit})
			n := a.EagerLimit()
			ctx := ctxT(t, 10*time.Second)
			for i := 0; i < 50; i++ {
				// One-slot frames in between leave a credit held back.
				size := n - i%3
				if i%4 == 1 {
					size = 10
				}
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := a.Send(sctx, hdr(uint64(i), 0), pattern(size, byte(i)))
				cancel()
				if err != nil {
					t.Fatalf("eager send %d of %d bytes (limit %d) blocked: %v", i, size, n, err)
				}
				buf := make([]byte, size)
				if err := b.Recv(ctx, hdr(uint64(i), 0), buf); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, pattern(size, byte(i))) {
					t.Fatalf("frame %d corrupted", i)
				}
			}
		})
	}
}

// Many small messages both ways at once.
func TestManySmall(t *testing.T) {
	a, b := pairWith(t, pairOpts{})
	ctx := ctxT(t, 30*time.Second)
	n := 20000
	if testing.Short() {
		n = 3000
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for dir, ends := range [][2]*Conn{{a, b}, {b, a}} {
		tx, rx := ends[0], ends[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			var buf [64]byte
			for i := 0; i < n; i++ {
				buf[0], buf[1] = byte(i), byte(i>>8)
				if err := tx.Send(ctx, hdr(uint64(i), uint32(dir)), buf[:1+i%64]); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			var buf [64]byte
			for i := 0; i < n; i++ {
				if err := rx.Recv(ctx, hdr(uint64(i), uint32(dir)), buf[:1+i%64]); err != nil {
					errs <- fmt.Errorf("dir %d message %d: %w", dir, i, err)
					return
				}
				if (i%64 > 0 && (buf[0] != byte(i) || buf[1] != byte(i>>8))) || (i%64 == 0 && buf[0] != byte(i)) {
					errs <- fmt.Errorf("dir %d message %d carried %d", dir, i, buf[0])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Several connections over the same two devices, used concurrently, each
// with its own traffic.
func TestConcurrentConns(t *testing.T) {
	ea, eb := emuPair(t, verbs.EmuConfig{}, nil)
	da, db := openDev(t, ea, nil), openDev(t, eb, nil)
	const k = 4
	var conns [k][2]*Conn
	for i := range conns {
		ca := Config{Comm: 7, Epoch: uint32(i), Self: 0, Peer: 1, Device: da}
		cb := Config{Comm: 7, Epoch: uint32(i), Self: 1, Peer: 0, Device: db}
		x, y, ex, ey := connectPair(t, ca, cb)
		if ex != nil || ey != nil {
			t.Fatal(ex, ey)
		}
		conns[i] = [2]*Conn{x, y}
		t.Cleanup(func() { x.Close(); y.Close() })
	}
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4*k)
	for i := range conns {
		for dir := 0; dir < 2; dir++ {
			tx, rx := conns[i][dir], conns[i][1-dir]
			wg.Add(2)
			go func() {
				defer wg.Done()
				for j := 0; j < 30; j++ {
					n := []int{0, 100, 70000, 600 << 10}[j%4]
					if err := tx.Send(ctx, hdr(uint64(j), uint32(i)), pattern(n, byte(i*10+dir+j))); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for j := 0; j < 30; j++ {
					n := []int{0, 100, 70000, 600 << 10}[j%4]
					buf := make([]byte, n)
					if err := rx.Recv(ctx, hdr(uint64(j), uint32(i)), buf); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(buf, pattern(n, byte(i*10+dir+j))) {
						errs <- fmt.Errorf("conn %d dir %d frame %d corrupted", i, dir, j)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A send blocked on credits honours its deadline and cancellation.
func TestSendBlockedOnCredits(t *testing.T) {
	a, _ := pairWith(t, pairOpts{a: tiny, b: tiny})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var err error
	for i := 0; err == nil && i < 100; i++ {
		err = a.Send(ctx, hdr(uint64(i), 0), make([]byte, 200))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send into a full window: %v, want DeadlineExceeded", err)
	}
	if a.Stats().CreditWaits == 0 {
		t.Fatal("no credit wait recorded")
	}
}
