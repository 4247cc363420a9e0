package shm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/shm"
	"github.com/occl/occl/transport/tcp"
)

// The test binary doubles as the peer process of the cross-process tests:
// with envChild set it runs child() instead of the tests.
const (
	envChild = "OCCL_SHM_TEST_CHILD"
	envAddr  = "OCCL_SHM_TEST_ADDR"
	envComm  = "OCCL_SHM_TEST_COMM"
	envCap   = "OCCL_SHM_TEST_CAPACITY"
	envNoCMA = "OCCL_SHM_TEST_NOCMA"
	envThr   = "OCCL_SHM_TEST_CMA_THRESHOLD"
	envSpin  = "OCCL_SHM_TEST_SPIN"
	// envNoPtrace marks a child that started itself again without
	// CAP_SYS_PTRACE (see execWithoutPtrace).
	envNoPtrace = "OCCL_SHM_TEST_NOPTRACE"
)

// childConfig is the part of the child's shm.Config that tests choose; the
// parent uses the same.
type childConfig struct {
	capacity  int
	noCMA     bool
	threshold int
	spin      time.Duration
}

func (cc childConfig) apply(c *shm.Config) {
	c.Capacity, c.NoCMA, c.CMAThreshold, c.Spin = cc.capacity, cc.noCMA, cc.threshold, cc.spin
	c.SendByDescriptor = true
}

// procCfg is the configuration of the original cross-process tests: a
// small ring, default single-copy transfers.
var procCfg = childConfig{capacity: 256 << 10}

var testSecret = []byte("0123456789abcdef")

const procFrames = 300

func TestMain(m *testing.M) {
	proctest.Main(m, envChild, child)
}

func child(mode string) error {
	if mode == "exit" {
		return nil
	}
	if mode == "noread" && os.Getenv(envNoPtrace) == "" {
		if err := execWithoutPtrace(); err != nil {
			return err
		}
	}
	comm, err := strconv.ParseUint(os.Getenv(envComm), 16, 64)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tc, err := tcp.Dial(ctx, os.Getenv(envAddr), testSecret,
		tcp.Hello{Purpose: tcp.PurposeData, Comm: comm, Epoch: 1, From: 1, To: 0, NStreams: 1})
	if err != nil {
		return err
	}
	ctl, err := tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{})
	if err != nil {
		return err
	}
	capacity, err := strconv.Atoi(os.Getenv(envCap))
	if err != nil {
		return err
	}
	threshold, err := strconv.Atoi(os.Getenv(envThr))
	if err != nil {
		return err
	}
	spin, err := time.ParseDuration(os.Getenv(envSpin))
	if err != nil {
		return err
	}
	cfg := shm.Config{Comm: comm, Epoch: 1, Self: 1, Peer: 0}
	childConfig{capacity: capacity, noCMA: os.Getenv(envNoCMA) == "1", threshold: threshold, spin: spin}.apply(&cfg)
	c, err := shm.Connect(ctx, ctl, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	switch mode {
	case "exchange":
		errs := make(chan error, 2)
		go func() { errs <- streamFrames(ctx, c, 1, procFrames, 1<<20) }()
		go func() { errs <- checkFrames(ctx, c, 0, procFrames, 1<<20) }()
		for range 2 {
			if err := <-errs; err != nil {
				return err
			}
		}
		// Wait for the parent to finish receiving before closing.
		return c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, nil)
	case "sizes", "sharedsizes":
		// Large frames both ways (sharedsizes: sent from shared
		// buffers of hugemem.Alloc), then wait for the parent.
		send := sendSizes
		if mode == "sharedsizes" {
			send = sendSizesShared
		}
		if err := sizesBothWays(ctx, c, send, 1, 0); err != nil {
			return err
		}
		return c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, nil)
	case "hang":
		if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, []byte("ready")); err != nil {
			return err
		}
		time.Sleep(time.Hour)
	case "bigsend":
		// One large frame, whose Send waits for the parent's copy
		// until the parent kills this process.
		if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, []byte("ready")); err != nil {
			return err
		}
		buf := make([]byte, bigSend)
		fillSeq(buf, 9, 0)
		if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, buf); err != nil {
			return err
		}
		time.Sleep(time.Hour)
	case "noread":
		// Large frames both ways, then what this end says of single
		// copies, to the parent, which then closes.
		if err := sizesBothWays(ctx, c, sendSizes, 1, 0); err != nil {
			return err
		}
		var off [noreadMsg]byte
		if err := c.CMAOff(); err != nil {
			copy(off[:], err.Error())
		}
		if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, off[:]); err != nil {
			return err
		}
		return c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, nil)
	case "sink":
		return sink(ctx, c, comm)
	case "echo":
		return echo(ctx, c, comm)
	case "swap":
		return swap(ctx, c, comm)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// bigSend is the size of the frame of the bigsend child: many pieces.
const bigSend = 16 * shm.PieceSize

// startChild starts the peer process in mode and connects to it, both
// sides with procCfg.
func startChild(t testing.TB, mode string) (*shm.Conn, *exec.Cmd, uint64) {
	t.Helper()
	return startChildWith(t, mode, procCfg)
}

// startChildWith starts the peer process in mode and connects to it, both
// sides configured with cc, and checks that single copies are on or off
// as cc says.
func startChildWith(t testing.TB, mode string, cc childConfig) (*shm.Conn, *exec.Cmd, uint64) {
	t.Helper()
	c, cmd, comm := connectChild(t, mode, cc)
	if send, recv := c.CMA(); send == cc.noCMA || recv == cc.noCMA {
		c.Close()
		t.Fatalf("CMA() = %v, %v with NoCMA %v", send, recv, cc.noCMA)
	}
	return c, cmd, comm
}

// connectChild starts the peer process in mode and connects to it, both
// sides configured with cc.
func connectChild(t testing.TB, mode string, cc childConfig) (*shm.Conn, *exec.Cmd, uint64) {
	t.Helper()
	comm := uint64(time.Now().UnixNano())<<8 | 0x5
	noCMA := "0"
	if cc.noCMA {
		noCMA = "1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl, cmd := proctest.StartChild(ctx, t, testSecret, envAddr, envChild+"="+mode, envComm+"="+strconv.FormatUint(comm, 16),
		envCap+"="+strconv.Itoa(cc.capacity), envNoCMA+"="+noCMA, envThr+"="+strconv.Itoa(cc.threshold),
		envSpin+"="+cc.spin.String())
	cfg := shm.Config{Comm: comm, Epoch: 1, Self: 0, Peer: 1}
	cc.apply(&cfg)
	c, err := shm.Connect(ctx, ctl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, cmd, comm
}

func TestTwoProcesses(t *testing.T) {
	c, cmd, comm := startChild(t, "exchange")
	defer c.Close()
	assertNoFiles(t, shm.DefaultDir(), comm)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- streamFrames(ctx, c, 0, procFrames, 1<<20) }()
	go func() { errs <- checkFrames(ctx, c, 1, procFrames, 1<<20) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	// The child closed its end: the next Recv reports it.
	if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, nil); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv after the child exited = %v, want ErrPeerClosed", err)
	}
}

// Large frames, sent by descriptor and read across processes, go both ways
// intact: sizes around the threshold, several MiB, not multiples of 4 KiB.
// From the heap they are read with process_vm_readv; from shared buffers
// of hugemem.Alloc, which the peer frees after each frame (so that the
// mappings go stale and are replaced), every one is copied from a mapping.
func TestTwoProcessesCMA(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		send   func(context.Context, transport.Conn, uint64, []int) error
		shared bool
	}{{"sizes", sendSizes, false}, {"sharedsizes", sendSizesShared, true}} {
		t.Run(tc.mode, func(t *testing.T) {
			c, cmd, comm := startChildWith(t, tc.mode, childConfig{})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := sizesBothWays(ctx, c, tc.send, 0, 1); err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, n := range cmaSizes(shm.DefaultCMAThreshold) {
				if tc.shared && n >= c.LentMin() {
					want++
				}
			}
			if got := shm.MappedPayloads(c); got != uint64(want) || tc.shared && want == 0 {
				t.Errorf("%d payloads copied from mappings of the peer's buffers, want %d (the peer lends from %d bytes)", got, want, c.LentMin())
			}
			if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, nil); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
		})
	}
}

// sizesBothWays sends the frames of cmaSizes with send (seed mine) while it
// receives the peer's (seed theirs), and returns the first error.
func sizesBothWays(ctx context.Context, c transport.Conn, send func(context.Context, transport.Conn, uint64, []int) error, mine, theirs uint64) error {
	sizes := cmaSizes(shm.DefaultCMAThreshold)
	errs := make(chan error, 2)
	go func() { errs <- send(ctx, c, mine, sizes) }()
	go func() { errs <- recvSizes(ctx, c, theirs, sizes) }()
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// A peer killed while this side is blocked in Recv and in Send is noticed
// within a couple of seconds, and leaves no file behind. The Send of 8 MiB
// waits for the peer to copy it (cma) or on a full ring (ring).
func TestPeerKilled(t *testing.T) {
	for _, mode := range []string{"cma", "ring"} {
		t.Run(mode, func(t *testing.T) {
			testPeerKilled(t, childConfig{capacity: 256 << 10, noCMA: mode == "ring"})
		})
	}
}

func testPeerKilled(t *testing.T, cc childConfig) {
	c, cmd, comm := startChildWith(t, "hang", cc)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buf := make([]byte, 5)
	if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, buf); err != nil {
		t.Fatal(err)
	}
	recvd := make(chan error, 1)
	go func() { recvd <- c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, buf) }()
	sent := make(chan error, 1)
	go func() {
		sent <- c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, make([]byte, 8<<20))
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-recvd:
		t.Fatalf("Recv returned before the peer died: %v", err)
	case err := <-sent:
		t.Fatalf("Send returned before the peer died: %v", err)
	default:
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"Recv": recvd, "Send": sent} {
		select {
		case err := <-ch:
			if !errors.Is(err, transport.ErrPeerClosed) {
				t.Errorf("%s after the peer was killed = %v, want ErrPeerClosed", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s still blocked 20s after the peer was killed", name)
		}
	}
	t.Logf("peer death noticed after %v", time.Since(start))
	cmd.Wait()
	assertNoFiles(t, shm.DefaultDir(), comm)
}

// A sender killed while this side copies its buffer makes Recv fail
// promptly with ErrPeerClosed, whether it dies between two pieces of the
// copy or before the copy starts.
func TestPeerKilledMidTransfer(t *testing.T) {
	for _, when := range []string{"during", "before"} {
		t.Run(when, func(t *testing.T) {
			c, cmd, comm := startChildWith(t, "bigsend", childConfig{})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, make([]byte, 5)); err != nil {
				t.Fatal(err)
			}
			kill := func() {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Error(err)
				}
				cmd.Wait() // reaped: its pid may now be reused
			}
			pieces := 0
			switch when {
			case "during":
				shm.SetPieceHook(c, func(int) {
					if pieces++; pieces == 2 {
						kill()
					}
				})
			case "before":
				// Let the descriptor arrive first.
				time.Sleep(200 * time.Millisecond)
				kill()
			}
			// The context allows 30 s: failing with ErrPeerClosed rather
			// than DeadlineExceeded shows the death itself was noticed.
			buf := make([]byte, bigSend)
			err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, buf)
			if !errors.Is(err, transport.ErrPeerClosed) {
				t.Fatalf("Recv from a sender killed %s the copy = %v, want ErrPeerClosed", when, err)
			}
			if when == "during" && pieces != 2 {
				t.Fatalf("copy went on for %d pieces after the sender died", pieces-2)
			}
			t.Logf("Recv: %v", err)
		})
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := proctest.Command(envChild + "=exit")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// sink is the child of BenchmarkTwoProcesses. It receives batches: a
// control frame with the size and number of frames, the frames, and then
// it acknowledges the batch. A batch of size 0 ends it.
func sink(ctx context.Context, c *shm.Conn, comm uint64) error {
	var ctl [16]byte
	var buf []byte
	for seq := uint64(1); ; seq++ {
		h := transport.Header{Kind: transport.KindControl, Comm: comm, Seq: seq}
		if err := c.Recv(ctx, h, ctl[:]); err != nil {
			return err
		}
		size, count := int(binary.LittleEndian.Uint64(ctl[0:])), int(binary.LittleEndian.Uint64(ctl[8:]))
		if size == 0 {
			return nil
		}
		if len(buf) < size {
			buf = make([]byte, size)
		}
		for i := range count {
			if err := c.Recv(ctx, transport.Header{Kind: transport.KindP2P, Comm: comm, Seq: uint64(i)}, buf[:size]); err != nil {
				return err
			}
		}
		if err := c.Send(ctx, h, nil); err != nil {
			return err
		}
	}
}

// echo sends every frame it receives back, until an empty one.
func echo(ctx context.Context, c *shm.Conn, comm uint64) error {
	buf := make([]byte, echoMax)
	for seq := uint64(1); ; seq++ {
		h := transport.Header{Kind: transport.KindP2P, Comm: comm, Seq: seq}
		n, err := recvAny(ctx, c, h, buf)
		if err != nil || n == 0 {
			return err
		}
		if err := c.Send(ctx, h, buf[:n]); err != nil {
			return err
		}
	}
}

// swap exchanges 8-byte frames with the parent, both sides sending first
// and then receiving, as two ranks of a small collective do: a control
// frame gives the number of rounds, 0 ends it.
func swap(ctx context.Context, c *shm.Conn, comm uint64) error {
	var ctl [16]byte
	var out, in [swapMax]byte
	for seq := uint64(1); ; seq++ {
		h := transport.Header{Kind: transport.KindControl, Comm: comm, Seq: seq}
		if err := c.Recv(ctx, h, ctl[:]); err != nil {
			return err
		}
		n, size := binary.LittleEndian.Uint64(ctl[:]), binary.LittleEndian.Uint64(ctl[8:])
		if n == 0 {
			return nil
		}
		if size > swapMax {
			return fmt.Errorf("swap: %d-byte messages, at most %d", size, swapMax)
		}
		if err := swapRounds(ctx, c, comm, n, out[:size], in[:size]); err != nil {
			return err
		}
	}
}

// swapMax is the largest message the swap child exchanges.
const swapMax = 64

// swapRounds sends out and receives into in, n times.
func swapRounds(ctx context.Context, c *shm.Conn, comm, n uint64, out, in []byte) error {
	for i := range n {
		h := transport.Header{Kind: transport.KindCollective, Comm: comm, Seq: i + 1}
		if err := c.Send(ctx, h, out); err != nil {
			return err
		}
		if err := c.Recv(ctx, h, in); err != nil {
			return err
		}
	}
	return nil
}

// echoMax is the largest frame the echo child returns.
const echoMax = 64 << 10

// recvAny receives the frame h, whose length is given by the first 4
// bytes of its payload (little endian) if it has one, into buf.
func recvAny(ctx context.Context, c *shm.Conn, h transport.Header, buf []byte) (int, error) {
	var size [4]byte
	if err := c.Recv(ctx, h, size[:]); err != nil {
		return 0, err
	}
	n := int(binary.LittleEndian.Uint32(size[:]))
	if n == 0 {
		return 0, nil
	}
	h.Step = 1
	return n, c.Recv(ctx, h, buf[:n])
}

// BenchmarkTwoProcessesLatency measures the round trip of small messages
// to another process and back through the rings, with both sides polling
// (the spin of a job that has a core per process): the floor of a small
// collective's time on shared memory. Half the round trip is reported as
// ns/op; allocations are this process's per round trip.
func BenchmarkTwoProcessesLatency(b *testing.B) {
	c, cmd, comm := startChildWith(b, "echo", childConfig{noCMA: true, spin: time.Second})
	defer c.Close()
	ctx := context.Background()
	for _, size := range []int{8, 16, 64, 1 << 10, 16 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			buf, back := make([]byte, size), make([]byte, size)
			var hdr [4]byte
			binary.LittleEndian.PutUint32(hdr[:], uint32(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				seqEcho++
				h := transport.Header{Kind: transport.KindP2P, Comm: comm, Seq: seqEcho}
				if err := c.Send(ctx, h, hdr[:]); err != nil {
					b.Fatal(err)
				}
				h.Step = 1
				if err := c.Send(ctx, h, buf); err != nil {
					b.Fatal(err)
				}
				h.Step = 0
				if err := c.Recv(ctx, h, back); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/one-way")
		})
	}
	seqEcho++
	if err := c.Send(ctx, transport.Header{Kind: transport.KindP2P, Comm: comm, Seq: seqEcho}, make([]byte, 4)); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("child: %v", err)
	}
}

// BenchmarkTwoProcessesExchange measures a round of a small exchange with
// another process through the rings, both sides sending and then
// receiving, with both polling: what two ranks of a small AllReduce or
// AllToAll spend in the transport, without the operation layer around
// it. 8 bytes travel under a full header (an 8-byte AllReduce's), 16 in a
// short frame (a 32-byte AllToAll's block at 2 ranks). ns/op is the time
// of one round (of which each side's send and receive).
func BenchmarkTwoProcessesExchange(b *testing.B) {
	for _, size := range []int{8, 16} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			c, cmd, comm := startChildWith(b, "swap", childConfig{noCMA: true, spin: time.Second})
			defer c.Close()
			ctx := context.Background()
			var seq uint64
			rounds := func(n int) error {
				seq++
				var ctl [16]byte
				binary.LittleEndian.PutUint64(ctl[:], uint64(n))
				binary.LittleEndian.PutUint64(ctl[8:], uint64(size))
				return c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: seq}, ctl[:])
			}
			out, in := make([]byte, size), make([]byte, size)
			b.ReportAllocs()
			b.ResetTimer()
			if err := rounds(b.N); err != nil {
				b.Fatal(err)
			}
			if err := swapRounds(ctx, c, comm, uint64(b.N), out, in); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := rounds(0); err != nil {
				b.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				b.Fatalf("child: %v", err)
			}
		})
	}
}

// seqEcho numbers the frames sent to the echo child.
var seqEcho uint64

// BenchmarkTwoProcesses measures one-way throughput from this process to
// another through the rings (ring) and by descriptor (cma: a threshold of
// 1 MiB), with the default configuration otherwise.
func BenchmarkTwoProcesses(b *testing.B) {
	for _, mode := range []string{"ring", "cma"} {
		b.Run(mode, func(b *testing.B) {
			c, cmd, comm := startChildWith(b, "sink", childConfig{noCMA: mode == "ring", threshold: 1 << 20})
			defer c.Close()
			ctx := context.Background()
			var seq uint64
			batch := func(size, count int) error {
				seq++
				var ctl [16]byte
				binary.LittleEndian.PutUint64(ctl[0:], uint64(size))
				binary.LittleEndian.PutUint64(ctl[8:], uint64(count))
				h := transport.Header{Kind: transport.KindControl, Comm: comm, Seq: seq}
				return c.Send(ctx, h, ctl[:])
			}
			for _, size := range []int{1 << 20, 4 << 20, 16 << 20} {
				b.Run(sizeName(size), func(b *testing.B) {
					buf := make([]byte, size)
					b.SetBytes(int64(size))
					b.ReportAllocs()
					if err := batch(size, b.N); err != nil {
						b.Fatal(err)
					}
					for i := range b.N {
						if err := c.Send(ctx, transport.Header{Kind: transport.KindP2P, Comm: comm, Seq: uint64(i)}, buf); err != nil {
							b.Fatal(err)
						}
					}
					if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: seq}, nil); err != nil {
						b.Fatal(err)
					}
				})
			}
			if err := batch(0, 0); err != nil {
				b.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				b.Fatalf("child: %v", err)
			}
		})
	}
}
