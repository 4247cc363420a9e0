// Command limits measures what this machine can do at best, so that the
// collective benchmarks (occl-bench, Gloo, Open MPI) can be read against it:
//
//   - memcpy: copy() of a 64 MiB buffer into another, best of several runs.
//     GB/s counts the bytes copied (not read + written), as memcpy
//     benchmarks usually do; GB = 1e9 bytes.
//   - tcp_loopback: one TCP stream over 127.0.0.1 between two processes
//     (this program re-executes itself as the peer), large writes, GB/s of
//     payload, best of several runs.
//   - tcp_rtt_8B: an 8-byte ping-pong over the same kind of connection
//     (TCP_NODELAY), average round-trip time in microseconds.
//   - shm_line_rtt and shm_line_exchange: a word on a cache line of its own
//     passed between two processes polling shared memory, as a ping-pong
//     (round trip) and as an exchange (both write, then both wait: the
//     floor of a 2-rank all-reduce of a few bytes over shared memory),
//     average time in microseconds.
//
// Each result is one JSON line on stdout:
//
//	{"impl":"limit","what":"memcpy","bytes":67108864,"GBps":9.1,"us":7375.2}
//
// "us" is the time of one copy for memcpy, the time of the whole transfer for
// tcp_loopback, the round-trip time for tcp_rtt_8B and shm_line_rtt and the
// time of one round for shm_line_exchange (the last three have a null
// GBps).
// A human summary goes to stderr.
//
// Usage:
//
//	go run ./bench/peers/limits [-memcpy-mib 64] [-reps 5] [-tcp-mib 1024]
//	    [-chunk-kib 1024] [-rtt-iters 20000] [-line-iters 200000]
//	    [-peer process|goroutine] [-only line]
//
// -only line measures the shared-memory line alone, in tens of
// milliseconds: compare.py's --steady asks it, before each command of the
// smallest sizes, how fast the machine passes a line between processes
// at that moment.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"time"
)

// Record is one line of output.
type Record struct {
	Impl  string   `json:"impl"`
	What  string   `json:"what"`
	Bytes int64    `json:"bytes"`
	GBps  *float64 `json:"GBps"`
	US    float64  `json:"us"`
	Reps  int      `json:"reps"`
	Peer  string   `json:"peer,omitempty"`
}

// peerEnv, when set in the environment, makes this program act as the
// remote end of the TCP tests: it connects to the address it holds.
const peerEnv = "OCCL_LIMITS_PEER_ADDR"

// Commands the measuring side sends to the peer before each test.
const (
	cmdSink byte = 's' // read N bytes, then answer one byte
	cmdSwap byte = 'x' // send N bytes while reading N bytes, then answer one byte
	cmdEcho byte = 'e' // echo N messages of 8 bytes
	cmdQuit byte = 'q'
)

func main() {
	if addr := os.Getenv(peerEnv); addr != "" {
		if err := runPeer(addr); err != nil {
			fmt.Fprintln(os.Stderr, "limits peer:", err)
			os.Exit(1)
		}
		return
	}
	if iters := os.Getenv(linePeerEnv); iters != "" {
		if err := runLinePeer(iters); err != nil {
			fmt.Fprintln(os.Stderr, "limits line peer:", err)
			os.Exit(1)
		}
		return
	}

	memMiB := flag.Int("memcpy-mib", 64, "memcpy buffer size in MiB")
	reps := flag.Int("reps", 5, "repetitions of each bandwidth test (best is reported)")
	tcpMiB := flag.Int("tcp-mib", 1024, "bytes sent per TCP bandwidth repetition, in MiB")
	chunkKiB := flag.Int("chunk-kib", 1024, "size of each TCP write, in KiB")
	rttIters := flag.Int("rtt-iters", 20000, "ping-pong round trips for the latency test")
	lineIters := flag.Int("line-iters", 200000, "rounds of each shared-memory line test")
	peerMode := flag.String("peer", "process", "where the TCP peer runs: process or goroutine")
	only := flag.String("only", "", "measure only this: line (the shared-memory line tests)")
	flag.Parse()
	if *only != "" && *only != "line" {
		fmt.Fprintln(os.Stderr, "limits: -only takes line")
		os.Exit(2)
	}
	if *memMiB < 1 || *reps < 1 || *tcpMiB < 1 || *chunkKiB < 1 || *rttIters < 1 || *lineIters < 1 {
		fmt.Fprintln(os.Stderr, "limits: sizes, reps and iterations must be positive")
		os.Exit(2)
	}
	if *peerMode != "process" && *peerMode != "goroutine" {
		fmt.Fprintln(os.Stderr, "limits: -peer must be process or goroutine")
		os.Exit(2)
	}

	enc := json.NewEncoder(os.Stdout)
	emit := func(r Record) {
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "limits:", err)
			os.Exit(1)
		}
	}

	if err := measure(settings{only: *only, memBytes: int64(*memMiB) << 20, reps: *reps, tcpBytes: int64(*tcpMiB) << 20,
		chunk: *chunkKiB << 10, rttIters: *rttIters, lineIters: *lineIters, peerMode: *peerMode}, emit); err != nil {
		fmt.Fprintln(os.Stderr, "limits:", err)
		os.Exit(1)
	}
}

// settings are what the flags ask measure for.
type settings struct {
	only               string // "" for every test, "line" for the line tests alone
	memBytes, tcpBytes int64
	reps, chunk        int
	rttIters           int
	lineIters          int
	peerMode           string
}

// measure runs the tests s asks for, in order, and emits their records.
func measure(s settings, emit func(Record)) error {
	if s.only == "" {
		emit(measureMemcpy(s.memBytes, s.reps))
		bw, bidir, rtt, err := measureTCP(s.peerMode, s.tcpBytes, s.chunk, s.reps, s.rttIters)
		if err != nil {
			return fmt.Errorf("tcp: %w", err)
		}
		emit(bw)
		emit(bidir)
		emit(rtt)
	}
	lrtt, lexch, err := measureLine(s.lineIters)
	if err != nil {
		return fmt.Errorf("shared-memory line: %w", err)
	}
	emit(lrtt)
	emit(lexch)
	return nil
}

func gbps(bytes int64, d time.Duration) *float64 {
	v := float64(bytes) / d.Seconds() / 1e9
	return &v
}

// measureMemcpy copies one buffer into another reps times (after one
// untimed copy that faults the pages in) and keeps the fastest copy.
func measureMemcpy(size int64, reps int) Record {
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := time.Duration(1<<63 - 1)
	for range reps {
		t0 := time.Now()
		copy(dst, src)
		if d := time.Since(t0); d < best {
			best = d
		}
	}
	if dst[size-1] != src[size-1] {
		panic("copy lost data")
	}
	r := Record{Impl: "limit", What: "memcpy", Bytes: size, GBps: gbps(size, best),
		US: us(best), Reps: reps}
	fmt.Fprintf(os.Stderr, "memcpy       %8d MiB  %8.2f GB/s  (best of %d)\n", size>>20, *r.GBps, reps)
	return r
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// measureTCP starts the peer, then runs the stream test, the two-way stream
// test and the ping-pong test over one loopback connection.
func measureTCP(mode string, total int64, chunk, reps, rttIters int) (Record, Record, Record, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Record{}, Record{}, Record{}, err
	}
	defer ln.Close()
	addr := ln.Addr().String()

	peerDone := make(chan error, 1)
	var cmd *exec.Cmd
	switch mode {
	case "process":
		exe, err := os.Executable()
		if err != nil {
			return Record{}, Record{}, Record{}, err
		}
		cmd = exec.Command(exe)
		cmd.Env = append(os.Environ(), peerEnv+"="+addr)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return Record{}, Record{}, Record{}, err
		}
		go func() { peerDone <- cmd.Wait() }()
	default:
		go func() { peerDone <- runPeer(addr) }()
	}

	// Accept with a deadline, so a peer that failed to start cannot hang us.
	if tl, ok := ln.(*net.TCPListener); ok {
		tl.SetDeadline(time.Now().Add(30 * time.Second))
	}
	conn, err := ln.Accept()
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			cmd.Process.Kill()
		}
		return Record{}, Record{}, Record{}, fmt.Errorf("waiting for peer: %w", err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetNoDelay(true)

	bw, err := streamTest(conn, total, chunk, reps)
	if err != nil {
		return Record{}, Record{}, Record{}, err
	}
	bw.Peer = mode
	bidir, err := swapTest(conn, total/4, chunk, reps)
	if err != nil {
		return Record{}, Record{}, Record{}, err
	}
	bidir.Peer = mode
	rtt, err := pingPong(conn, rttIters)
	if err != nil {
		return Record{}, Record{}, Record{}, err
	}
	rtt.Peer = mode
	if err := sendHeader(conn, cmdQuit, 0); err != nil {
		return Record{}, Record{}, Record{}, err
	}
	select {
	case err := <-peerDone:
		if err != nil {
			return Record{}, Record{}, Record{}, fmt.Errorf("peer: %w", err)
		}
	case <-time.After(10 * time.Second):
		return Record{}, Record{}, Record{}, errors.New("peer did not exit")
	}
	return bw, bidir, rtt, nil
}

// header is a command byte followed by a little-endian count.
func sendHeader(w io.Writer, c byte, n int64) error {
	var h [9]byte
	h[0] = c
	binary.LittleEndian.PutUint64(h[1:], uint64(n))
	_, err := w.Write(h[:])
	return err
}

// streamTest sends total bytes in writes of chunk bytes; the time runs until
// the peer confirms it has read everything.
func streamTest(conn net.Conn, total int64, chunk, reps int) (Record, error) {
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	ack := make([]byte, 1)
	best := time.Duration(1<<63 - 1)
	// One short untimed round to grow the socket buffers.
	for rep := -1; rep < reps; rep++ {
		n := total
		if rep < 0 {
			n = min(total, 64<<20)
		}
		if err := sendHeader(conn, cmdSink, n); err != nil {
			return Record{}, err
		}
		t0 := time.Now()
		for left := n; left > 0; {
			w := min(int64(len(buf)), left)
			if _, err := conn.Write(buf[:w]); err != nil {
				return Record{}, err
			}
			left -= w
		}
		if _, err := io.ReadFull(conn, ack); err != nil {
			return Record{}, err
		}
		if d := time.Since(t0); rep >= 0 && d < best {
			best = d
		}
	}
	r := Record{Impl: "limit", What: "tcp_loopback", Bytes: total, GBps: gbps(total, best),
		US: us(best), Reps: reps}
	fmt.Fprintf(os.Stderr, "tcp_loopback %8d MiB  %8.2f GB/s  (one stream, %d KiB writes, best of %d)\n",
		total>>20, *r.GBps, chunk>>10, reps)
	return r, nil
}

// swapTest sends total bytes while the peer sends total bytes back, the
// traffic pattern of a two-rank ring all-reduce, and reports the bandwidth
// of one direction: the ceiling of any collective over loopback TCP in which
// both ranks send and receive at once.
func swapTest(conn net.Conn, total int64, chunk, reps int) (Record, error) {
	out := make([]byte, chunk)
	in := make([]byte, chunk)
	ack := make([]byte, 1)
	best := time.Duration(1<<63 - 1)
	for rep := -1; rep < reps; rep++ {
		n := total
		if rep < 0 {
			n = min(total, 64<<20)
		}
		if err := sendHeader(conn, cmdSwap, n); err != nil {
			return Record{}, err
		}
		t0 := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- writeN(conn, out, n) }()
		if err := readN(conn, in, n); err != nil {
			return Record{}, err
		}
		if err := <-errc; err != nil {
			return Record{}, err
		}
		if _, err := io.ReadFull(conn, ack); err != nil {
			return Record{}, err
		}
		if d := time.Since(t0); rep >= 0 && d < best {
			best = d
		}
	}
	r := Record{Impl: "limit", What: "tcp_loopback_bidir", Bytes: total, GBps: gbps(total, best),
		US: us(best), Reps: reps}
	fmt.Fprintf(os.Stderr, "tcp_bidir    %8d MiB  %8.2f GB/s  (each direction, both at once, best of %d)\n",
		total>>20, *r.GBps, reps)
	return r, nil
}

func writeN(w io.Writer, buf []byte, n int64) error {
	for left := n; left > 0; {
		k := min(int64(len(buf)), left)
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		left -= k
	}
	return nil
}

func readN(r io.Reader, buf []byte, n int64) error {
	for left := n; left > 0; {
		m, err := r.Read(buf[:min(int64(len(buf)), left)])
		if err != nil {
			return err
		}
		left -= int64(m)
	}
	return nil
}

// pingPong measures the average round trip of an 8-byte message.
func pingPong(conn net.Conn, iters int) (Record, error) {
	warm := min(iters/10+1, 1000)
	if err := sendHeader(conn, cmdEcho, int64(warm+iters)); err != nil {
		return Record{}, err
	}
	msg := make([]byte, 8)
	var t0 time.Time
	for i := range warm + iters {
		if i == warm {
			t0 = time.Now()
		}
		binary.LittleEndian.PutUint64(msg, uint64(i))
		if _, err := conn.Write(msg); err != nil {
			return Record{}, err
		}
		if _, err := io.ReadFull(conn, msg); err != nil {
			return Record{}, err
		}
		if binary.LittleEndian.Uint64(msg) != uint64(i) {
			return Record{}, fmt.Errorf("ping-pong: got %d, want %d", binary.LittleEndian.Uint64(msg), i)
		}
	}
	d := time.Since(t0)
	rtt := us(d) / float64(iters)
	r := Record{Impl: "limit", What: "tcp_rtt_8B", Bytes: 8, US: rtt, Reps: iters}
	fmt.Fprintf(os.Stderr, "tcp_rtt_8B   %8d B    %8.2f us    (round trip, average of %d)\n", 8, rtt, iters)
	return r, nil
}

// runPeer is the remote end: it connects to addr and serves commands until
// told to quit.
func runPeer(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetNoDelay(true)
	buf := make([]byte, 4<<20)
	var h [9]byte
	for {
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			return err
		}
		n := int64(binary.LittleEndian.Uint64(h[1:]))
		switch h[0] {
		case cmdSink:
			for left := n; left > 0; {
				m, err := conn.Read(buf[:min(int64(len(buf)), left)])
				if err != nil {
					return err
				}
				left -= int64(m)
			}
			if _, err := conn.Write([]byte{1}); err != nil {
				return err
			}
		case cmdSwap:
			out := make([]byte, len(buf))
			errc := make(chan error, 1)
			go func() { errc <- writeN(conn, out, n) }()
			if err := readN(conn, buf, n); err != nil {
				return err
			}
			if err := <-errc; err != nil {
				return err
			}
			if _, err := conn.Write([]byte{1}); err != nil {
				return err
			}
		case cmdEcho:
			msg := buf[:8]
			for range n {
				if _, err := io.ReadFull(conn, msg); err != nil {
					return err
				}
				if _, err := conn.Write(msg); err != nil {
					return err
				}
			}
		case cmdQuit:
			return nil
		default:
			return fmt.Errorf("unknown command %q", h[0])
		}
	}
}
