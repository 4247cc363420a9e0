package shm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/transport"
)

// descConn makes a Conn on anonymous rings that receives frames of at least
// 16 bytes by descriptor from this process and sends them the same way.
func descConn(t testing.TB, in, out *mapping) *Conn {
	t.Helper()
	return newConn(out, in, 1, nil, transport.Header{}, cmaSetup{
		out: true, outMin: 16, in: true, inMin: 16, send: true,
		reader: cmaReader{pid: os.Getpid(), pidfd: -1},
	})
}

// descFrame encodes the header of an n-byte lent frame followed by a
// descriptor and the frame's padding.
func descFrame(n int, magic, addr, length, ticket uint64) []byte {
	b := make([]byte, frameEnd(0, descSize))
	h := fuzzWant
	h.Len = uint64(n)
	h.Encode(b)
	b[flagsOff] = flagLent
	d := b[transport.HeaderSize:]
	putU64(d[0:], magic)
	putU64(d[8:], addr)
	putU64(d[16:], length)
	putU64(d[24:], ticket)
	return b
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func TestRecvDescriptor(t *testing.T) {
	src := make([]byte, 5000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	noAccess, err := unix.Mmap(-1, 0, 8192, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(noAccess)
	var fe *transport.FrameError
	cases := []struct {
		name                        string
		magic, addr, length, ticket uint64
		check                       func(error) bool
	}{
		{"valid", descMagic, addrOf(src), 5000, 1, func(err error) bool { return err == nil }},
		{"magic", descMagic + 1, addrOf(src), 5000, 1, func(err error) bool { return errors.As(err, &fe) }},
		{"length", descMagic, addrOf(src), 4999, 1, func(err error) bool { return errors.As(err, &fe) }},
		{"old ticket", descMagic, addrOf(src), 5000, 0, func(err error) bool { return errors.As(err, &fe) }},
		{"future ticket", descMagic, addrOf(src), 5000, 2, func(err error) bool { return errors.As(err, &fe) }},
		{"null", descMagic, 0, 5000, 1, func(err error) bool { return errors.As(err, &fe) }},
		{"wraps", descMagic, 1<<64 - 100, 5000, 1, func(err error) bool { return errors.As(err, &fe) }},
		{"kernel", descMagic, 0xffff_8000_0000_0000, 5000, 1, func(err error) bool { return errors.Is(err, unix.EFAULT) }},
		{"no access", descMagic, addrOf(noAccess), 5000, 1, func(err error) bool { return errors.Is(err, unix.EFAULT) }},
	}
	in, out := anonRing(t, MinCapacity), anonRing(t, MinCapacity)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := descFrame(5000, tc.magic, tc.addr, tc.length, tc.ticket)
			in.reset(0, uint64(len(f)))
			in.fill(0, f)
			out.reset(0, 0)
			c := descConn(t, in, out)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			buf := make([]byte, 5000)
			err := c.Recv(ctx, fuzzWant, buf)
			if !tc.check(err) {
				t.Fatalf("Recv = %v", err)
			}
			if err == nil {
				if string(buf) != string(src) {
					t.Fatal("payload differs")
				}
				if in.done.Load() != 1 {
					t.Fatalf("completion count %d, want 1", in.done.Load())
				}
			} else if in.done.Load() != 0 {
				t.Fatal("a failed transfer was reported complete")
			}
		})
	}
}

// A completion count outside [last seen, tickets sent] is a corrupt ring.
func TestCorruptDone(t *testing.T) {
	for _, bogus := range []uint64{2, 1 << 40, 1<<64 - 1} {
		in, out := anonRing(t, MinCapacity), anonRing(t, MinCapacity)
		in.reset(0, 0)
		out.reset(0, 0)
		c := descConn(t, in, out)
		go func() {
			time.Sleep(10 * time.Millisecond)
			out.done.Store(bogus)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Send(ctx, fuzzWant, make([]byte, 100))
		cancel()
		var fe *transport.FrameError
		if !errors.As(err, &fe) {
			t.Fatalf("Send with completion count %d = %v, want FrameError", bogus, err)
		}
		if out.prodClosed.Load() == 0 {
			t.Fatal("a failed Send by descriptor left its end open")
		}
	}
}

// FuzzRecvDescriptor receives a well-formed header followed by an
// arbitrary descriptor. Recv must fail or deliver, never panic or hang;
// it delivers only a descriptor with the right magic, length and ticket.
// The descriptor names no shared buffer (region 0), the shared buffer the
// payload lies in (1: then the payload is copied from a mapping of it), or
// an arbitrary one (2: id, base and descriptor fuzzed, through this
// process's pidfd standing for the peer's).
func FuzzRecvDescriptor(f *testing.F) {
	f.Add(descMagic, uint64(0), uint64(100), uint64(1), true, uint16(100), uint8(0), uint64(0), uint64(0), uint64(0))
	f.Add(descMagic, uint64(5), uint64(100), uint64(1), true, uint16(100), uint8(1), uint64(0), uint64(0), uint64(0))
	f.Add(descMagic, uint64(0), uint64(100), uint64(1), false, uint16(100), uint8(0), uint64(0), uint64(0), uint64(0))
	f.Add(descMagic, uint64(1<<47), uint64(100), uint64(1), false, uint16(100), uint8(0), uint64(0), uint64(0), uint64(0))
	f.Add(descMagic, uint64(1<<64-1), uint64(100), uint64(1), false, uint16(100), uint8(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0), true, uint16(16), uint8(0), uint64(0), uint64(0), uint64(0))
	f.Add(descMagic, uint64(0), uint64(1<<20), uint64(7), true, uint16(1<<15), uint8(0), uint64(0), uint64(0), uint64(0))
	f.Add(descMagic, uint64(3), uint64(100), uint64(1), true, uint16(100), uint8(2), uint64(1), uint64(1<<30), uint64(2))
	f.Add(descMagic, uint64(3), uint64(100), uint64(1), true, uint16(100), uint8(2), uint64(1<<63), uint64(0), uint64(1<<40))
	src, err := hugemem.Alloc(1<<16 + 64)
	if err != nil {
		f.Fatal(err)
	}
	defer hugemem.Free(src)
	for i := range src {
		src[i] = byte(i)
	}
	region, ok := hugemem.Shared(uintptr(addrOf(src)), len(src))
	if !ok {
		f.Fatal("the source buffer is not shared")
	}
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		f.Fatal(err)
	}
	defer unix.Close(pidfd)
	in, out := anonRing(f, MinCapacity), anonRing(f, MinCapacity)
	buf := make([]byte, 1<<16)
	f.Fuzz(func(t *testing.T, magic, addr, length, ticket uint64, real bool, n uint16, mode uint8, id, base, fd uint64) {
		if n < 16 {
			n = 16 // below the threshold the frame goes through the ring
		}
		if real {
			addr = addrOf(src) + addr%64
		}
		fr := descFrame(int(n), magic, addr, length, ticket)
		d := fr[transport.HeaderSize:]
		switch mode % 3 {
		case 1:
			id, base, fd = region.ID, uint64(region.Base), uint64(region.FD)
		case 0:
			id, base, fd = 0, 0, 0
		}
		putU64(d[32:], id)
		putU64(d[40:], base)
		putU64(d[48:], fd)
		putU64(d[56:], hugemem.Released())
		in.reset(0, uint64(len(fr)))
		in.fill(0, fr)
		out.reset(0, 0)
		c := descConn(t, in, out)
		c.reader.pidfd = int32(pidfd)
		c.regions = &peerRegions{}
		defer c.regions.unmapAll()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := c.Recv(ctx, fuzzWant, buf[:n])
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("Recv waited on a complete frame")
		}
		if err == nil {
			if magic != descMagic || length != uint64(n) || ticket != 1 {
				t.Fatalf("Recv accepted descriptor magic %#x length %d ticket %d for %d bytes", magic, length, ticket, n)
			}
			if real && string(buf[:n]) != string(src[addr-addrOf(src):][:n]) {
				t.Fatal("payload differs from the buffer described")
			}
			if real && mode%3 == 1 && c.regions.mapped != 1 {
				t.Fatal("a payload in a shared buffer was not copied from a mapping of it")
			}
		}
	})
}

func TestProbePeer(t *testing.T) {
	p, err := newProbe()
	if err != nil {
		t.Fatal(err)
	}
	defer p.release()
	r, err := probePeer(uint32(os.Getpid()), p.addr(), p.pattern[:])
	if err != nil {
		t.Fatalf("probing this process: %v", err)
	}
	r.close()

	wrong := p.pattern
	wrong[0]++
	if _, err := probePeer(uint32(os.Getpid()), p.addr(), wrong[:]); err == nil {
		t.Fatal("probe accepted a different pattern")
	}
	if _, err := probePeer(uint32(os.Getpid()), 4096, p.pattern[:]); err == nil {
		t.Fatal("probe accepted an unmapped address")
	}

	// Another process does not hold the probe at that address, and one
	// that is gone cannot be read at all.
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	if r, err := probePeer(uint32(cmd.Process.Pid), p.addr(), p.pattern[:]); err == nil {
		r.close()
		t.Fatal("probe of an unrelated process succeeded")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if r, err := probePeer(uint32(cmd.Process.Pid), p.addr(), p.pattern[:]); err == nil {
		r.close()
		t.Fatal("probe of a dead process succeeded")
	}
}

// TestLentFlagRejected: a frame flagged as lent is refused where it cannot
// be one: read in place (below any direction's threshold), or on a
// direction that lends nothing.
func TestLentFlagRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		cma  cmaSetup
	}{
		{"small frame", 100, cmaSetup{in: true, inMin: 4096, reader: cmaReader{pid: os.Getpid(), pidfd: -1}}},
		{"no lending", 5000, cmaSetup{}},
		{"below threshold", 5000, cmaSetup{in: true, inMin: 8192, reader: cmaReader{pid: os.Getpid(), pidfd: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out := anonRing(t, MinCapacity), anonRing(t, MinCapacity)
			fr := descFrame(tc.n, descMagic, 0x1000, uint64(tc.n), 1)
			in.reset(0, uint64(len(fr)))
			in.fill(0, fr)
			out.reset(0, 0)
			c := newConn(out, in, 1, nil, transport.Header{}, tc.cma)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var fe *transport.FrameError
			if err := c.Recv(ctx, fuzzWant, make([]byte, tc.n)); !errors.As(err, &fe) {
				t.Fatalf("Recv of a lent %d-byte frame = %v, want FrameError", tc.n, err)
			}
		})
	}
}
