package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/internal/plain"
)

// linePeerEnv, when set in the environment, makes this program act as the
// other process of the shared-memory line tests: it holds their number of
// iterations, and the shared page is its file descriptor 3.
const linePeerEnv = "OCCL_LIMITS_LINE_PEER"

// lineTimeout bounds every wait of the line tests, so that a peer that
// died cannot hang them.
var lineTimeout = 10 * time.Second

// lineWords returns the two words of the shared page the line tests
// write: the measuring process's and the peer's, on cache lines of their
// own (256 bytes apart, beyond the adjacent-line prefetcher's pairs).
func lineWords(mem []byte) (mine, peer *atomic.Uint64) {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[0])), (*atomic.Uint64)(unsafe.Pointer(&mem[256]))
}

// awaitAtLeast polls w until it holds at least v. A wait that lasts, which
// it notices after 65536 polls, gives up after lineTimeout; the clock is
// not read before, so that it costs a short wait nothing.
func awaitAtLeast(w *atomic.Uint64, v uint64) error {
	var start time.Time
	for i := 1; w.Load() < v; i++ {
		if i&(1<<16-1) != 0 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > lineTimeout {
			return fmt.Errorf("no answer from the other process within %v", lineTimeout)
		}
	}
	return nil
}

// measureLine measures what a cache line costs between two processes
// polling shared memory, the floor of any shared-memory transport's small
// message: a ping-pong (one process writes its word, the other answers
// when it sees it: the round trip) and an exchange (both write their word,
// then wait for the other's, as the two ranks of a 2-rank all-reduce do:
// the time of one round). Words are written with plain stores (no locked
// instruction) and polled with plain loads; the peer is this program run
// again, sharing a memfd page.
func measureLine(iters int) (rtt, exch Record, err error) {
	fd, err := unix.MemfdCreate("occl-limits-line", unix.MFD_CLOEXEC)
	if err != nil {
		return rtt, exch, err
	}
	f := os.NewFile(uintptr(fd), "occl-limits-line")
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		return rtt, exch, err
	}
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return rtt, exch, err
	}
	defer unix.Munmap(mem)
	mine, peer := lineWords(mem)

	exe, err := os.Executable()
	if err != nil {
		return rtt, exch, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), linePeerEnv+"="+strconv.Itoa(iters))
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return rtt, exch, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if err != nil {
			cmd.Process.Kill()
		}
		select {
		case werr := <-done:
			if err == nil && werr != nil {
				err = fmt.Errorf("line peer: %w", werr)
			}
		case <-time.After(lineTimeout):
			cmd.Process.Kill()
			if err == nil {
				err = errors.New("line peer did not exit")
			}
		}
	}()

	// The peer announces itself with 1; every round then counts up.
	if err := awaitAtLeast(peer, 1); err != nil {
		return rtt, exch, err
	}
	n, w := uint64(iters), lineWarmup(iters)
	for i := uint64(2); i < 2+w; i++ {
		plain.Store(mine, i)
		if err := awaitAtLeast(peer, i); err != nil {
			return rtt, exch, err
		}
	}
	start := time.Now()
	for i := 2 + w; i < 2+w+n; i++ {
		plain.Store(mine, i)
		if err := awaitAtLeast(peer, i); err != nil {
			return rtt, exch, err
		}
	}
	d := time.Since(start)
	rtt = Record{Impl: "limit", What: "shm_line_rtt", Bytes: 8, US: us(d) / float64(n), Reps: iters, Peer: "process"}
	start = time.Now()
	for i := 2 + w + n; i < 2+w+2*n; i++ {
		plain.Store(mine, i)
		if err := awaitAtLeast(peer, i); err != nil {
			return rtt, exch, err
		}
	}
	d = time.Since(start)
	exch = Record{Impl: "limit", What: "shm_line_exchange", Bytes: 8, US: us(d) / float64(n), Reps: iters, Peer: "process"}
	fmt.Fprintf(os.Stderr, "shm_line_rtt %8d B    %8.3f us    (round trip of a cache line between two processes, average of %d)\n", 8, rtt.US, iters)
	fmt.Fprintf(os.Stderr, "shm_line_exch %7d B    %8.3f us    (both write, then both wait: one round, average of %d)\n", 8, exch.US, iters)
	return rtt, exch, nil
}

// lineWarmup is how many ping-pong rounds precede the measured ones, while
// the scheduler settles the two processes on their cores.
func lineWarmup(iters int) uint64 { return uint64(max(iters/4, 1000)) }

// runLinePeer is the other process of measureLine: it answers the
// ping-pong's rounds once it sees them, then writes each exchange round's
// value before waiting for the measuring process's.
func runLinePeer(itersText string) error {
	iters, err := strconv.Atoi(itersText)
	if err != nil || iters < 1 {
		return fmt.Errorf("bad iteration count %q", itersText)
	}
	mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping the shared page: %w", err)
	}
	defer unix.Munmap(mem)
	theirs, mine := lineWords(mem)
	n, w := uint64(iters), lineWarmup(iters)
	plain.Store(mine, 1)
	for i := uint64(2); i < 2+w+n; i++ {
		if err := awaitAtLeast(theirs, i); err != nil {
			return err
		}
		plain.Store(mine, i)
	}
	for i := 2 + w + n; i < 2+w+2*n; i++ {
		plain.Store(mine, i)
		if err := awaitAtLeast(theirs, i); err != nil {
			return err
		}
	}
	return nil
}
