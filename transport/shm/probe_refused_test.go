package shm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/transport"
)

// noreadMsg is the size of the message in which the noread child reports
// its connection's CMAOff.
const noreadMsg = 512

// execWithoutPtrace starts this process again without CAP_SYS_PTRACE: it
// drops the capability from the bounding set of the thread that then
// calls execve, so that the new image's capabilities, which a root
// process gets anew at execve, leave it out. A process that may not drop
// it (no CAP_SETPCAP: not privileged) has no CAP_SYS_PTRACE to lose and
// goes on as it is. It returns only on failure or where it goes on.
func execWithoutPtrace() error {
	runtime.LockOSThread() // the bounding set is the calling thread's
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_PTRACE, 0, 0, 0); err != nil {
		if errors.Is(err, unix.EPERM) {
			runtime.UnlockOSThread()
			return nil
		}
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, append(os.Environ(), envNoPtrace+"=1"))
}

// TestCMAProbeRefused: with a peer that may not read this process's
// memory (this process not dumpable, the peer without CAP_SYS_PTRACE),
// single copies stay on only in the direction that works (this process
// reads the peer's payloads; its own go through the ring), and each end
// says why they are not on both ways (CMAOff): the peer that it cannot
// read this process, with its probe's error, and this end that the peer
// cannot read it. Large frames (cmaSizes) go both ways intact across
// the connection that lends one way only.
func TestCMAProbeRefused(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	dumpable := func() {
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
			t.Error(err)
		}
	}
	defer dumpable()
	c, cmd, comm := connectChild(t, "noread", childConfig{})
	defer c.Close()
	dumpable() // both ends have probed

	if send, recv := c.CMA(); send || !recv {
		t.Errorf("CMA() = %v, %v, want false (the peer cannot read this process), true (this process can read the peer)", send, recv)
	}
	if err := c.CMAOff(); err == nil || !strings.Contains(err.Error(), "rank 1 cannot read this process's memory") {
		t.Errorf("CMAOff() = %v, want the peer named as unable to read this process", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sizesBothWays(ctx, c, sendSizes, 0, 1); err != nil {
		t.Fatal(err)
	}
	var msg [noreadMsg]byte
	if err := c.Recv(ctx, transport.Header{Kind: transport.KindControl, Comm: comm}, msg[:]); err != nil {
		t.Fatal(err)
	}
	theirs := string(bytes.TrimRight(msg[:], "\x00"))
	if !strings.Contains(theirs, "cannot read the memory of rank 0") || !strings.Contains(theirs, unix.EPERM.Error()) {
		t.Errorf("the peer's CMAOff() = %q, want that it cannot read rank 0, with its probe's error (%v)", theirs, unix.EPERM)
	}
	if err := c.Send(ctx, transport.Header{Kind: transport.KindControl, Comm: comm, Seq: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}
