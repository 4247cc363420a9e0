package emu_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/transporttest"
)

const fastSpec = "hosts=2x1,eps=100GB/s,eps_lat=1us"

func TestConformanceLocal(t *testing.T) {
	transporttest.Run(t, func(tb testing.TB) (transport.Conn, transport.Conn) {
		f := localFabric(tb, fastSpec)
		return pipe(tb, f, 0, 1, 0)
	})
}

func TestConformanceShared(t *testing.T) {
	dir := t.TempDir()
	transporttest.Run(t, func(tb testing.TB) (transport.Conn, transport.Conn) {
		tp := mustSpec(tb, fastSpec)
		key := newKey()
		// Each end has its own Fabric on the same shared table, as two
		// processes would.
		fa := newFabric(tb, tp, emu.Config{Key: key, Dir: dir})
		fb := newFabric(tb, tp, emu.Config{Key: key, Dir: dir})
		return pipe2(tb, fa, fb, 0, 1, 0)
	})
	noTableFiles(t, dir)
}

// TestLinkBandwidth checks that a stream is never faster than its link.
func TestLinkBandwidth(t *testing.T) {
	const bw = 100e6
	f := localFabric(t, "hosts=2x1,eps=100MB/s,eps_lat=10us")
	a, b := pipe(t, f, 0, 1, 0)
	const total, chunk = 8 << 20, 512 << 10
	sent, recvd := stream(t, a, b, total, chunk)
	want := linkTime(total, chunk, bw)
	atLeast(t, "8 MiB in 512 KiB frames at 100 MB/s (sender)", sent, want)
	atLeast(t, "8 MiB in 512 KiB frames at 100 MB/s (receiver)", recvd, want+10*time.Microsecond)

	// One frame of 8 MiB: the same bound.
	a, b = pipe(t, f, 0, 1, 0)
	sent, _ = stream(t, a, b, total, total)
	atLeast(t, "one 8 MiB frame at 100 MB/s", sent, linkTime(total, total, bw))

	st := f.Stats()
	if st.Frames != 17 || st.Bytes != 2*total+17*transport.HeaderSize {
		t.Errorf("stats: %d frames, %d bytes", st.Frames, st.Bytes)
	}
}

// TestSharedSourceNIC: two ranks of a host sharing one NIC get its
// bandwidth between them, each about half while both send.
func TestSharedSourceNIC(t *testing.T) {
	const bw = 100e6
	const total, chunk = 4 << 20, 256 << 10
	// Ranks 0 and 1 on host 0 share NIC 0; their peers are on two other
	// hosts, so only the sending NIC is shared.
	f := localFabric(t, "hosts=3x2,nics=host,eps=100MB/s")
	a0, b0 := pipe(t, f, 0, 2, 0)
	a1, b1 := pipe(t, f, 1, 4, 0)
	var wg sync.WaitGroup
	var took [2]time.Duration
	start := make(chan struct{})
	for i, ends := range [][2]transport.Conn{{a0, b0}, {a1, b1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			took[i], _ = stream(t, ends[0], ends[1], total, chunk)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	atLeast(t, "2 x 4 MiB through one 100 MB/s NIC", elapsed, 2*linkTime(total, chunk, bw))
	// Fairness: with next-free booking the two senders alternate, so the
	// first to finish is not far ahead of the second. (The bound is loose:
	// it only fails if one sender was starved for tens of milliseconds.)
	first := min(took[0], took[1])
	t.Logf("senders finished after %v and %v", took[0], took[1])
	if first < 2*linkTime(total, chunk, bw)*6/10 {
		t.Errorf("first sender finished after %v, the NIC was not shared fairly", first)
	}
}

// ocsTopology is two hosts of one rank, each with an EPS NIC and an OCS
// port (NICs 2 and 3), joined by a circuit if circuit is set.
func ocsTopology(circuit bool) *topo.Topology {
	t := topo.Uniform(2, 1)
	t.Classes[topo.EPS] = topo.LinkParams{Bandwidth: 100e6, Latency: 10e-6}
	t.Classes[topo.OCS] = topo.LinkParams{Bandwidth: 400e6, Latency: 5e-6}
	t.NICs = append(t.NICs,
		topo.NIC{Host: 0, Name: "ocs0", Rail: 0, Class: topo.OCS},
		topo.NIC{Host: 1, Name: "ocs0", Rail: 0, Class: topo.OCS})
	if circuit {
		t.Circuits = []topo.Circuit{{A: 2, B: 3}}
	}
	return t
}

// TestCircuitReconfiguration: a circuit is faster than the packet network,
// and SetTopology changes the path of open connections.
func TestCircuitReconfiguration(t *testing.T) {
	const total, chunk = 4 << 20, 256 << 10
	// Without catch-up, the time the fabric holds a sender is exact.
	f := newFabric(t, ocsTopology(false), emu.Config{Local: true, CatchUp: -1})
	a, b := pipe(t, f, 0, 1, 0)

	check := func(class topo.LinkClass, bw float64) {
		t.Helper()
		p, err := f.Path(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if p.Class != class || p.Bandwidth != bw {
			t.Fatalf("path 0->1 is %s at %g B/s, want %s at %g B/s", p.Class, p.Bandwidth, class, bw)
		}
		before := f.Stats().Held
		sent, _ := stream(t, a, b, total, chunk)
		want := linkTime(total, chunk, bw)
		atLeast(t, "4 MiB over "+string(class), sent, want)
		// The time the model held the sender is not a wall-clock
		// measurement: it is exact (to a nanosecond a frame), so it shows
		// which link carried the frames.
		held := f.Stats().Held - before
		if held < want-16 || held > want+16 {
			t.Errorf("fabric held the sender %v, want %v", held, want)
		}
	}
	check(topo.EPS, 100e6)
	if err := f.SetTopology(ocsTopology(true)); err != nil {
		t.Fatal(err)
	}
	check(topo.OCS, 400e6)
	if err := f.SetTopology(ocsTopology(false)); err != nil {
		t.Fatal(err)
	}
	check(topo.EPS, 100e6)

	if err := f.SetTopology(topo.Uniform(3, 1)); err == nil {
		t.Error("SetTopology accepted a topology with other ranks")
	}
}

// TestLatency: a stream pays the latency once, a ping-pong on every trip.
func TestLatency(t *testing.T) {
	const lat = 10 * time.Millisecond
	f := localFabric(t, "hosts=2x1,eps=10GB/s,eps_lat=10ms")
	a, b := pipe(t, f, 0, 1, 0)

	const frames = 20
	before := f.Stats().Held
	sent, recvd := stream(t, a, b, frames*4096, 4096)
	atLeast(t, "a stream of 20 frames (receiver)", recvd, lat)
	// Latency is a delay, not an occupancy: the sender is held only for
	// serialisation (deterministic model time, not wall clock).
	if held := f.Stats().Held - before; held > time.Millisecond {
		t.Errorf("the sender of a stream was held %v, want serialisation time only", held)
	}
	t.Logf("sender done after %v", sent)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b = pipe(t, f, 0, 1, 0)
	const trips = 5
	errc := make(chan error, 1)
	go func() {
		var buf [1]byte
		for i := range trips {
			if err := b.Recv(ctx, hdr(uint64(i)), buf[:]); err != nil {
				errc <- err
				return
			}
			if err := b.Send(ctx, hdr(uint64(i)), buf[:]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	start := time.Now()
	var buf [1]byte
	for i := range trips {
		if err := a.Send(ctx, hdr(uint64(i)), buf[:]); err != nil {
			t.Fatal(err)
		}
		if err := a.Recv(ctx, hdr(uint64(i)), buf[:]); err != nil {
			t.Fatal(err)
		}
	}
	atLeast(t, "5 round trips with 10 ms latency", time.Since(start), 2*trips*lat)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestDeadline: a Send that cannot finish before its deadline fails at
// once, without waiting for the deadline.
func TestDeadline(t *testing.T) {
	f := localFabric(t, "hosts=2x1,eps=1MB/s")
	a, b := pipe(t, f, 0, 1, 0)
	for _, n := range []int{30e6, 9e6} { // 30 s and 9 s of link time
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := a.Send(ctx, hdr(1), make([]byte, n))
		early := ctx.Err() == nil // the deadline had not passed yet
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send of %d bytes = %v, want DeadlineExceeded", n, err)
		}
		if !early {
			t.Errorf("Send of %d bytes waited for its deadline to fail", n)
		}
	}

	// The receiving side: a frame arriving after the deadline.
	go a.Send(context.Background(), hdr(2), make([]byte, 200e3)) // 200 ms
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := b.Recv(ctx, hdr(2), make([]byte, 200e3))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv = %v, want DeadlineExceeded", err)
	}
}

// TestCancelAndClose: cancellation and Close end a Send held by the
// fabric promptly.
func TestCancelAndClose(t *testing.T) {
	f := localFabric(t, "hosts=2x1,eps=1MB/s")
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			a, b := pipe(t, f, 0, 1, 8<<20)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go b.Recv(ctx, hdr(1), make([]byte, 20e6))
			time.AfterFunc(50*time.Millisecond, func() {
				if how == "cancel" {
					cancel()
				} else {
					a.Close()
				}
			})
			start := time.Now()
			err := a.Send(ctx, hdr(1), make([]byte, 20e6)) // 20 s
			want := context.Canceled
			if how == "close" {
				want = transport.ErrClosed
			}
			if !errors.Is(err, want) {
				t.Fatalf("Send = %v, want %v", err, want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Send returned after %v of 20 s", d)
			}
		})
	}
}

// TestUnwrappedPeer: a receiver whose peer does not go through the fabric
// gets a clear mismatch error.
func TestUnwrappedPeer(t *testing.T) {
	f := localFabric(t, fastSpec)
	x, y := mem.Pipe(mem.DefaultCapacity)
	defer x.Close()
	c, err := f.Wrap(y, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.Send(ctx, hdr(1), []byte("x")); err != nil {
		t.Fatal(err)
	}
	var me *transport.MismatchError
	if err := c.Recv(ctx, hdr(1), make([]byte, 1)); !errors.As(err, &me) {
		t.Fatalf("Recv = %v, want a MismatchError", err)
	}
}

func TestWrapErrors(t *testing.T) {
	f, err := emu.New(mustSpec(t, fastSpec), emu.Config{Local: true})
	if err != nil {
		t.Fatal(err)
	}
	x, y := mem.Pipe(0)
	defer x.Close()
	defer y.Close()
	for _, p := range [][2]int{{0, 0}, {-1, 1}, {0, 2}} {
		if _, err := f.Wrap(x, p[0], p[1]); err == nil {
			t.Errorf("Wrap(%d, %d) succeeded", p[0], p[1])
		}
	}
	if _, err := emu.New(mustSpec(t, fastSpec), emu.Config{}); err == nil {
		t.Error("a shared fabric without a key was accepted")
	}
	if _, err := emu.New(nil, emu.Config{Local: true}); err == nil {
		t.Error("a nil topology was accepted")
	}
	f.Close()
	if _, err := f.Wrap(x, 0, 1); !errors.Is(err, emu.ErrFabricClosed) {
		t.Errorf("Wrap after Close = %v, want ErrFabricClosed", err)
	}
}

// TestRailOnlyUnrouted: pairs without a direct path are carried by the
// packet network and counted.
func TestRailOnlyUnrouted(t *testing.T) {
	f := localFabric(t, "hosts=2x2,rail_only=1,eps=10GB/s")
	p, err := f.Path(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.Class != topo.EPS || p.SrcNIC != 0 || p.DstNIC != 3 {
		t.Fatalf("path 0->3 = %+v", p)
	}
	a, b := pipe(t, f, 0, 3, 0)
	stream(t, a, b, 4096, 4096)
	st := f.Stats()
	if st.Unrouted != 1 {
		t.Errorf("Unrouted = %d, want 1", st.Unrouted)
	}
	// Counted on the packet network between the two ranks' NICs.
	want := map[emu.Link]int64{{Class: topo.EPS, A: 0, B: 3}: 4096 + transport.HeaderSize}
	if !maps.Equal(st.Links, want) {
		t.Errorf("Links = %v, want %v", st.Links, want)
	}
}

// TestLinkStats: every frame is counted on the link its path crosses (a
// host's HBD link, the optical circuit by its ports, the packet network by
// the ranks' NICs), in both directions, and after SetTopology on the links
// of the new circuits; Since gives what moved in between.
func TestLinkStats(t *testing.T) {
	// Three hosts of two ranks; local rank 0 drives its host's one OCS
	// port (NICs 3, 4 and 5), both ranks share the host's packet NIC
	// (NICs 0, 1 and 2). One circuit: hosts 0 and 1.
	const spec = "hosts=3x2,nics=host,ocs_ports=1,hbd=100GB/s,eps=100GB/s,ocs=100GB/s,circuits=0-1"
	tp := mustSpec(t, spec)
	if tp.NICs[3].Host != 0 || tp.NICs[5].Host != 2 || fmt.Sprint(tp.Circuits) != "[3-4]" {
		t.Fatalf("unexpected topology: NICs %+v, circuits %v", tp.NICs, tp.Circuits)
	}
	f := newFabric(t, tp, emu.Config{Local: true})
	conns := map[[2]int][2]*emu.Conn{}
	send := func(a, b, n int) {
		t.Helper()
		k := [2]int{min(a, b), max(a, b)}
		c, ok := conns[k]
		if !ok {
			x, y := pipe(t, f, k[0], k[1], 0)
			c = [2]*emu.Conn{x, y}
			conns[k] = c
		}
		if a == k[0] {
			stream(t, c[0], c[1], n, n)
		} else {
			stream(t, c[1], c[0], n, n)
		}
	}
	frame := func(n int) int64 { return int64(n + transport.HeaderSize) }
	hbd := func(h int) emu.Link { return emu.Link{Class: topo.HBD, A: h, B: h} }
	ocs := func(a, b int) emu.Link { return emu.Link{Class: topo.OCS, A: a, B: b} }
	eps := func(a, b int) emu.Link { return emu.Link{Class: topo.EPS, A: a, B: b} }

	send(0, 1, 1000) // inside host 0
	send(0, 2, 2000) // over the circuit: rank 0 and 2 drive its ports
	send(2, 0, 3000) // the other way, the same circuit
	send(1, 2, 4000) // rank 1 drives no port: packet network
	send(4, 0, 5000) // no circuit between hosts 2 and 0
	want := map[emu.Link]int64{
		hbd(0):    frame(1000),
		ocs(3, 4): frame(2000) + frame(3000),
		eps(0, 1): frame(4000),
		eps(0, 2): frame(5000),
	}
	before := f.Stats()
	if !maps.Equal(before.Links, want) {
		t.Fatalf("Links = %v, want %v", before.Links, want)
	}
	if !ocs(3, 4).Touches(4) || ocs(3, 4).Touches(5) || hbd(0).Touches(0) || !eps(0, 2).Touches(0) {
		t.Error("Touches gives the wrong ends")
	}

	// The circuit moves to hosts 0 and 2.
	next := mustSpec(t, strings.Replace(spec, "circuits=0-1", "circuits=0-2", 1))
	if err := f.SetTopology(next); err != nil {
		t.Fatal(err)
	}
	send(0, 4, 6000) // over the new circuit
	send(0, 2, 7000) // packet network now
	send(3, 2, 8000) // inside host 1
	d := f.Stats().Since(before)
	want = map[emu.Link]int64{
		ocs(3, 5): frame(6000),
		eps(0, 1): frame(7000),
		hbd(1):    frame(8000),
	}
	if !maps.Equal(d.Links, want) {
		t.Fatalf("Links since the switch = %v, want %v", d.Links, want)
	}
	if d.Frames != 3 || d.Bytes != frame(6000)+frame(7000)+frame(8000) {
		t.Errorf("since the switch: %d frames, %d bytes", d.Frames, d.Bytes)
	}
	// Counters only grow: the old circuit keeps what it carried.
	if n := f.Stats().Links[ocs(3, 4)]; n != frame(2000)+frame(3000) {
		t.Errorf("old circuit: %d bytes, want %d", n, frame(2000)+frame(3000))
	}
}

// TestNoAllocsWaiting: a Send and Recv that wait through every stage (timer,
// nanosleep, polling) do not allocate.
func TestNoAllocsWaiting(t *testing.T) {
	f := localFabric(t, "hosts=2x1,eps=100MB/s")
	a, b := pipe(t, f, 0, 1, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbuf := make([]byte, 256<<10) // 2.6 ms a frame
	rbuf := make([]byte, 256<<10)
	allocs := testing.AllocsPerRun(10, func() {
		if err := a.Send(ctx, hdr(1), sbuf); err != nil {
			t.Fatal(err)
		}
		if err := b.Recv(ctx, hdr(1), rbuf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("Send+Recv allocates %.1f times per frame", allocs)
	}
}

// TestDefaultDir: a shared fabric without a Dir lives in DefaultDir and is
// gone after Close.
func TestDefaultDir(t *testing.T) {
	key := newKey()
	f, err := emu.New(mustSpec(t, fastSpec), emu.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(emu.DefaultDir(), "occl-emu-"+key)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("table file: %v", err)
	}
	a, b := pipe(t, f, 0, 1, 0)
	stream(t, a, b, 1<<20, 64<<10)
	a.Close()
	b.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("table file after Close: %v", err)
	}
}
