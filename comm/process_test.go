package comm_test

// Tests across real OS processes talking TCP over 127.0.0.1. The test
// binary re-executes itself as the workers: TestMain runs the scenario named
// in OCCL_TEST_WORKER instead of the tests, joined through the environment
// the launcher sets (OCCL_RANK, OCCL_WORLD_SIZE, OCCL_UNIQUE_ID).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/transport/tcp"
)

func TestMain(m *testing.M) {
	if name := os.Getenv("OCCL_TEST_WORKER"); name != "" {
		os.Exit(worker(name))
	}
	os.Exit(runInTempDir(m))
}

// runInTempDir runs the tests with TMPDIR (inherited by the worker
// processes) in a directory of their own, removed afterwards: the flight
// records of the communicators the tests fail on purpose go there.
func runInTempDir(m *testing.M) int {
	dir, err := os.MkdirTemp("", "occl-comm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Setenv("TMPDIR", dir)
	return m.Run()
}

// worker runs one scenario in a worker process and returns its exit code.
func worker(name string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "FAIL "+format+"\n", args...)
		return 1
	}
	opts := []comm.Option{comm.WithTimeout(time.Minute)}
	if v := os.Getenv("OCCL_TEST_VHOSTS"); v != "" {
		// Ranks per virtual host: shared memory inside, TCP across.
		per, _ := strconv.Atoi(v)
		rank, _ := strconv.Atoi(os.Getenv("OCCL_RANK"))
		opts = append(opts, comm.WithHostID(fmt.Sprintf("vhost%d", rank/per)))
	}
	if s := os.Getenv("OCCL_TEST_STREAMS"); s != "" {
		n, _ := strconv.Atoi(s)
		opts = append(opts, comm.WithStreams(n))
	}
	if name == "shrink" {
		// Stopped ranks are found within 2 s (OCCL_TEST_HEARTBEAT_TIMEOUT).
		hbTimeout := 2 * time.Second
		if d, err := time.ParseDuration(os.Getenv("OCCL_TEST_HEARTBEAT_TIMEOUT")); err == nil {
			hbTimeout = d
		}
		opts = append(opts, comm.WithHeartbeat(200*time.Millisecond, hbTimeout))
	}
	if d, err := time.ParseDuration(os.Getenv("OCCL_TEST_JOIN_DELAY")); err == nil {
		time.Sleep(d)
	}
	if name == "grow-spare" || name == "grow-intruder" {
		if err := growSpare(ctx, name, opts); err != nil {
			return fail("%s: %v", name, err)
		}
		return 0
	}
	if name == "intruder" {
		_, err := comm.InitFromEnv(ctx, opts...)
		if errors.Is(err, tcp.ErrAuth) {
			fmt.Println("REFUSED", err)
			return 0
		}
		return fail("intruder joined or failed otherwise: %v", err)
	}
	c, err := comm.InitFromEnv(ctx, opts...)
	if err != nil {
		return fail("init: %v", err)
	}
	defer c.Close()
	switch name {
	case "conformance":
		if want := os.Getenv("OCCL_TRANSPORT"); want != "" && c.TransportName() != want {
			return fail("transport %s, want %s", c.TransportName(), want)
		}
		if os.Getenv("OCCL_TEST_VHOSTS") != "" && c.TransportName() != "shm+tcp" {
			return fail("transport %s, want shm+tcp", c.TransportName())
		}
		m := matrix{sizes: []int{0, 1, 13, 1031}, dtypes: allDTypes(), ops: allOps(), async: true}
		if err := conformance(ctx, c, m); err != nil {
			return fail("%v", err)
		}
		if os.Getenv("OCCL_TEST_LARGE") != "" {
			if err := large(ctx, c); err != nil {
				return fail("%v", err)
			}
		}
	case "topology":
		// OCCL_TOPO and OCCL_ALGO come from the environment.
		if want := os.Getenv("OCCL_TEST_NUM_HOSTS"); want != strconv.Itoa(c.NumHosts()) {
			return fail("%d hosts, want %s", c.NumHosts(), want)
		}
		if err := topologyChecks(ctx, c); err != nil {
			return fail("%v", err)
		}
	case "shrink":
		if err := shrinkWorker(ctx, c); err != nil {
			return fail("%v", err)
		}
	case "alltoall":
		if err := alltoallWorker(ctx, c); err != nil {
			return fail("%v", err)
		}
	case "rewire", "rewire-kill":
		if err := rewireWorker(ctx, c, name == "rewire-kill"); err != nil {
			return fail("%v", err)
		}
	case "grow":
		if err := growMember(ctx, c); err != nil {
			return fail("%v", err)
		}
	case "grow-none":
		if err := growNone(ctx, c); err != nil {
			return fail("%v", err)
		}
	case "hosts":
		// OCCL_HOSTID is set to rank/2 by the test.
		want := (c.Size() + 1) / 2
		if c.NumHosts() != want || c.LocalRank() != c.Rank()%2 || c.Host(c.Rank()) != c.Rank()/2 {
			return fail("hosts: %d hosts, local rank %d of %d, host %d", c.NumHosts(), c.LocalRank(), c.LocalSize(), c.Host(c.Rank()))
		}
		x := []int32{int32(c.Rank())}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return fail("%v", err)
		}
	case "kill":
		// AllReduce 32 MiB (or with OCCL_TEST_KILL_OP=alltoall an
		// AllToAll of 32 MiB, 8 MiB blocks) until something fails;
		// report who is blamed.
		x := make([]float32, 8<<20)
		y := make([]float32, len(x))
		op := func() error { return comm.AllReduce(ctx, c, x, x, comm.Sum) }
		switch os.Getenv("OCCL_TEST_KILL_OP") {
		case "alltoall":
			op = func() error { return c.AllToAll(ctx, comm.Slice(x), comm.Slice(y)) }
		case "alltoall-inplace":
			op = func() error { return c.AllToAll(ctx, comm.Slice(x), comm.Slice(x)) }
		}
		for i := 0; ; i++ {
			start := time.Now()
			err := op()
			if err != nil {
				var pe *comm.PeerError
				peer := -1
				if errors.As(err, &pe) {
					peer = pe.Peer
				}
				fmt.Printf("FAILED peer=%d elapsed=%dms err=%v\n", peer, time.Since(start).Milliseconds(), err)
				return 0
			}
			if i == 0 {
				fmt.Println("READY")
			}
		}
	case "mismatch":
		x := make([]float32, 100+c.Rank()%2)
		err := comm.AllReduce(ctx, c, x, x, comm.Sum)
		if !errors.Is(err, comm.ErrMismatch) {
			return fail("count mismatch: %v", err)
		}
		fmt.Println("MISMATCH", err)
	case "mismatch-inplace":
		// An AllToAll of 1 MiB blocks (lent whole out of place, in
		// pieces in place) in place on rank 0 only.
		const block = 1 << 20
		send, recv := make([]byte, block*c.Size()), make([]byte, block*c.Size())
		if c.Rank() == 0 {
			recv = send
		}
		err := c.AllToAll(ctx, comm.Slice(send), comm.Slice(recv))
		if !errors.Is(err, comm.ErrMismatch) {
			return fail("in place on rank 0 only: %v", err)
		}
		fmt.Println("MISMATCH", err)
	case "cancel-lend":
		// AllToAll of 8 MiB blocks, lent, until rank 1 cancels its
		// context while one runs: rank 1 fails with the cancellation,
		// the others with its abort, none with wrong data before.
		block := 2 << 20
		x := make([]int32, block*c.Size())
		y := make([]int32, len(x))
		for i := range x {
			x[i] = int32(c.Rank()*len(x) + i)
		}
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		if c.Rank() == 1 {
			time.AfterFunc(300*time.Millisecond, cancel)
		}
		for {
			err := c.AllToAll(octx, comm.Slice(x), comm.Slice(y))
			if err != nil {
				var pe *comm.PeerError
				switch {
				case c.Rank() == 1 && !errors.Is(err, context.Canceled) && !errors.Is(err, comm.ErrAborted):
					return fail("rank 1: %v, want its cancellation", err)
				case c.Rank() != 1 && (!errors.As(err, &pe) || pe.Peer != 1):
					return fail("%v, want the failure of rank 1", err)
				}
				fmt.Println("CANCELLED", err)
				return 0
			}
			for j := range c.Size() {
				for k := range block {
					if want := int32(j*len(x) + c.Rank()*block + k); y[j*block+k] != want {
						return fail("block %d element %d: %v, want %v", j, k, y[j*block+k], want)
					}
				}
			}
		}
	case "split-dead":
		// Rank 2 dies before the Split its color needs it in: the other
		// ranks, of both colors, fail naming it.
		if c.Rank() == 2 {
			os.Exit(0)
		}
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		var pe *comm.PeerError
		if err == nil || !errors.As(err, &pe) || pe.Peer != 2 {
			if sub != nil {
				sub.Close()
			}
			return fail("Split without rank 2: %v, want the failure of rank 2", err)
		}
		fmt.Println("SPLITFAIL", err)
	case "mismatch-probe":
		x := make([]float32, 10)
		err := comm.Broadcast(ctx, c, x, x, c.Rank()/2)
		for err == nil && c.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if err == nil {
			err = c.Err()
		}
		if !errors.Is(err, comm.ErrMismatch) {
			return fail("root mismatch: %v", err)
		}
		fmt.Println("MISMATCH", err)
	case "stall":
		// Rank 2 is alive but busy in its own code (a spin, not a
		// sleep) while the others wait in an AllReduce.
		x := []float32{1}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return fail("%v", err)
		}
		if c.Rank() == 2 {
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
			}
		}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return fail("%v", err)
		}
		fmt.Printf("DONE %v\n", x[0])
	default:
		return fail("unknown scenario %q", name)
	}
	return 0
}

// job runs a scenario on np processes and returns their combined output.
func job(t *testing.T, scenario string, np int, env ...string) string {
	t.Helper()
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := launch.Run(ctx, launch.Spec{
		NP: np, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    append([]string{"OCCL_TEST_WORKER=" + scenario}, env...),
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("%s on %d processes: %v\n%s", scenario, np, err, out.String())
	}
	return out.String()
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

// TestProcessConformance runs the conformance matrix across processes over
// TCP, over shared memory (the automatic choice on one host), and over a
// mix of both (two virtual hosts of two ranks).
func TestProcessConformance(t *testing.T) {
	cases := []struct {
		name string
		np   int
		env  []string
		// raceCovered names the case that runs this one's paths under
		// the race detector, if it is not this one.
		raceCovered string
	}{
		{"tcp/np2", 2, []string{"OCCL_TRANSPORT=tcp"}, "tcp/np3"},
		{"tcp/np3", 3, []string{"OCCL_TRANSPORT=tcp"}, ""},
		{"tcp/np4", 4, []string{"OCCL_TRANSPORT=tcp"}, "tcp/np3"},
		{"shm/np2", 2, []string{"OCCL_TRANSPORT=shm"}, "shm/np3"},
		{"shm/np3", 3, []string{"OCCL_TRANSPORT=shm"}, ""},
		// All-to-all blocks lent whatever the machine's rates.
		{"shm-lend/np2", 2, []string{"OCCL_TRANSPORT=shm", "OCCL_SHM_CMA=lend"}, ""},
		// Messages of 1 KiB and more copied by cross-memory attach.
		{"shm-cma/np3", 3, []string{"OCCL_TRANSPORT=shm", "OCCL_SHM_CMA=1K"}, ""},
		{"mixed/np4", 4, []string{"OCCL_TEST_VHOSTS=2"}, "mixed-lend/np4"},
		// Blocks lent on shared memory next to blocks in pieces over
		// TCP in one all-to-all.
		{"mixed-lend/np4", 4, []string{"OCCL_TEST_VHOSTS=2", "OCCL_SHM_CMA=lend"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.raceCovered != "" {
				skipUnderRace(t, tc.raceCovered)
			}
			env := tc.env
			if !testing.Short() {
				env = append(env, "OCCL_TEST_LARGE=1")
			}
			job(t, "conformance", tc.np, env...)
		})
	}
}

// TestProcessStriped runs the conformance matrix with two sockets per pair,
// so large messages are split across streams.
func TestProcessStriped(t *testing.T) {
	if testing.Short() {
		t.Skip("large buffers")
	}
	job(t, "conformance", 3, "OCCL_TRANSPORT=tcp", "OCCL_TEST_STREAMS=2", "OCCL_TEST_LARGE=1")
}

// TestProcessVirtualHosts runs the topology-aware schedules across real
// processes grouped into emulated hosts by OCCL_TOPO: shared memory inside
// an emulated host, TCP between them.
func TestProcessVirtualHosts(t *testing.T) {
	cases := []struct {
		spec, algo string
		np, hosts  int
	}{
		{"hosts=4x2", "hier", 8, 4},
		{"hosts=3x3", "2d", 9, 3},
		{"hosts=2x4", "gateway", 8, 2},
		{"hosts=2x3", "auto", 6, 2},
	}
	// Under the race detector only the last case runs.
	for i, tc := range cases {
		t.Run(tc.spec+"/"+tc.algo, func(t *testing.T) {
			if i != len(cases)-1 {
				skipUnderRace(t, "TestTopologySchedules (every spec, in one process) with hosts=2x3/auto")
			}
			job(t, "topology", tc.np, "OCCL_TOPO="+tc.spec, "OCCL_ALGO="+tc.algo,
				fmt.Sprintf("OCCL_TEST_NUM_HOSTS=%d", tc.hosts))
		})
	}
}

func TestProcessHostIdentity(t *testing.T) {
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := launch.Run(ctx, launch.Spec{
		NP: 4, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:     []string{"OCCL_TEST_WORKER=hosts"},
		RankEnv: func(r int) []string { return []string{fmt.Sprintf("OCCL_HOSTID=vhost%d", r/2)} },
		Stdout:  &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestProcessKilled SIGKILLs one of four processes in the middle of a large
// AllReduce; the other three must fail quickly with an error naming it.
func TestProcessKilled(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) { testFailedRank(t, false, tr) })
	}
	// Killed while its peers have lent it their blocks, or read its own;
	// and in an all-to-all in place, whose pieces a goroutine sends from
	// staging areas.
	t.Run("shm-lend-alltoall", func(t *testing.T) {
		testFailedRank(t, false, "shm", "OCCL_SHM_CMA=lend", "OCCL_TEST_KILL_OP=alltoall")
	})
	t.Run("shm-alltoall-inplace", func(t *testing.T) {
		testFailedRank(t, false, "shm", "OCCL_TEST_KILL_OP=alltoall-inplace")
	})
	t.Run("tcp-alltoall-inplace", func(t *testing.T) {
		testFailedRank(t, false, "tcp", "OCCL_TEST_KILL_OP=alltoall-inplace")
	})
}

// TestProcessStoppedLent: a rank is stopped (SIGSTOP) during AllToAlls
// whose blocks are lent, so its peers wait for copies it does not make;
// they fail naming it once its heartbeats stop, and it fails too, not
// hangs, once continued, reading from peers that withdrew their loans.
func TestProcessStoppedLent(t *testing.T) {
	testFailedRank(t, true, "shm", "OCCL_SHM_CMA=lend", "OCCL_TEST_KILL_OP=alltoall", "OCCL_HEARTBEAT_TIMEOUT=3s")
}

// testFailedRank runs the kill scenario on 4 processes and kills rank 2
// once every rank is in its loop of operations, or with stop stops it
// (SIGSTOP) and continues it once the others failed. The others must fail
// naming it, within 10 s of a kill, write flight records that name the
// operation, and exit; a stopped rank must fail too once continued.
func testFailedRank(t *testing.T, stop bool, transport string, env ...string) {
	const np, victim = 4, 2
	traceDir := t.TempDir()
	pr, pw := io.Pipe()
	var all syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := launch.Start(ctx, launch.Spec{
		NP: np, Path: os.Args[0], Args: []string{"-test.run=^$"},
		// A later entry of env overrides the heartbeat timeout.
		Env:       append([]string{"OCCL_TEST_WORKER=kill", "OCCL_HEARTBEAT_TIMEOUT=30s", "OCCL_TRANSPORT=" + transport, comm.TraceEnv + "=" + traceDir}, env...),
		Stdout:    io.MultiWriter(pw, &all),
		Stderr:    &all,
		KillGrace: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	// ready: every rank is in its loop; failed: every other rank
	// reported the victim.
	ready, failed := make(chan bool, 1), make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		nReady, nFailed := 0, 0
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasSuffix(line, "READY"):
				if nReady++; nReady == np {
					ready <- true
				}
			case strings.Contains(line, fmt.Sprintf("FAILED peer=%d ", victim)) && !strings.HasPrefix(line, fmt.Sprintf("[%d]", victim)):
				if nFailed++; nFailed == np-1 {
					failed <- true
				}
			}
		}
		ready <- false
		failed <- false
	}()
	exited := make(chan struct{})
	go func() { j.Wait(); pw.Close(); close(exited) }()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("workers ended before they were ready:\n%s", all.String())
		}
	case <-time.After(time.Minute):
		j.KillAll()
		t.Fatalf("workers not ready after a minute:\n%s", all.String())
	}
	time.Sleep(150 * time.Millisecond) // well inside a later operation
	failedAt := time.Now()
	if stop {
		err = syscall.Kill(j.Pid(victim), syscall.SIGSTOP)
	} else {
		err = j.Kill(victim)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-failed:
		if !ok {
			t.Fatalf("the others ended without naming rank %d:\n%s", victim, all.String())
		}
	case <-time.After(30 * time.Second):
		syscall.Kill(j.Pid(victim), syscall.SIGCONT)
		j.KillAll()
		t.Fatalf("the others did not name rank %d within 30 s:\n%s", victim, all.String())
	}
	elapsed := time.Since(failedAt)
	if stop {
		syscall.Kill(j.Pid(victim), syscall.SIGCONT)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		j.KillAll()
		t.Fatalf("ranks still running 30 s after the others named rank %d:\n%s", victim, all.String())
	}
	gone := time.Since(failedAt)
	opName := "AllReduce"
	if slices.Contains(env, "OCCL_TEST_KILL_OP=alltoall") || slices.Contains(env, "OCCL_TEST_KILL_OP=alltoall-inplace") {
		opName = "AllToAll"
	}
	checkKilledRecords(t, traceDir, np, victim, opName)
	t.Logf("the others named rank %d %v after it failed, and every rank exited %v after", victim,
		elapsed.Round(time.Millisecond), gone.Round(time.Millisecond))
	switch {
	case stop && !strings.Contains(all.String(), fmt.Sprintf("[%d] FAILED", victim)):
		t.Errorf("rank %d did not fail once continued:\n%s", victim, all.String())
	case !stop && gone > 10*time.Second:
		t.Errorf("the others took %v to notice the dead rank and exit", gone)
	}
}

// TestProcessCancelLent: a rank cancels its context while an AllToAll
// whose blocks are lent runs; every rank fails (naming it) instead of
// hanging in the wait for a copy that will not come.
func TestProcessCancelLent(t *testing.T) {
	out := job(t, "cancel-lend", 3, "OCCL_TRANSPORT=shm", "OCCL_SHM_CMA=lend")
	if strings.Count(out, "CANCELLED") != 3 {
		t.Fatalf("not every rank failed after rank 1's cancellation:\n%s", out)
	}
}

// TestProcessSplitDead: a rank dies before a Split; every other rank's
// Split fails naming it (the surviving ranks of its color, and those of
// the other color, whose new communicator would not need it).
func TestProcessSplitDead(t *testing.T) {
	start := time.Now()
	out := job(t, "split-dead", 4, "OCCL_HEARTBEAT_TIMEOUT=30s")
	if strings.Count(out, "SPLITFAIL") != 3 {
		t.Fatalf("not every survivor's Split failed naming rank 2:\n%s", out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the survivors took %v", d)
	}
}

func TestProcessMismatch(t *testing.T) {
	out := job(t, "mismatch", 3)
	if strings.Count(out, "MISMATCH") != 3 {
		t.Fatalf("not every rank reported the mismatch:\n%s", out)
	}
	// In place on one rank only, where the others lend their blocks:
	// every rank fails alike, and the message says why.
	out = job(t, "mismatch-inplace", 3, "OCCL_TRANSPORT=shm", "OCCL_SHM_CMA=lend")
	if strings.Count(out, "MISMATCH") != 3 || !strings.Contains(out, "in place on one of them only") {
		t.Fatalf("not every rank reported the mismatch of in place and out of place:\n%s", out)
	}
	out = job(t, "mismatch-probe", 4)
	if strings.Count(out, "MISMATCH") != 4 {
		t.Fatalf("not every rank reported the mismatch:\n%s", out)
	}
}

// TestProcessStallReport: one of 4 ranks is busy elsewhere for longer
// than the stall timeout; every rank logs one report naming it, and the
// operation then completes with the right result.
func TestProcessStallReport(t *testing.T) {
	skipUnderRace(t, "TestStallReport (in one process)")
	out := job(t, "stall", 4, "OCCL_STALL_TIMEOUT=200ms")
	if strings.Count(out, "DONE 16") != 4 {
		t.Fatalf("not every rank completed with the right sum:\n%s", out)
	}
	for r := range 4 {
		n := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "stall at AllReduce(count=1, float32, sum) seq 2: rank 2 has not called it (last completed: seq 1 AllReduce(count=1, float32, sum))") &&
				strings.Contains(line, "wait on rank 2") && strings.Contains(line, fmt.Sprintf(" rank=%d ", r)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("rank %d logged %d stall reports naming rank 2, want 1", r, n)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestProcessWrongSecret starts a process that knows the rendezvous address
// but not the secret, claiming rank 1, alongside the real ranks 0 and 1:
// it must be refused and the real job must run.
func TestProcessWrongSecret(t *testing.T) {
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad := id
	bad.Secret[0] ^= 0xff
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out syncBuffer
	j, err := launch.Start(ctx, launch.Spec{
		NP: 2, Path: os.Args[0], Args: []string{"-test.run=^$"},
		UniqueID: id.String(),
		Env:      []string{"OCCL_TEST_WORKER=hosts"},
		// Rank 1 joins late, so the rendezvous is still open when the
		// intruder arrives.
		RankEnv: func(r int) []string {
			return []string{fmt.Sprintf("OCCL_HOSTID=vhost%d", r/2), fmt.Sprintf("OCCL_TEST_JOIN_DELAY=%ds", 3*r)}
		},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	intruder := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	intruder.Env = append(os.Environ(), "OCCL_TEST_WORKER=intruder", "OCCL_RANK=1", "OCCL_WORLD_SIZE=2", "OCCL_UNIQUE_ID="+bad.String())
	iout, ierr := intruder.CombinedOutput()
	if ierr != nil || !strings.Contains(string(iout), "REFUSED") {
		t.Errorf("intruder: %v\n%s", ierr, iout)
	}
	if _, err := j.Wait(); err != nil {
		t.Fatalf("the real job failed: %v\n%s", err, out.String())
	}
}

// TestProcessEmulated runs the topology checks across processes on an
// emulated fabric: shared memory and TCP both shaped.
func TestProcessEmulated(t *testing.T) {
	skipUnderRace(t, "TestEmulatedFabric (in one process)")
	job(t, "topology", 4, "OCCL_TOPO=hosts=2x2,hbd=10GB/s,eps=2GB/s", "OCCL_EMULATE=1", "OCCL_ALGO=hier", "OCCL_TEST_NUM_HOSTS=2")
}
