package emu

import (
	"testing"

	"github.com/occl/occl/topo"
)

// These tests drive the booking model with made-up times, so they check
// its arithmetic exactly, independent of the machine's timing.

func modelConn(t *testing.T, f *Fabric, self, peer int) *Conn {
	t.Helper()
	c := newConn(f, nil, self, peer)
	c.resolve(f.view.Load())
	return c
}

// sharedNICs is three hosts of two ranks, one 100 MB/s NIC per host.
const sharedNICs = "hosts=3x2,nics=host,eps=100MB/s,hbd=1GB/s"

func specTopology(t *testing.T, spec string) *topo.Topology {
	t.Helper()
	tp, err := topo.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func modelFabric(t *testing.T, tp *topo.Topology) *Fabric {
	t.Helper()
	f, err := New(tp, Config{Local: true})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestModelSharedNIC(t *testing.T) {
	tp := specTopology(t, sharedNICs)
	f := modelFabric(t, tp)
	const T = 1_000_000
	const n = 1000 // 10 µs at 100 MB/s
	c02 := modelConn(t, f, 0, 2)
	c14 := modelConn(t, f, 1, 4)
	steps := []struct {
		name string
		c    *Conn
		t0   int64
		want int64
	}{
		{"first frame on NIC 0", c02, T, T + 10_000},
		{"second rank on NIC 0 queues behind it", c14, T, T + 20_000},
		{"first rank again, after the second", c02, T + 10_000, T + 30_000},
		{"second rank again", c14, T + 20_000, T + 40_000},
		{"idle NIC later: no queue", c02, T + 100_000, T + 110_000},
	}
	for _, s := range steps {
		if p := s.c.res.predict(s.t0, n); p != s.want {
			t.Errorf("%s: predict = %d, want %d", s.name, p-T, s.want-T)
		}
		if got := s.c.res.book(s.t0, n); got != s.want {
			t.Errorf("%s: end = %d, want %d", s.name, got-T, s.want-T)
		}
	}
	// The intra-host link does not touch the NIC.
	if got := modelConn(t, f, 0, 1).res.book(T, n); got != T+1_000 {
		t.Errorf("HBD frame ends at %d, want 1000", got-T)
	}
	// Incast: ranks of two hosts sending to host 0 share its receive side.
	c20, c40 := modelConn(t, f, 2, 0), modelConn(t, f, 4, 0)
	if a, b := c20.res.book(T, n), c40.res.book(T, n); a != T+10_000 || b != T+20_000 {
		t.Errorf("incast frames end at %d and %d, want 10000 and 20000", a-T, b-T)
	}
	if c02.res.lat != 10_000 {
		t.Errorf("EPS latency %d ns, want the class default 10000", c02.res.lat)
	}
}

// TestModelPackets: a NIC side serves packet-sized frames ahead of larger
// ones, as a packet NIC interleaves flows, without giving them more than its
// bandwidth.
func TestModelPackets(t *testing.T) {
	tp := specTopology(t, sharedNICs)
	f := modelFabric(t, tp)
	const T = 1_000_000
	const pkt = PacketSize * 10 // one packet at 100 MB/s, in ns
	c02, c14, c05 := modelConn(t, f, 0, 2), modelConn(t, f, 1, 4), modelConn(t, f, 0, 5)
	steps := []struct {
		name string
		c    *Conn
		t0   int64
		n    int
		want int64
	}{
		{"a 1 MB frame holds host 0's NIC for 10 ms", c02, T, 1_000_000, T + 10_000_000},
		{"a small frame of another rank waits one packet, not 9 ms", c14, T + 1_000_000, 1000, T + 1_000_000 + pkt + 10_000},
		{"the next small frame queues behind it", c05, T + 1_000_000, 1000, T + 1_000_000 + pkt + 20_000},
		{"the largest packet-sized frame is served as one", c05, T + 2_000_000, PacketSize, T + 2_000_000 + 2*pkt},
		{"a larger frame waits for all, pushed back by the packets", c14, T + 1_000_000, PacketSize + 1, T + 10_000_000 + 20_000 + pkt + pkt + 10},
	}
	for _, s := range steps {
		if p := s.c.res.predict(s.t0, s.n); p != s.want {
			t.Errorf("%s: predict = %d, want %d", s.name, p-T, s.want-T)
		}
		if got := s.c.res.book(s.t0, s.n); got != s.want {
			t.Errorf("%s: end = %d, want %d", s.name, got-T, s.want-T)
		}
	}
	// Back-to-back small frames of two ranks through one NIC take its
	// bandwidth between them, as larger ones do.
	g := modelFabric(t, tp)
	a, b := modelConn(t, g, 0, 2), modelConn(t, g, 1, 4)
	var end int64
	for i := 0; i < 100; i++ {
		end = max(a.res.book(T, 1000), b.res.book(T, 1000))
	}
	if end != T+200*10_000 {
		t.Errorf("200 frames of 1000 bytes end at %d, want %d", end-T, 200*10_000)
	}
}

func TestModelRates(t *testing.T) {
	// Host 0's NIC is slower than the class; the others run at the class
	// speed.
	tp, err := topo.FromSpec("hosts=3x2,nics=host,eps=100MB/s")
	if err != nil {
		t.Fatal(err)
	}
	tp.NICs[0].Bandwidth = 50e6
	f := modelFabric(t, tp)
	const T, n = 1_000_000, 1000
	steps := []struct {
		name       string
		self, peer int
		want       int64
	}{
		// The path runs at its slowest NIC, 50 MB/s; NIC 0 sends for
		// 20 µs, NIC 1 receives for 10 µs (its own speed).
		{"host 0 to host 1", 0, 2, T + 20_000},
		// NICs are full duplex: the other direction is not delayed.
		{"host 1 to host 0", 3, 0, T + 20_000},
		// Host 2 to host 1 queues behind the 10 µs NIC 1 spent
		// receiving the first frame, not the 20 µs the path took.
		{"host 2 to host 1", 4, 2, T + 20_000},
		// Host 0's sending side is busy until 20 µs.
		{"host 0 to host 1 again", 1, 3, T + 40_000},
	}
	for _, s := range steps {
		if got := modelConn(t, f, s.self, s.peer).res.book(T, n); got != s.want {
			t.Errorf("%s: frame ends at %d, want %d", s.name, got-T, s.want-T)
		}
	}
}

func TestModelCircuit(t *testing.T) {
	tp := topo.Uniform(2, 2)
	tp.Classes[topo.EPS] = topo.LinkParams{Bandwidth: 100e6, Latency: 10e-6}
	tp.Classes[topo.OCS] = topo.LinkParams{Bandwidth: 400e6, Latency: 5e-6}
	tp.NICs = append(tp.NICs,
		topo.NIC{Host: 0, Class: topo.OCS},
		topo.NIC{Host: 1, Class: topo.OCS})
	f := modelFabric(t, tp)
	const T, n = 1_000_000, 4000
	c02 := modelConn(t, f, 0, 2)
	if got := c02.res.book(T, n); got != T+40_000 {
		t.Errorf("EPS frame ends at %d, want 40000", got-T)
	}
	tp.Circuits = []topo.Circuit{{A: 4, B: 5, Bandwidth: 800e6}}
	if err := f.SetTopology(tp); err != nil {
		t.Fatal(err)
	}
	// Both ranks of host 0 reach host 1 over the one circuit and share
	// its port; the circuit's own bandwidth overrides the class.
	c02.resolve(f.view.Load())
	c13 := modelConn(t, f, 1, 3)
	if c02.res.lat != 5_000 {
		t.Errorf("OCS latency %d ns, want 5000", c02.res.lat)
	}
	// (Later than the EPS frame, which still holds the pair's link.)
	const T2 = T + 100_000
	if a, b := c02.res.book(T2, n), c13.res.book(T2, n); a != T2+5_000 || b != T2+10_000 {
		t.Errorf("circuit frames end at %d and %d, want 5000 and 10000", a-T2, b-T2)
	}
}
