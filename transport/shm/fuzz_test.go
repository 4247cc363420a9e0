package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/transport"
)

// anonRing maps an anonymous shared ring, for tests that write garbage into
// it directly.
func anonRing(t testing.TB, capacity uint64) *mapping {
	t.Helper()
	b, err := unix.Mmap(-1, 0, int(ctrlSize+capacity), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	m := &mapping{ring: viewRing(b, capacity), fd: -1}
	t.Cleanup(func() { unix.Munmap(b) })
	return m
}

// reset clears the control page and sets the counters.
func (m *mapping) reset(head, tail uint64) {
	clear(m.m[:ctrlSize])
	m.head.Store(head)
	m.tail.Store(tail)
}

// fill writes b into the data area starting at stream position pos.
func (m *mapping) fill(pos uint64, b []byte) {
	for i, v := range b[:min(len(b), int(m.cap))] {
		m.data[(pos+uint64(i))&m.mask] = v
	}
}

var fuzzWant = transport.Header{Kind: transport.KindCollective, Op: 1, DType: 7, Comm: 0xC0FFEE, Epoch: 3, Seq: 5, Step: 1, Count: 99, Root: 2}

// sealedFrame is a valid frame with an n-byte payload that starts at
// stream position pos, with flags, sealed.
func sealedFrame(pos uint64, n int, flags byte) []byte {
	b := validFrame(n)
	b[flagsOff] = flags
	binary.LittleEndian.PutUint32(b[sealOff:], sealOf(pos))
	return b
}

// shortFrame is a valid short frame with an n-byte payload (shortFits)
// that starts at stream position pos, with flags besides flagShort, sealed.
func shortFrame(pos uint64, n int, flags byte) []byte {
	h := fuzzWant
	h.Len = uint64(n)
	b := make([]byte, frameAlign)
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i)
	}
	encodeShort(b, &h, p)
	b[flagsOff] |= flags
	binary.LittleEndian.PutUint32(b[sealOff:], sealOf(pos))
	return b
}

// shortHeader is the header that the short frame b stands for, given the
// header the receiver expects: the fields b carries, and want's where
// b's digest is want's (an independent reading of the layout encodeShort
// writes).
func shortHeader(b []byte, want *transport.Header) transport.Header {
	h := transport.Header{Kind: transport.Kind(b[3]), Op: b[4], DType: b[5], RedOp: b[6],
		Step: binary.LittleEndian.Uint32(b[8:]), Len: uint64(binary.LittleEndian.Uint32(b[12:])),
		Seq: binary.LittleEndian.Uint64(b[16:])}
	if binary.LittleEndian.Uint64(b[24:]) == digest(want) {
		h.Comm, h.Epoch, h.Root, h.Count = want.Comm, want.Epoch, want.Root, want.Count
	}
	return h
}

func validFrame(n int) []byte {
	h := fuzzWant
	h.Len = uint64(n)
	b := make([]byte, transport.HeaderSize+n)
	h.Encode(b)
	for i := range n {
		b[transport.HeaderSize+i] = byte(i)
	}
	return b
}

// FuzzRecvCorrupt fills the control page with arbitrary bytes (flags,
// futex words, wake-up targets), writes arbitrary bytes into the ring at the
// consumer's position and an arbitrary tail, then receives, with the
// consumer armed for a sealed frame there or not. Recv must return an
// error (or the frame, if the bytes happen to be one, published by the
// tail or by its seal), never panic, read out of bounds, hang or allocate
// by a length it read.
func FuzzRecvCorrupt(f *testing.F) {
	const capacity = MinCapacity
	f.Add(validFrame(16), []byte{}, uint64(0), uint64(transport.HeaderSize+16), uint16(16), false)
	f.Add(validFrame(16), []byte{}, uint64(1<<64-20), uint64(transport.HeaderSize+16), uint16(16), false)
	f.Add(validFrame(16), []byte{}, uint64(capacity-30), uint64(transport.HeaderSize+8), uint16(16), false)
	f.Add(validFrame(3000), []byte{}, uint64(100), uint64(capacity+1), uint16(3000), false)
	f.Add(validFrame(0), []byte{}, uint64(0), uint64(1<<63), uint16(0), false)
	f.Add(validFrame(0), []byte{}, uint64(7), uint64(1<<64-1), uint16(0), false)
	f.Add([]byte{0xc1, 0x0c, 1, 1, 0, 0, 0, 0}, []byte{}, uint64(0), uint64(56), uint16(0), false)
	bad := validFrame(8)
	bad[48], bad[55] = 0xff, 0xff // absurd length
	f.Add(bad, []byte{}, uint64(0), uint64(64), uint16(8), false)
	f.Add(make([]byte, 200), []byte{}, uint64(0), uint64(200), uint16(100), false)
	garbage := make([]byte, ctrlSize)
	for i := range garbage {
		garbage[i] = byte(i*7 + 1)
	}
	f.Add(validFrame(16), garbage, uint64(0), uint64(transport.HeaderSize+16), uint16(16), false)
	f.Add(sealedFrame(0, 8, 0), []byte{}, uint64(0), uint64(0), uint16(8), true)
	f.Add(sealedFrame(128, 100, flagArmed), []byte{}, uint64(128), uint64(0), uint16(100), true)
	f.Add(sealedFrame(64, 8, 0), []byte{}, uint64(0), uint64(0), uint16(8), true)
	f.Add(sealedFrame(0, 8, 0x80), []byte{}, uint64(0), uint64(0), uint16(8), true)
	f.Add(sealedFrame(capacity-64, 8, 0), []byte{}, uint64(capacity-64), uint64(0), uint16(8), true)
	f.Add(shortFrame(0, 16, 0), []byte{}, uint64(0), uint64(0), uint16(16), true)
	f.Add(shortFrame(64, 24, flagArmed), []byte{}, uint64(64), uint64(64), uint16(24), false)
	f.Add(shortFrame(0, 16, 0), []byte{}, uint64(0), uint64(64), uint16(20), false)
	f.Add(shortFrame(0, 12, flagLent), []byte{}, uint64(0), uint64(64), uint16(12), true)
	// A skip frame at 1 KiB and the frame at the next lap, which the data
	// reaches by wrapping around the ring.
	skip := make([]byte, capacity)
	h := skipHeader(1<<10, capacity)
	h.Encode(skip)
	skip[flagsOff] = flagSkip | flagArmed
	binary.LittleEndian.PutUint32(skip[sealOff:], sealOf(1<<10))
	copy(skip[capacity-1<<10:], sealedFrame(capacity, 8, 0))
	f.Add(skip, []byte{}, uint64(1<<10), uint64(0), uint16(8), true)
	f.Add(skip, []byte{}, uint64(1<<10), uint64(capacity), uint16(8), false)

	in := anonRing(f, capacity)
	out := anonRing(f, capacity)
	buf := make([]byte, 1<<16)
	f.Fuzz(func(t *testing.T, data, ctrl []byte, start, delta uint64, n uint16, armed bool) {
		in.reset(start, start+delta)
		copy(in.m[offTail+8:ctrlSize], ctrl) // everything but the tail...
		in.head.Store(start)                 // ...and the head the consumer starts at
		clear(in.data)
		in.fill(start, data)
		in.prodClosed.Store(1) // nothing more will come: no waiting
		out.reset(0, 0)
		c := newConn(out, in, 1, nil, transport.Header{}, cmaSetup{})
		c.armed = armed
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		err := c.Recv(ctx, fuzzWant, buf[:n])
		runtime.ReadMemStats(&ms1)
		if d := ms1.TotalAlloc - ms0.TotalAlloc; d > 32<<10 {
			t.Fatalf("Recv allocated %d bytes", d)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("Recv waited on a ring whose producer is closed")
		}
		if err == nil {
			// The ring holds data followed by zeros; the frame taken
			// is the one at start or, behind a skip frame there, the
			// one at the next lap.
			var hb [transport.HeaderSize]byte
			copy(hb[:], data)
			sealed := armed && start%frameAlign == 0 && binary.LittleEndian.Uint32(hb[sealOff:]) == sealOf(start)
			if flags := hb[flagsOff]; flags&flagSkip != 0 {
				skip := start
				start = skip - skip&in.mask + capacity
				copy(hb[:], in.data[:transport.HeaderSize])
				sealed = flags&flagArmed != 0 && binary.LittleEndian.Uint32(hb[sealOff:]) == sealOf(start)
				delta -= min(delta, start-skip)
			}
			want := fuzzWant
			want.Len = uint64(n)
			end := frameEnd(start, int(n))
			if hb[flagsOff]&flagShort != 0 {
				if got := shortHeader(hb[:], &want); got != want {
					t.Fatalf("Recv accepted short frame %+v, want %+v", got, want)
				}
				end = start + frameAlign
			} else {
				hb[flagsOff] = 0
				binary.LittleEndian.PutUint32(hb[sealOff:], 0)
				var got transport.Header
				if got.Decode(hb[:]) != nil {
					t.Fatal("Recv accepted a frame that does not decode")
				}
				if got != want {
					t.Fatalf("Recv accepted header %+v, want %+v", got, want)
				}
			}
			if !sealed && (delta < end-start || delta > capacity) {
				t.Fatalf("Recv returned a %d-byte frame with only %d bytes published and no seal", n, delta)
			}
		}
	})
}

// FuzzSendCorrupt gives the producer an arbitrary head and control page,
// with an empty ring at an arbitrary position. Send must fit what fits and
// never use a head outside [last head seen, bytes written]: such a head is
// a FrameError. A plausible head lets it go on until the ring looks full,
// where it waits.
func FuzzSendCorrupt(f *testing.F) {
	const capacity = MinCapacity
	f.Add([]byte{}, uint64(0), uint64(0), uint16(100))
	f.Add([]byte{}, uint64(1<<64-10), uint64(0), uint16(capacity))
	f.Add([]byte{}, uint64(5), uint64(1), uint16(capacity))
	f.Add([]byte{}, uint64(5), uint64(capacity+1), uint16(capacity))
	f.Add([]byte{}, uint64(5), uint64(1<<63), uint16(2*capacity))
	f.Add([]byte{1, 2, 3}, uint64(5), uint64(1<<64-1), uint16(capacity))

	in := anonRing(f, capacity)
	out := anonRing(f, capacity)
	payload := make([]byte, 1<<16)
	f.Fuzz(func(t *testing.T, ctrl []byte, start, hdelta uint64, n uint16) {
		out.reset(0, 0)
		copy(out.m[offTail+8:ctrlSize], ctrl)
		out.tail.Store(start)
		out.head.Store(start + hdelta)
		out.consClosed.Store(0)
		in.reset(0, 0)
		c := newConn(out, in, 1, nil, transport.Header{}, cmaSetup{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		err := c.Send(ctx, fuzzWant, payload[:n])
		var fe *transport.FrameError
		size := frameEnd(start, int(n)) - start
		switch {
		case size <= capacity:
			if err != nil {
				t.Fatalf("Send of %d bytes into an empty ring: %v", n, err)
			}
		case hdelta > capacity:
			if !errors.As(err, &fe) {
				t.Fatalf("Send with head %d, tail %d = %v, want FrameError", start+hdelta, start, err)
			}
		case err == nil:
			if size > capacity+hdelta {
				t.Fatalf("Send of %d bytes succeeded with only %d bytes freed", size, hdelta)
			}
		case !errors.As(err, &fe) && !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Send = %v, want FrameError or DeadlineExceeded", err)
		}
	})
}

func TestCorruptCounters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var fe *transport.FrameError

	// A tail more than a ring ahead of the head.
	in, out := anonRing(t, MinCapacity), anonRing(t, MinCapacity)
	in.reset(0, MinCapacity+1)
	c := newConn(out, in, 1, nil, transport.Header{}, cmaSetup{})
	if err := c.Recv(ctx, fuzzWant, nil); !errors.As(err, &fe) {
		t.Fatalf("Recv with a bogus tail = %v, want FrameError", err)
	}

	// A tail that moves backwards.
	in.reset(0, 0)
	in.fill(0, validFrame(2 * MinCapacity)[:MinCapacity])
	c = newConn(out, in, 1, nil, transport.Header{}, cmaSetup{})
	done := make(chan error, 1)
	go func() { done <- c.Recv(ctx, fuzzWant, make([]byte, 2*MinCapacity)) }()
	in.tail.Store(MinCapacity)
	time.Sleep(20 * time.Millisecond)
	in.tail.Store(10)
	if err := <-done; !errors.As(err, &fe) {
		t.Fatalf("Recv with a tail moving backwards = %v, want FrameError", err)
	}

	// A head beyond the tail, seen when the producer needs space.
	in.reset(0, 0)
	out.reset(0, 0)
	c = newConn(out, in, 1, nil, transport.Header{}, cmaSetup{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		out.head.Store(1 << 40)
	}()
	if err := c.Send(ctx, fuzzWant, make([]byte, 3*MinCapacity)); !errors.As(err, &fe) {
		t.Fatalf("Send with a bogus head = %v, want FrameError", err)
	}
}
