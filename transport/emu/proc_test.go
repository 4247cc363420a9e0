package emu_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/tcp"
)

// The test binary doubles as the other processes of the cross-process
// tests: with envChild set it runs child() instead of the tests.
const (
	envChild = "OCCL_EMU_TEST_CHILD"
	envAddr  = "OCCL_EMU_TEST_ADDR"
	envKey   = "OCCL_EMU_TEST_KEY"
	envDir   = "OCCL_EMU_TEST_DIR"
	envRank  = "OCCL_EMU_TEST_RANK"
	envPeer  = "OCCL_EMU_TEST_PEER"
	envSpec  = "OCCL_EMU_TEST_SPEC"
)

var testSecret = []byte("0123456789abcdef")

const (
	procComm   = 0xE1
	procChunk  = 256 << 10
	procFrames = 16
	seqGo      = 1000
	seqBye     = 1001
)

func TestMain(m *testing.M) {
	proctest.Main(m, envChild, child)
}

func child(mode string) error {
	tp, err := topo.FromSpec(os.Getenv(envSpec))
	if err != nil {
		return err
	}
	cfg := emu.Config{Key: os.Getenv(envKey), Dir: os.Getenv(envDir)}
	switch mode {
	case "hold":
		// Attach to two tables and wait to be killed.
		if _, err := emu.New(tp, cfg); err != nil {
			return err
		}
		cfg.Key += "-b"
		if _, err := emu.New(tp, cfg); err != nil {
			return err
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return nil
	case "send":
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	rank, err1 := strconv.Atoi(os.Getenv(envRank))
	peer, err2 := strconv.Atoi(os.Getenv(envPeer))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	f, err := emu.New(tp, cfg)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc, err := tcp.Dial(ctx, os.Getenv(envAddr), testSecret,
		tcp.Hello{Purpose: tcp.PurposeData, Comm: procComm, Epoch: 1, From: rank, To: peer, NStreams: 1})
	if err != nil {
		return err
	}
	inner, err := tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{})
	if err != nil {
		return err
	}
	c, err := f.Wrap(inner, rank, peer)
	if err != nil {
		inner.Close()
		return err
	}
	defer c.Close()
	var one [1]byte
	if err := c.Recv(ctx, hdr(seqGo), one[:]); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	buf := make([]byte, procChunk)
	for i := range procFrames {
		if err := c.Send(ctx, hdr(uint64(i)), buf); err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
	}
	return c.Recv(ctx, hdr(seqBye), one[:])
}

// childCommand returns a command, not yet started, that runs the test
// binary as a child process in mode.
func childCommand(mode string, env ...string) *exec.Cmd {
	return proctest.Command(append([]string{envChild + "=" + mode}, env...)...)
}

// TestCrossProcessSharedNIC: two processes playing two ranks of one
// emulated host share its NIC through the job's shared table, so together
// they move no more than the NIC's bandwidth to the other hosts.
func TestCrossProcessSharedNIC(t *testing.T) {
	const spec = "hosts=3x2,nics=host,eps=100MB/s"
	const bw = 100e6
	dir := t.TempDir()
	key := newKey()
	tp := mustSpec(t, spec)
	f := newFabric(t, tp, emu.Config{Key: key, Dir: dir})

	ln, err := tcp.Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Ranks 0 and 1 (host 0, NIC 0) are child processes; this process
	// plays rank 2 (host 1) and rank 4 (host 2), their receivers.
	peerOf := map[int]int{0: 2, 1: 4}
	var cmds []*exec.Cmd
	for _, r := range []int{0, 1} {
		cmd := childCommand("send", envAddr+"="+ln.Addr().String(), envKey+"="+key, envDir+"="+dir,
			envRank+"="+strconv.Itoa(r), envPeer+"="+strconv.Itoa(peerOf[r]), envSpec+"="+spec)
		proctest.Start(t, cmd)
		cmds = append(cmds, cmd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conns := map[int]*emu.Conn{}
	for range 2 {
		inner, hello := proctest.Accept(ctx, t, ln)
		from := hello.From
		c, err := f.Wrap(inner, peerOf[from], from)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[from] = c
	}

	var one [1]byte
	start := time.Now()
	for _, c := range conns {
		if err := c.Send(ctx, hdr(seqGo), one[:]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for r, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, procChunk)
			for i := range procFrames {
				if err := c.Recv(ctx, hdr(uint64(i)), buf); err != nil {
					errs <- fmt.Errorf("from rank %d, frame %d: %w", r, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	atLeast(t, "2 processes x 4 MiB through one shared 100 MB/s NIC", elapsed,
		2*linkTime(procChunk*procFrames, procChunk, bw))

	for _, c := range conns {
		if err := c.Send(ctx, hdr(seqBye), one[:]); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	noTableFiles(t, dir)
}

// TestStaleTables: tables of killed processes are reused by a job with the
// same key and removed by CleanStale; tables in use are left alone.
func TestStaleTables(t *testing.T) {
	const spec = "hosts=2x2"
	dir := t.TempDir()
	key := newKey()
	cmd := childCommand("hold", envKey+"="+key, envDir+"="+dir, envSpec+"="+spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	proctest.Start(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}

	// While the child lives its tables are in use: another topology
	// cannot join, and CleanStale keeps them.
	other := mustSpec(t, "hosts=3x1")
	if _, err := emu.New(other, emu.Config{Key: key, Dir: dir}); err == nil {
		t.Fatal("joined a table in use with a different topology")
	}
	if n, err := emu.CleanStale(dir); n != 0 || err != nil {
		t.Fatalf("CleanStale with a live user = %d, %v", n, err)
	}

	cmd.Process.Kill()
	cmd.Wait()
	files, _ := filepath.Glob(filepath.Join(dir, "occl-emu-*"))
	if len(files) != 2 {
		t.Fatalf("files after the kill: %v", files)
	}
	// The same key with another topology takes over the stale table.
	f, err := emu.New(other, emu.Config{Key: key, Dir: dir})
	if err != nil {
		t.Fatalf("reusing a stale table: %v", err)
	}
	if n, err := emu.CleanStale(dir); n != 1 || err != nil {
		t.Fatalf("CleanStale = %d, %v; want the other table removed", n, err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "occl-emu-*")); len(files) != 1 {
		t.Fatalf("files after CleanStale: %v", files)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	noTableFiles(t, dir)
}

// TestSharedTableLifecycle: the last user removes the table, Conns keep
// it alive after their Fabric is closed.
func TestSharedTableLifecycle(t *testing.T) {
	dir := t.TempDir()
	key := newKey()
	tp := mustSpec(t, "hosts=2x1,eps=1GB/s")
	f1, err := emu.New(tp, emu.Config{Key: key, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	f2, err := emu.New(tp, emu.Config{Key: key, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "occl-emu-*"))
	if len(files) != 1 {
		t.Fatalf("table files: %v", files)
	}
	a, b := pipe2(t, f1, f2, 0, 1, 0)
	if err := f1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f2.Close(); err != nil {
		t.Fatal(err)
	}
	// The Conns still work on the table.
	stream(t, a, b, 1<<20, 64<<10)
	if _, err := os.Stat(files[0]); err != nil {
		t.Fatalf("table removed while in use: %v", err)
	}
	a.Close()
	if _, err := os.Stat(files[0]); err != nil {
		t.Fatalf("table removed while in use: %v", err)
	}
	b.Close()
	noTableFiles(t, dir)
	if err := a.Send(context.Background(), hdr(1), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
}
