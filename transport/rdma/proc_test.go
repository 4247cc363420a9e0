package rdma_test

// Tests across real processes. The test binary re-executes itself: with
// OCCL_RDMA_TEST_WORKER set it runs a worker instead of the tests. Every
// process opens its own emulated RDMA device (OCCL_IB_EMULATE=1), and the
// devices carry the RDMA traffic between the processes: nothing is shared
// but the Unix sockets of the emulated NICs and the TCP bootstrap
// connections.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/internal/reference"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma"
	"github.com/occl/occl/transport/rdma/verbs"
	"github.com/occl/occl/transport/tcp"
)

const (
	envWorker = "OCCL_RDMA_TEST_WORKER"
	envAddr   = "OCCL_RDMA_TEST_ADDR"
	envComm   = "OCCL_RDMA_TEST_COMM"
)

var testSecret = []byte("0123456789abcdef")

func TestMain(m *testing.M) {
	if w := os.Getenv(envWorker); w != "" {
		if err := worker(w); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL", w+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func worker(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if mode == "comm" {
		return commWorker(ctx)
	}
	id, err := strconv.ParseUint(os.Getenv(envComm), 16, 64)
	if err != nil {
		return err
	}
	tc, err := tcp.Dial(ctx, os.Getenv(envAddr), testSecret,
		tcp.Hello{Purpose: tcp.PurposeData, Comm: id, Epoch: 1, From: 1, To: 0, NStreams: 1})
	if err != nil {
		return err
	}
	ctl, err := tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{})
	if err != nil {
		return err
	}
	cfg, err := rdma.ConfigFromEnv(rdma.Config{Comm: id, Epoch: 1, Self: 1, Peer: 0})
	if err != nil {
		return err
	}
	c, err := rdma.Connect(ctx, ctl, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	switch mode {
	case "exchange":
		if err := exchangeSizes(ctx, c, 1); err != nil {
			return err
		}
		// Wait for the parent's goodbye frame.
		return c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: id, Seq: 99}, nil)
	case "hang":
		if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: id}, []byte("ready")); err != nil {
			return err
		}
		time.Sleep(time.Hour)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// procSizes cover the eager path (one slot, several slots), the
// rendezvous path (several chunks) and zero-length frames.
var procSizes = []int{0, 1, 4000, 65536, 200 << 10, 256 << 10, 300 << 10, 5<<20 + 13, 0, 17}

func frameHdr(i, dir int) transport.Header {
	return transport.Header{Kind: transport.KindP2P, Comm: 0xACE, Seq: uint64(i), Step: uint32(dir), Count: uint64(i)}
}

func fill(n, i, dir int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(k*7 + i*13 + dir)
	}
	return b
}

// exchangeSizes sends procSizes to the peer and receives them from it,
// both at once; side is this process's rank.
func exchangeSizes(ctx context.Context, c *rdma.Conn, side int) error {
	errs := make(chan error, 2)
	go func() {
		for i, n := range procSizes {
			if err := c.Send(ctx, frameHdr(i, side), fill(n, i, side)); err != nil {
				errs <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		errs <- nil
	}()
	go func() {
		for i, n := range procSizes {
			buf := make([]byte, n)
			if err := c.Recv(ctx, frameHdr(i, 1-side), buf); err != nil {
				errs <- fmt.Errorf("recv %d: %w", i, err)
				return
			}
			if !bytes.Equal(buf, fill(n, i, 1-side)) {
				errs <- fmt.Errorf("frame %d of %d bytes corrupted", i, n)
				return
			}
		}
		errs <- nil
	}()
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// startChild starts a peer process in mode and connects to it.
func startChild(t *testing.T, mode string, env ...string) (*rdma.Conn, *exec.Cmd, uint64) {
	t.Helper()
	if os.Getenv("OCCL_IB_EMULATE") == "" {
		t.Setenv("OCCL_IB_EMULATE", "1")
	}
	id := uint64(time.Now().UnixNano())<<8 | 0x7
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl, cmd := proctest.StartChild(ctx, t, testSecret, envAddr,
		append([]string{envWorker + "=" + mode, envComm + "=" + strconv.FormatUint(id, 16)}, env...)...)
	cfg, err := rdma.ConfigFromEnv(rdma.Config{Comm: id, Epoch: 1, Self: 0, Peer: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := rdma.Connect(ctx, ctl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if in := c.Info(); !in.Emulated || in.PeerQPN == 0 {
		t.Fatalf("connection info %+v", in)
	}
	return c, cmd, id
}

// Two processes, each with its own emulated NIC, exchange frames of every
// size both ways over RDMA WRITE WITH IMMEDIATE (eager and rendezvous).
func TestTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"roce", nil},
		{"ib-small-window", []string{"OCCL_IB_EMULATE=ib", "OCCL_IB_SLOTS=4", "OCCL_IB_SLOT_SIZE=4K", "OCCL_IB_RNDV_CHUNK=1M"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				t.Setenv(k, v)
			}
			c, cmd, id := startChild(t, "exchange", tc.env...)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := exchangeSizes(ctx, c, 0); err != nil {
				t.Fatal(err)
			}
			if st := c.Stats(); st.RendezvousFrames == 0 || st.EagerFrames == 0 {
				t.Fatalf("stats %+v: both paths should have been used", st)
			}
			if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: id, Seq: 99}, nil); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
			if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: id}, nil); !errors.Is(err, transport.ErrPeerClosed) {
				t.Fatalf("Recv after the child exited = %v, want ErrPeerClosed", err)
			}
		})
	}
}

// A peer process killed while this side is blocked in Recv and in a
// rendezvous Send is noticed at once: its NIC's connections drop (the
// queue pair goes to ERROR) and the bootstrap connection closes.
func TestPeerKilled(t *testing.T) {
	c, cmd, id := startChild(t, "hang")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buf := make([]byte, 5)
	if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: id}, buf); err != nil || string(buf) != "ready" {
		t.Fatalf("ready: %v", err)
	}
	recvd := make(chan error, 1)
	sent := make(chan error, 1)
	go func() { recvd <- c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: id, Seq: 1}, buf) }()
	go func() {
		sent <- c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: id, Seq: 2}, make([]byte, 8<<20))
	}()
	time.Sleep(50 * time.Millisecond)
	killed := time.Now()
	cmd.Process.Kill()
	for name, ch := range map[string]chan error{"Recv": recvd, "Send": sent} {
		select {
		case err := <-ch:
			if !errors.Is(err, transport.ErrPeerClosed) {
				t.Fatalf("%s after the peer died = %v, want ErrPeerClosed", name, err)
			}
			t.Logf("%s: %v after %v", name, err, time.Since(killed).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still blocked 5s after the peer died", name)
		}
	}
}

// TestCollectives runs every collective across real processes whose
// communicator uses the RDMA transport (OCCL_TRANSPORT=rdma) over emulated
// verbs: AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll,
// AllToAllV, Gather, Scatter, Send/Recv and Barrier, with sizes on both
// sides of the eager limit, checked element by element.
func TestCollectives(t *testing.T) {
	cases := []struct {
		np  int
		env []string
	}{
		{2, nil},
		{3, nil},
		{4, []string{"OCCL_IB_SLOTS=4", "OCCL_IB_SLOT_SIZE=4K", "OCCL_CHUNK_SIZE=64K"}},
		// Rewiring opens new connections, RDMA ones too.
		{4, []string{"OCCL_TOPO=hosts=2x2,nics=host,ocs_ports=2", "OCCL_RDMA_TEST_REWIRE=1"}},
	}
	if testing.Short() {
		cases = cases[1:2]
	}
	for _, tc := range cases {
		name := fmt.Sprintf("np%d", tc.np)
		if len(tc.env) > 0 {
			name += "/" + strings.ToLower(strings.Split(tc.env[len(tc.env)-1], "=")[0])
		}
		t.Run(name, func(t *testing.T) {
			var out syncBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env := append([]string{envWorker + "=comm", "OCCL_TRANSPORT=rdma", "OCCL_IB_EMULATE=1"}, tc.env...)
			_, err := launch.Run(ctx, launch.Spec{NP: tc.np, Path: os.Args[0], Args: []string{"-test.run=^$"},
				Env: env, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if n := strings.Count(out.String(), "COLLECTIVES OK"); n != tc.np {
				t.Fatalf("%d of %d ranks passed:\n%s", n, tc.np, out.String())
			}
			t.Log(strings.TrimSpace(firstLine(out.String(), "transport")))
		})
	}
}

// TestCommRDMANoDevice: without a device and without OCCL_IB_EMULATE,
// OCCL_TRANSPORT=rdma fails Init with a clear error on every rank.
func TestCommRDMANoDevice(t *testing.T) {
	if rdmaHardware() {
		t.Skip("this machine has an RDMA device")
	}
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := launch.Run(ctx, launch.Spec{NP: 2, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{envWorker + "=comm", "OCCL_TRANSPORT=rdma", "OCCL_IB_EMULATE=0"}, Stdout: &out, Stderr: &out})
	if err == nil || !strings.Contains(out.String(), "no RDMA device") || !strings.Contains(out.String(), "OCCL_IB_EMULATE=1") {
		t.Fatalf("Init without a device: %v\n%s", err, out.String())
	}
}

func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)

// commWorker is one rank of TestCollectives.
func commWorker(ctx context.Context) error {
	c, err := comm.InitFromEnv(ctx, comm.WithTimeout(time.Minute))
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer c.Close()
	if name := c.TransportName(); !strings.Contains(strings.ToLower(name), "rdma") {
		return fmt.Errorf("transport %q, want rdma", name)
	}
	if c.Rank() == 0 {
		fmt.Println("transport", c.TransportName(), strings.Join(rdma.OpenDevices(), "; "))
	}
	for _, count := range []int{0, 1, 1000, 100 << 10} { // up to 800 KiB of int64: rendezvous
		if err := checkCollectives(ctx, c, count); err != nil {
			return fmt.Errorf("%d elements: %w", count, err)
		}
	}
	if err := checkReference(ctx, c); err != nil {
		return err
	}
	if os.Getenv("OCCL_RDMA_TEST_REWIRE") != "" {
		if err := rewire(ctx, c); err != nil {
			return err
		}
	}
	// Leave together. Without this, a rank that finishes the last
	// collective first may close while its peer has not yet reaped its own
	// last rendezvous completions, which then fail as a lost connection
	// (seen once in about a dozen runs over the emulated device; a bye that
	// follows a fully acknowledged rendezvous no longer fails it, see
	// TestRendezvousPeerClosesAfterReceiving, but the cause of the
	// remaining cases is not known).
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	fmt.Println("COLLECTIVES OK")
	return nil
}

// rewire changes the circuits of the communicator's topology twice; the
// new connections must be RDMA connections too.
func rewire(ctx context.Context, c *comm.Communicator) error {
	base := c.Topology()
	for i, circuits := range []string{"0-1", ""} {
		target, err := topo.FromSpec(base.Name + ",circuits=" + circuits)
		if err != nil {
			return err
		}
		if _, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error { return nil }}); err != nil {
			return fmt.Errorf("rewire %d: %w", i, err)
		}
		if name := c.TransportName(); !strings.Contains(strings.ToLower(name), "rdma") || strings.Contains(name, "tcp") {
			return fmt.Errorf("after rewire %d the transport is %q", i, name)
		}
		if err := checkCollectives(ctx, c, 1000); err != nil {
			return fmt.Errorf("after rewire %d: %w", i, err)
		}
	}
	if c.Epoch() != 2 {
		return fmt.Errorf("epoch %d after two rewires", c.Epoch())
	}
	return nil
}

func mismatch(what string, i int, got, want int64) error {
	return fmt.Errorf("%s: element %d is %d, want %d", what, i, got, want)
}

// checkCollectives runs every collective on count int64 elements per
// block and checks the results against closed forms.
func checkCollectives(ctx context.Context, c *comm.Communicator, count int) error {
	n, r := c.Size(), c.Rank()
	root := 1 % n
	tri := int64(n * (n + 1) / 2)
	val := func(rank, i int) int64 { return int64(rank+1) * int64(i+1) }

	in := make([]int64, count)
	for i := range in {
		in[i] = val(r, i)
	}
	out := make([]int64, count)
	if err := comm.AllReduce(ctx, c, in, out, comm.Sum); err != nil {
		return fmt.Errorf("allreduce: %w", err)
	}
	for i, x := range out {
		if want := int64(i+1) * tri; x != want {
			return mismatch("allreduce", i, x, want)
		}
	}

	bc := make([]int64, count)
	if r == root {
		copy(bc, in)
	}
	if err := comm.Broadcast(ctx, c, bc, bc, root); err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	for i, x := range bc {
		if want := val(root, i); x != want {
			return mismatch("broadcast", i, x, want)
		}
	}

	red := make([]int64, count)
	if err := comm.Reduce(ctx, c, in, red, comm.Sum, root); err != nil {
		return fmt.Errorf("reduce: %w", err)
	}
	if r == root {
		for i, x := range red {
			if want := int64(i+1) * tri; x != want {
				return mismatch("reduce", i, x, want)
			}
		}
	}

	ag := make([]int64, n*count)
	if err := comm.AllGather(ctx, c, in, ag); err != nil {
		return fmt.Errorf("allgather: %w", err)
	}
	for s := 0; s < n; s++ {
		for i := 0; i < count; i++ {
			if x, want := ag[s*count+i], val(s, i); x != want {
				return mismatch("allgather", s*count+i, x, want)
			}
		}
	}

	big := make([]int64, n*count)
	for j := range big {
		big[j] = val(r, j)
	}
	rs := make([]int64, count)
	if err := comm.ReduceScatter(ctx, c, big, rs, comm.Sum); err != nil {
		return fmt.Errorf("reducescatter: %w", err)
	}
	for i, x := range rs {
		if want := int64(r*count+i+1) * tri; x != want {
			return mismatch("reducescatter", i, x, want)
		}
	}

	// AllToAll: block j of rank s holds s*1e6 + j*1e3 + i.
	a2a := func(s, d, i int) int64 { return int64(s)*1_000_000_000 + int64(d)*1_000_000 + int64(i) }
	send := make([]int64, n*count)
	for d := 0; d < n; d++ {
		for i := 0; i < count; i++ {
			send[d*count+i] = a2a(r, d, i)
		}
	}
	recv := make([]int64, n*count)
	if err := comm.AllToAll(ctx, c, send, recv); err != nil {
		return fmt.Errorf("alltoall: %w", err)
	}
	for s := 0; s < n; s++ {
		for i := 0; i < count; i++ {
			if x, want := recv[s*count+i], a2a(s, r, i); x != want {
				return mismatch("alltoall", s*count+i, x, want)
			}
		}
	}

	// AllToAllV: rank s sends (s+d)%3*count/2+d elements to rank d.
	vc := func(s, d int) int { return (s+d)%3*count/2 + d }
	sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	var st, rt int
	for p := 0; p < n; p++ {
		sc[p], sd[p], st = vc(r, p), st, st+vc(r, p)
		rc[p], rd[p], rt = vc(p, r), rt, rt+vc(p, r)
	}
	vs, vr := make([]int64, st), make([]int64, rt)
	for p := 0; p < n; p++ {
		for i := 0; i < sc[p]; i++ {
			vs[sd[p]+i] = a2a(r, p, i)
		}
	}
	if err := comm.AllToAllV(ctx, c, vs, sc, sd, vr, rc, rd); err != nil {
		return fmt.Errorf("alltoallv: %w", err)
	}
	for p := 0; p < n; p++ {
		for i := 0; i < rc[p]; i++ {
			if x, want := vr[rd[p]+i], a2a(p, r, i); x != want {
				return mismatch("alltoallv", rd[p]+i, x, want)
			}
		}
	}

	var gat []int64
	if r == root {
		gat = make([]int64, n*count)
	}
	if err := comm.Gather(ctx, c, in, gat, root); err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	for s := 0; s < n && r == root; s++ {
		for i := 0; i < count; i++ {
			if x, want := gat[s*count+i], val(s, i); x != want {
				return mismatch("gather", s*count+i, x, want)
			}
		}
	}

	var sca []int64
	if r == root {
		sca = make([]int64, n*count)
		for d := 0; d < n; d++ {
			for i := 0; i < count; i++ {
				sca[d*count+i] = a2a(root, d, i)
			}
		}
	}
	sout := make([]int64, count)
	if err := comm.Scatter(ctx, c, sca, sout, root); err != nil {
		return fmt.Errorf("scatter: %w", err)
	}
	for i, x := range sout {
		if want := a2a(root, r, i); x != want {
			return mismatch("scatter", i, x, want)
		}
	}

	// Send/Recv around the ring, as a group (as with NCCL, a send and a
	// receive that must progress together go in one group), then a
	// plain Send and Recv between ranks 0 and 1.
	next, prev := (r+1)%n, (r+n-1)%n
	got := make([]int64, count)
	if err := c.NewGroup().Send(comm.Slice(in), next).Recv(comm.Slice(got), prev).Run(ctx); err != nil {
		return fmt.Errorf("sendrecv: %w", err)
	}
	switch r {
	case 0:
		if err := comm.Send(ctx, c, in, 1); err != nil {
			return fmt.Errorf("send: %w", err)
		}
	case 1:
		one := make([]int64, count)
		if err := comm.Recv(ctx, c, one, 0); err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		for i, x := range one {
			if want := val(0, i); x != want {
				return mismatch("recv", i, x, want)
			}
		}
	}
	for i, x := range got {
		if want := val(prev, i); x != want {
			return mismatch("sendrecv", i, x, want)
		}
	}

	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// checkReference checks floating-point reductions against the
// independent reference of internal/reference.
func checkReference(ctx context.Context, c *comm.Communicator) error {
	for _, dt := range []comm.DType{comm.Float32, comm.BFloat16, comm.Float64} {
		for _, op := range []comm.Op{comm.Sum, comm.Max, comm.Avg} {
			const n = 70000
			in := reference.Input(dt, op, c.Rank(), 0, n)
			out := make([]byte, len(in))
			if err := c.AllReduce(ctx, comm.Raw(in, dt), comm.Raw(out, dt), op); err != nil {
				return fmt.Errorf("allreduce %v %v: %w", dt, op, err)
			}
			if want := reference.Reduced(dt, op, c.Size(), 0, n); !bytes.Equal(out, want) {
				return fmt.Errorf("allreduce %v %v: result differs from the reference", dt, op)
			}
		}
	}
	return nil
}

func rdmaHardware() bool {
	if !verbs.Compiled {
		return false
	}
	d, err := verbs.Devices()
	return err == nil && len(d) > 0
}
