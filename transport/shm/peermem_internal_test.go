package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/transport"
)

// sharedBuf allocates a shared buffer of n bytes filled with a pattern and
// returns it with its region.
func sharedBuf(t *testing.T, n int, seed byte) ([]byte, hugemem.Region) {
	t.Helper()
	b, err := hugemem.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hugemem.Free(b) })
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	r, ok := hugemem.Shared(uintptr(addrOf(b)), n)
	if !ok {
		t.Fatalf("a buffer of %d bytes of hugemem.Alloc is not shared", n)
	}
	return b, r
}

// selfPidfd opens a pidfd of this process, which stands for the peer.
func selfPidfd(t *testing.T) int32 {
	t.Helper()
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return int32(fd)
}

// The receiver maps a shared buffer once, through the peer's pidfd, and
// reads the buffer itself (later writes show); a payload outside the
// buffer or a buffer at another address is a corrupt descriptor; a changed
// release count drops every mapping; no more than peerMaps stay mapped.
func TestPeerRegions(t *testing.T) {
	pidfd := selfPidfd(t)
	b, r := sharedBuf(t, 1<<20, 1)
	base := uint64(r.Base)
	p := &peerRegions{}
	rel := hugemem.Released()
	src, err := p.source(pidfd, r.ID, base, uint64(r.FD), rel, base+100, 5000)
	if err != nil || !bytes.Equal(src, b[100:5100]) {
		t.Fatalf("source = %d bytes, %v; want the buffer's bytes 100-5100", len(src), err)
	}
	if &src[0] == &b[100] {
		t.Fatal("source returned the buffer itself, not a mapping of its file")
	}
	b[200] ^= 0xff
	src2, err := p.source(pidfd, r.ID, base, uint64(r.FD), rel, base+200, 1)
	if err != nil || len(p.maps) != 1 || src2[0] != b[200] {
		t.Fatalf("second source: %v, %d mappings, byte %d want %d", err, len(p.maps), src2[0], b[200])
	}
	if p.mapped != 2 {
		t.Fatalf("mapped = %d, want 2", p.mapped)
	}
	var fe *transport.FrameError
	for _, bad := range []struct {
		name       string
		base, addr uint64
		n          uint64
	}{
		{"past the end", base, base + 1<<20 - 10, 11},
		{"before the start", base, base - 1, 10},
		{"huge", base, base + 10, 1<<64 - 5},
		{"moved", base + 4096, base + 4096, 10},
	} {
		if _, err := p.source(pidfd, r.ID, bad.base, uint64(r.FD), rel, bad.addr, bad.n); !errors.As(err, &fe) {
			t.Errorf("%s: source = %v, want a FrameError", bad.name, err)
		}
	}
	_, r2 := sharedBuf(t, hugemem.SharedMin, 2)
	if _, err := p.source(pidfd, r2.ID, uint64(r2.Base), uint64(r2.FD), rel, uint64(r2.Base), 10); err != nil || len(p.maps) != 2 {
		t.Fatalf("a second buffer: %v, %d mappings", err, len(p.maps))
	}
	if _, err := p.source(pidfd, r.ID, base, uint64(r.FD), rel+1, base, 10); err != nil || len(p.maps) != 1 || p.released != rel+1 {
		t.Fatalf("after a release: %v, %d mappings (want 1), released %d", err, len(p.maps), p.released)
	}
	for i := range peerMaps + 3 {
		bi, ri := sharedBuf(t, hugemem.SharedMin, byte(i))
		src, err := p.source(pidfd, ri.ID, uint64(ri.Base), uint64(ri.FD), rel+1, uint64(ri.Base)+7, 9)
		if err != nil || !bytes.Equal(src, bi[7:16]) {
			t.Fatalf("buffer %d: %v", i, err)
		}
	}
	if len(p.maps) != peerMaps {
		t.Fatalf("%d mappings, want at most %d", len(p.maps), peerMaps)
	}
	if src, err := p.source(pidfd, 0, base, uint64(r.FD), rel+1, base, 10); src != nil || err != nil {
		t.Fatalf("no buffer named: source = %v, %v", src, err)
	}
	p.unmapAll()
}

// A file that is not sealed against shrinking, a descriptor that is not
// open and a closed pidfd turn mapping off: the payload comes by
// process_vm_readv (source returns nil), now and later.
func TestPeerRegionsRefused(t *testing.T) {
	pidfd := selfPidfd(t)
	unsealed, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(unsealed)
	if err := unix.Ftruncate(unsealed, 1<<16); err != nil {
		t.Fatal(err)
	}
	_, r := sharedBuf(t, hugemem.SharedMin, 0)
	for _, tc := range []struct {
		name  string
		pidfd int32
		fd    uint64
	}{
		{"unsealed", pidfd, uint64(unsealed)},
		{"not open", pidfd, 1 << 20},
		{"descriptor out of range", pidfd, 1 << 40},
		{"no pidfd", -1, uint64(r.FD)},
	} {
		p := &peerRegions{}
		src, err := p.source(tc.pidfd, 9, 1<<30, tc.fd, 0, 1<<30, 10)
		if src != nil || err != nil || !p.off {
			t.Errorf("%s: source = %v, %v, off %v; want nil, nil, off", tc.name, src, err, p.off)
		}
		if src, err := p.source(pidfd, r.ID, uint64(r.Base), uint64(r.FD), 0, uint64(r.Base), 10); src != nil || err != nil {
			t.Errorf("%s: a later source = %v, %v; want nil, nil", tc.name, src, err)
		}
	}
}

// retire releases the peer's buffers at once: a slice source returned
// before stays readable and reads zeros (the mapping is replaced, not
// removed, for a Recv still copying from it), the peer's buffer keeps its
// bytes, and later payloads are not mapped.
func TestPeerRegionsRetire(t *testing.T) {
	b, r := sharedBuf(t, 1<<20, 3)
	pidfd := selfPidfd(t)
	source := func(p *peerRegions) ([]byte, error) {
		return p.source(pidfd, r.ID, uint64(r.Base), uint64(r.FD), hugemem.Released(), uint64(r.Base), 1<<20)
	}
	p := &peerRegions{}
	src, err := source(p)
	if err != nil || !bytes.Equal(src, b) {
		t.Fatalf("source = %d bytes, %v; want the buffer's", len(src), err)
	}
	p.retire()
	if !bytes.Equal(src, make([]byte, len(src))) {
		t.Fatal("after retire, the mapping still shows the peer's buffer")
	}
	for i := range b {
		if b[i] != byte(i*7)+3 {
			t.Fatalf("after retire, the peer's buffer changed at byte %d", i)
		}
	}
	if line := mapsLine(t, src); len(strings.Fields(line)) != 5 {
		t.Fatalf("after retire, the mapping is %q, want anonymous memory", line)
	}
	if again, err := source(p); again != nil || err != nil {
		t.Fatalf("source after retire = %d bytes, %v; want nil, nil", len(again), err)
	}
	p.unmapAll()
	var nilRegions *peerRegions
	nilRegions.retire() // a connection that maps nothing
}

// mapsLine returns the line of /proc/self/maps of the mapping that starts
// at b.
func mapsLine(t *testing.T, b []byte) string {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasPrefix(line, fmt.Sprintf("%x-", addrOf(b))) {
			return line
		}
	}
	t.Fatalf("no mapping starts at %#x", addrOf(b))
	return ""
}

// Close retires the mappings of the peer's buffers (see retire): a
// connection that copied a lent payload from a mapping holds it no more.
func TestCloseRetiresPeerRegions(t *testing.T) {
	b, r := sharedBuf(t, 1<<20, 5)
	pidfd := selfPidfd(t)
	in, out := anonRing(t, MinCapacity), anonRing(t, MinCapacity)
	const n = 4096
	fr := descFrame(n, descMagic, uint64(r.Base)+64, n, 1)
	d := fr[transport.HeaderSize:]
	putU64(d[32:], r.ID)
	putU64(d[40:], uint64(r.Base))
	putU64(d[48:], uint64(r.FD))
	putU64(d[56:], hugemem.Released())
	in.reset(0, uint64(len(fr)))
	in.fill(0, fr)
	out.reset(0, 0)
	c := descConn(t, in, out)
	c.reader.pidfd = pidfd
	c.regions = &peerRegions{}
	defer c.regions.unmapAll()
	buf := make([]byte, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Recv(ctx, fuzzWant, buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, b[64:64+n]) || c.regions.mapped != 1 || len(c.regions.maps) != 1 {
		t.Fatalf("the lent payload was not copied from a mapping (%d copied, %d mappings)", c.regions.mapped, len(c.regions.maps))
	}
	mapped := c.regions.maps[0].mem
	if line := mapsLine(t, mapped); len(strings.Fields(line)) < 6 {
		t.Fatalf("before Close, the mapping is %q, want the peer's buffer's file", line)
	}
	c.Close()
	if line := mapsLine(t, mapped); len(strings.Fields(line)) != 5 {
		t.Fatalf("after Close, the mapping is %q, want anonymous memory", line)
	}
}
