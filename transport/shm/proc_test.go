package shm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

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
)

var testSecret = []byte("0123456789abcdef")

const procFrames = 300

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		if err := child(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(mode string) error {
	if mode == "exit" {
		return nil
	}
	comm, err := strconv.ParseUint(os.Getenv(envComm), 16, 64)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	c, err := shm.Connect(ctx, ctl, shm.Config{Comm: comm, Epoch: 1, Self: 1, Peer: 0, Capacity: 256 << 10})
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
	case "hang":
		if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, []byte("ready")); err != nil {
			return err
		}
		time.Sleep(time.Hour)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// startChild starts the peer process in mode and connects to it.
func startChild(t *testing.T, mode string) (*shm.Conn, *exec.Cmd, uint64) {
	t.Helper()
	comm := uint64(time.Now().UnixNano())<<8 | 0x5
	ln, err := tcp.Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envAddr+"="+ln.Addr().String(), envComm+"="+strconv.FormatUint(comm, 16))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := tcp.NewConn([]*net.TCPConn{a.Conn}, tcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := shm.Connect(ctx, ctl, shm.Config{Comm: comm, Epoch: 1, Self: 0, Peer: 1, Capacity: 256 << 10})
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

// A peer killed while this side is blocked in Recv and in Send (on a full
// ring) is noticed within a couple of seconds, and leaves no file behind.
func TestPeerKilled(t *testing.T) {
	c, cmd, comm := startChild(t, "hang")
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
		case <-time.After(2 * time.Second):
			t.Fatalf("%s still blocked 2s after the peer was killed", name)
		}
	}
	t.Logf("peer death noticed after %v", time.Since(start))
	cmd.Wait()
	assertNoFiles(t, shm.DefaultDir(), comm)
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=exit")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
