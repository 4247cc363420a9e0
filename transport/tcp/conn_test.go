package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/transporttest"
)

var testSecret = []byte("0123456789abcdef")

// pairN connects two Conns of n streams each through a real listener on
// 127.0.0.1, with a small stripe threshold so striping is exercised.
func pairN(t testing.TB, n int) (transport.Conn, transport.Conn) {
	t.Helper()
	return pairOpts(t, n, Options{StripeMin: 64 << 10})
}

// testListener returns a listener on 127.0.0.1 and a context of 10 s for
// a test's connections, both ended when the test ends.
func testListener(t testing.TB) (*Listener, context.Context) {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ln, ctx
}

// pairOpts is pairN with the given options.
func pairOpts(t testing.TB, n int, o Options) (transport.Conn, transport.Conn) {
	t.Helper()
	ln, ctx := testListener(t)
	cfg := func(self int) MeshConfig {
		return MeshConfig{Self: self, Comm: 42, Epoch: 1, Secret: testSecret, Streams: n,
			Options: o, Listener: ln}
	}
	type res struct {
		m   map[int]*Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := Connect(ctx, cfg(1), []Endpoint{{Rank: 0}})
		ch <- res{m, err}
	}()
	m0, err := Connect(ctx, cfg(0), []Endpoint{{Rank: 1, Addr: ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return m0[1], r.m[0]
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t testing.TB) (transport.Conn, transport.Conn) { return pairN(t, 1) })
}

func TestConformanceStriped(t *testing.T) {
	transporttest.Run(t, func(t testing.TB) (transport.Conn, transport.Conn) { return pairN(t, 3) })
}

// Reads that wait in the netpoller at once (SpinReads < 0, for hosts with
// more ranks than cores) behave like polling ones.
func TestConformanceNoSpin(t *testing.T) {
	transporttest.Run(t, func(t testing.TB) (transport.Conn, transport.Conn) {
		return pairOpts(t, 1, Options{SpinReads: -1})
	})
}

// A read that does not poll (SpinReads < 0) gives its core away between
// tries while it waits for a small frame under transport.WithCoreYield,
// at most transport.CoreYieldRounds times, and then waits in the
// netpoller with its deadline; without WithCoreYield it never yields.
func TestNoSpinReadYieldsCore(t *testing.T) {
	a, b := pairOpts(t, 1, Options{SpinReads: -1})
	defer a.Close()
	defer b.Close()
	var yields int
	b.(*Conn).streams[0].coreYieldHook = func() { yields++ }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := transport.Header{Kind: transport.KindCollective, Step: 1}
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		yields bool
	}{{"core yield", transport.WithCoreYield(ctx), true}, {"plain", ctx, false}} {
		yields = 0
		sent := make(chan error, 1)
		go func() {
			time.Sleep(5 * time.Millisecond)
			sent <- a.Send(ctx, h, []byte("8 bytes."))
		}()
		buf := make([]byte, 8)
		if err := b.Recv(tc.ctx, h, buf); err != nil || string(buf) != "8 bytes." {
			t.Fatalf("%s: Recv = %q, %v", tc.name, buf, err)
		}
		if err := <-sent; err != nil {
			t.Fatalf("%s: Send: %v", tc.name, err)
		}
		if (yields > 0) != tc.yields || yields > transport.CoreYieldRounds {
			t.Errorf("%s: %d core yields, want some: %v, at most %d", tc.name, yields, tc.yields, transport.CoreYieldRounds)
		}
	}
	short, cancelShort := context.WithTimeout(transport.WithCoreYield(ctx), 30*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	err := b.Recv(short, h, make([]byte, 8))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Recv of nothing under a 30 ms deadline: %v after %v", err, time.Since(start))
	}
}

func TestWrongSecretRejected(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, ln.Addr().String(), []byte("fedcba9876543210"), Hello{Purpose: PurposeData, From: 1, To: 0, NStreams: 1})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial with a wrong secret = %v, want ErrAuth", err)
	}
	actx, acancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer acancel()
	if a, err := ln.Accept(actx); err == nil {
		a.Conn.Close()
		t.Fatal("listener handed out a connection that failed authentication")
	}
}

func TestFilterRejects(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", testSecret, func(h Hello) error {
		if h.Purpose != PurposeRendezvous {
			return errors.New("rendezvous only")
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeData, From: 1, NStreams: 1})
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial = %v, want ErrRejected", err)
	}
}

func TestGarbageClientDoesNotBlockListener(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	junk, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	junk.Write(bytes.Repeat([]byte{0xff}, 100))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go Dial(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeData, From: 3, NStreams: 1})
	a, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Conn.Close()
	if a.Hello.From != 3 {
		t.Fatalf("accepted hello from %d", a.Hello.From)
	}
}

func TestRecvMessageLimit(t *testing.T) {
	a, b := pairN(t, 1)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := transport.Header{Kind: transport.KindControl}
	if err := a.Send(ctx, h, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, msg, err := b.(*Conn).RecvMessage(ctx, 16, nil)
	if err != nil || string(msg) != "hello" || got.Kind != transport.KindControl {
		t.Fatalf("RecvMessage = %v %q %v", got, msg, err)
	}
	if err := a.Send(ctx, h, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.(*Conn).RecvMessage(ctx, 16, nil)
	var fe *transport.FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("oversized control frame: %v, want FrameError", err)
	}
}

func BenchmarkSendRecv4KiB(b *testing.B) {
	transporttest.Bench(b, func(t testing.TB) (transport.Conn, transport.Conn) { return pairN(t, 1) }, 4<<10)
}
func BenchmarkSendRecv1MiB(b *testing.B) {
	transporttest.Bench(b, func(t testing.TB) (transport.Conn, transport.Conn) { return pairN(t, 1) }, 1<<20)
}
func BenchmarkSendRecv16MiB2Streams(b *testing.B) {
	transporttest.Bench(b, func(t testing.TB) (transport.Conn, transport.Conn) { return pairN(t, 2) }, 16<<20)
}

// BenchmarkExchangeSmall is the step of a two-rank all-to-all of 8 bytes
// with one P: each side exchanges its message with the peer's
// (transport.Exchange, duplex over TCP).
func BenchmarkExchangeSmall(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	x, y := pairN(b, 1)
	benchExchange(b, x, y, 8)
}

// BenchmarkExchange512KiB is the step of a two-rank all-to-all of 1 MiB
// (a piece each way), duplex: one goroutine on each side writes and reads
// by turns.
func BenchmarkExchange512KiB(b *testing.B) {
	x, y := pairN(b, 1)
	benchExchange(b, x, y, 512<<10)
}

// BenchmarkExchange512KiBTwoGoroutines is BenchmarkExchange512KiB with a
// sending goroutine and a receiving one on each side, as a connection
// that is not duplex exchanges.
func BenchmarkExchange512KiBTwoGoroutines(b *testing.B) {
	x, y := pairN(b, 1)
	benchExchange(b, simplex{x}, simplex{y}, 512<<10)
}

// simplex hides a connection's Duplex.
type simplex struct{ transport.Conn }

// benchExchange measures transport.Exchange of n bytes each way between x
// and y, both sides at once.
func benchExchange(b *testing.B, x, y transport.Conn, n int) {
	defer x.Close()
	defer y.Close()
	ctx := context.Background()
	h := transport.Header{Kind: transport.KindCollective}
	bx, by := make([]byte, n), make([]byte, n)
	rx, ry := make([]byte, n), make([]byte, n)
	errc := make(chan error, 1)
	b.SetBytes(int64(2 * n))
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if err := transport.Exchange(ctx, y, h, by, h, ry); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < b.N; i++ {
		if err := transport.Exchange(ctx, x, h, bx, h, rx); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// countdown is a transport.Overlap that says no to its first asks (as many
// as n holds), and yes from then on.
type countdown struct{ n atomic.Int32 }

func (c *countdown) Overlapping() bool { return c.n.Add(-1) < 0 }

// marked returns ctx with a countdown Overlap that says no noes times.
func marked(ctx context.Context, noes int32) context.Context {
	o := &countdown{}
	o.n.Store(noes)
	return transport.WithOverlap(ctx, o)
}

// A read or write whose caller computes meanwhile (transport.WithOverlap)
// does not poll the socket: it waits in the netpoller at once, or as soon
// as the Overlap says so, which it asks before every poll. Reads of small
// and large frames, on one stream and striped, and writes that find the
// socket's buffer full, each with the peer 20 ms late; unmarked, they
// poll.
func TestOverlapDoesNotPoll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := transport.Header{Kind: transport.KindCollective, Step: 1}
	polls := func(c transport.Conn) int {
		n := 0
		for _, s := range c.(*Conn).streams {
			n += s.rpolls + s.wpolls
			s.rpolls, s.wpolls = 0, 0
		}
		return n
	}
	for _, tc := range []struct {
		name    string
		streams int
		bytes   int
		write   bool // the write is marked and late-read, not the read late-sent
	}{
		{"small read", 1, 8, false},
		{"large read", 1, 1 << 20, false},
		{"striped read", 3, 1 << 20, false},
		{"full socket write", 1, 64 << 20, true},
	} {
		a, b := pairN(t, tc.streams)
		for _, mc := range []struct {
			name  string
			ctx   context.Context
			polls func(n int) bool
			want  string
		}{
			{"unmarked", ctx, func(n int) bool { return n > 0 }, "some"},
			{"marked", marked(ctx, 0), func(n int) bool { return n == 0 }, "none"},
			{"marked after 5 asks", marked(ctx, 5), func(n int) bool { return n == 5 }, "5"},
		} {
			payload := bytes.Repeat([]byte{7}, tc.bytes)
			buf := make([]byte, tc.bytes)
			sctx, rctx := ctx, mc.ctx
			if tc.write {
				sctx, rctx = mc.ctx, ctx
			}
			done := make(chan error, 1)
			late := func(f func() error) {
				time.Sleep(20 * time.Millisecond)
				done <- f()
			}
			var err error
			if tc.write {
				go late(func() error { return b.Recv(rctx, h, buf) })
				err = a.Send(sctx, h, payload)
			} else {
				go late(func() error { return a.Send(sctx, h, payload) })
				err = b.Recv(rctx, h, buf)
			}
			if err2 := <-done; err == nil {
				err = err2
			}
			if err != nil || !bytes.Equal(buf, payload) {
				t.Fatalf("%s, %s: %v (payload whole: %v)", tc.name, mc.name, err, bytes.Equal(buf, payload))
			}
			c := b
			if tc.write {
				c = a
			}
			if n := polls(c); !mc.polls(n) {
				t.Errorf("%s, %s: %d polls, want %s", tc.name, mc.name, n, mc.want)
			}
			polls(a)
			polls(b)
		}
		a.Close()
		b.Close()
	}
}
