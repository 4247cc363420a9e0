package reconfig_test

// Reconfiguration across real processes talking TCP on 127.0.0.1, with the
// OCS controller reached over gRPC: the test binary re-executes itself as
// the workers (OCCL_TEST_WORKER), and the controller runs in the test
// process (fault injection) or as the occl-ocsd daemon (restarts).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/nettest"
	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

func TestMain(m *testing.M) {
	if name := os.Getenv("OCCL_TEST_WORKER"); name != "" {
		if err := worker(name); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The flight records of the communicators the tests fail on purpose
	// go to TMPDIR (inherited by the workers): a directory of their own.
	dir, err := os.MkdirTemp("", "occl-reconfig-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const procTopo = "hosts=4x1,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s"

// worker runs one scenario: "ok" reconfigures twice; "fail" expects the
// reconfiguration to fail the same way on every rank and the communicator
// to keep working; "restart" reconfigures, prints PHASE1, waits for the
// trigger file and reconfigures again while the controller restarts.
func worker(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, ring, err := joinRingJob(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	pairs, err := topo.FromSpec(procTopo + ",circuits=0-1/0-1/2-3/2-3")
	if err != nil {
		return err
	}
	var opts []reconfig.Option
	if c.Rank() == 0 {
		cl, err := ocs.Dial(ctx, os.Getenv("OCCL_OCS_ADDR"), ocs.WithToken(os.Getenv("OCCL_OCS_TOKEN")), ocs.WithRetry(20, 50*time.Millisecond))
		if err != nil {
			return err
		}
		defer cl.Close()
		opts = append(opts, reconfig.WithController(reconfig.OCS{Client: cl}), reconfig.WithApplyTimeout(3*time.Second))
	}
	check := func() error {
		x := []int64{int64(c.Rank())}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if want := int64(c.Size() * (c.Size() - 1) / 2); x[0] != want {
			return fmt.Errorf("allreduce %d, want %d", x[0], want)
		}
		send := make([]int32, 4*c.Size())
		for i := range send {
			send[i] = int32(c.Rank()*100 + i)
		}
		recv := make([]int32, len(send))
		if err := comm.AllToAll(ctx, c, send, recv); err != nil {
			return err
		}
		for src := 0; src < c.Size(); src++ {
			for j := 0; j < 4; j++ {
				if recv[4*src+j] != int32(src*100+4*c.Rank()+j) {
					return fmt.Errorf("alltoall block from %d wrong", src)
				}
			}
		}
		return nil
	}
	switch name {
	case "ring":
		// One reconfiguration; rank 0 prints its request id.
		res, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c}, ring, opts...)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("REQUEST-ID %s\n", res.RequestID)
		}
	case "ok", "restart":
		if _, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c}, ring, opts...); err != nil {
			return err
		}
		if err := check(); err != nil {
			return err
		}
		if name == "restart" {
			fmt.Println("PHASE1")
			trigger := os.Getenv("OCCL_TEST_TRIGGER")
			for {
				if _, err := os.Stat(trigger); err == nil {
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		comms := []*comm.Communicator{c}
		if name == "ok" {
			// With a sub-communicator of two hosts, rewired onto its part.
			child, err := c.Split(ctx, c.Rank()/2, 0)
			if err != nil {
				return err
			}
			defer child.Close()
			comms = append(comms, child)
		}
		if _, err := reconfig.Reconfigure(ctx, comms, pairs, opts...); err != nil {
			return err
		}
		if c.Epoch() != 2 || len(c.Topology().Circuits) != 4 {
			return fmt.Errorf("epoch %d, %d circuits", c.Epoch(), len(c.Topology().Circuits))
		}
		if len(comms) == 2 {
			child := comms[1]
			want := pairs.Subset(child.FabricRanks())
			if child.Epoch() != 1 || len(want.Circuits) != 2 || !reflect.DeepEqual(child.Topology().Circuits, want.Circuits) {
				return fmt.Errorf("sub-communicator: epoch %d, circuits %v, want %v", child.Epoch(), child.Topology().Circuits, want.Circuits)
			}
			x := []int64{int64(c.Rank())}
			if err := comm.AllReduce(ctx, child, x, x, comm.Sum); err != nil {
				return err
			}
			if want := int64(c.Rank()/2*4 + 1); x[0] != want {
				return fmt.Errorf("sub-communicator allreduce %d, want %d", x[0], want)
			}
		}
	case "fail":
		_, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c}, ring, opts...)
		var re *comm.RewireError
		if !errors.As(err, &re) || re.Step != "apply" || re.Rank != 0 {
			return fmt.Errorf("reconfiguration did not fail in apply: %v", err)
		}
		fmt.Printf("REWIRE-ERROR %s\n", re.Error())
		if c.Epoch() != 0 || len(c.Topology().Circuits) != 0 || c.Err() != nil {
			return fmt.Errorf("after the failure: epoch %d, %d circuits, %v", c.Epoch(), len(c.Topology().Circuits), c.Err())
		}
	default:
		return fmt.Errorf("unknown scenario %q", name)
	}
	return check()
}

func runJob(t *testing.T, scenario string, env ...string) string {
	t.Helper()
	return runJobID(t, "", scenario, env...)
}

// runJobID is runJob with the given unique id (empty: a fresh one).
func runJobID(t *testing.T, uniqueID, scenario string, env ...string) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := launch.Run(ctx, launch.Spec{
		NP: 4, Path: os.Args[0], Args: []string{"-test.run=^$"}, UniqueID: uniqueID,
		Env:    append([]string{"OCCL_TEST_WORKER=" + scenario}, env...),
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return out.String()
}

// sameError checks that every rank printed the same rewire error.
func sameError(t *testing.T, out string) string {
	t.Helper()
	seen := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if _, msg, ok := strings.Cut(line, "REWIRE-ERROR "); ok {
			seen[msg]++
		}
	}
	if len(seen) != 1 {
		t.Fatalf("ranks reported %d different errors:\n%s", len(seen), out)
	}
	for msg, n := range seen {
		if n != 4 {
			t.Fatalf("%d ranks reported %q:\n%s", n, msg, out)
		}
		return msg
	}
	return ""
}

// TestProcessControllerFaults runs the reconfiguration across 4 processes
// against a controller that fails in different ways: every rank gets the
// same error, the switch holds what it held, and the communicator keeps
// working on its previous topology.
func TestProcessControllerFaults(t *testing.T) {
	const token = "s3cret"
	ctx := context.Background()
	e, err := reconfig.StartEmulated(ctx, 8, time.Millisecond, token)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	env := []string{"OCCL_OCS_ADDR=" + e.Addr, "OCCL_OCS_TOKEN=" + token}

	t.Run("ok", func(t *testing.T) {
		runJob(t, "ok", env...)
		if top, _ := e.Client.GetTopology(ctx); len(top.Connects) != 4 {
			t.Fatalf("switch holds %v after two reconfigurations", top.Connects)
		}
		if _, err := e.Client.Apply(ctx, "reset", nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fails-half-way", func(t *testing.T) {
		e.Switch.FailNextApply(2)
		msg := sameError(t, runJob(t, "fail", env...))
		if !strings.Contains(msg, "injected") {
			t.Errorf("error %q does not say what failed", msg)
		}
		if top, _ := e.Client.GetTopology(ctx); len(top.Connects) != 0 {
			t.Fatalf("switch holds %v after a failed apply", top.Connects)
		}
	})
	t.Run("slower-than-deadline", func(t *testing.T) {
		e.Switch.SlowApply(4 * time.Second)
		defer e.Switch.SlowApply(0)
		sameError(t, runJob(t, "fail", env...))
		if top, _ := e.Client.GetTopology(ctx); len(top.Connects) != 0 {
			t.Fatalf("switch holds %v after an apply past its deadline", top.Connects)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		dead := nettest.RefusedAddr(t)
		sameError(t, runJob(t, "fail", "OCCL_OCS_ADDR="+dead, "OCCL_OCS_TOKEN="+token))
	})
	t.Run("wrong-token", func(t *testing.T) {
		msg := sameError(t, runJob(t, "fail", "OCCL_OCS_ADDR="+e.Addr, "OCCL_OCS_TOKEN=wrong"))
		if !strings.Contains(msg, "Unauthenticated") {
			t.Errorf("error %q does not say Unauthenticated", msg)
		}
	})
}

// TestProcessControllerRestart kills the occl-ocsd daemon between two
// reconfigurations and restarts it on its state file: the second
// reconfiguration goes through once it is back.
func TestProcessControllerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and restarts the daemon")
	}
	dir := t.TempDir()
	bin := proctest.Build(t, "./cmd/occl-ocsd")
	// The first daemon takes a free port itself and names it; the second
	// binds the same one, free again once the first is dead (a port picked
	// by listening and closing first could be taken meanwhile).
	addr := "127.0.0.1:0"
	state := filepath.Join(dir, "ocs.state")
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-listen", addr, "-ports", "8", "-delay", "1ms", "-state", state)
		cmd.Env = append(os.Environ(), "OCCL_OCS_TOKEN=tok")
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		const banner = "occl-ocsd listening on "
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), banner) {
			t.Fatalf("daemon did not start: %q", sc.Text())
		}
		addr = strings.TrimPrefix(sc.Text(), banner)
		go io.Copy(io.Discard, stdout)
		return cmd
	}
	daemon := start()
	trigger := filepath.Join(dir, "go")
	pr, pw := io.Pipe()
	var all bytes.Buffer
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := launch.Run(ctx, launch.Spec{
			NP: 4, Path: os.Args[0], Args: []string{"-test.run=^$"},
			Env:    []string{"OCCL_TEST_WORKER=restart", "OCCL_OCS_ADDR=" + addr, "OCCL_OCS_TOKEN=tok", "OCCL_TEST_TRIGGER=" + trigger},
			Stdout: io.MultiWriter(pw, &all), Stderr: &all,
		})
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.Contains(sc.Text(), "PHASE1") {
	}
	go io.Copy(io.Discard, pr)
	daemon.Process.Signal(syscall.SIGKILL)
	daemon.Wait()
	os.WriteFile(trigger, nil, 0o644) // the workers reconfigure now, against no controller
	time.Sleep(300 * time.Millisecond)
	daemon = start()
	defer func() {
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
	}()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, all.String())
	}
	cl, err := ocs.Dial(context.Background(), addr, ocs.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	top, err := cl.GetTopology(context.Background())
	if err != nil || len(top.Connects) != 4 || top.Generation != 2 {
		t.Fatalf("after the restart the switch holds %+v (%v)", top, err)
	}
}

// TestProcessControllerAcrossJobs: a controller that outlives jobs serves
// two jobs with the same rendezvous id and secret (as jobs given the same
// OCCL_SECRET are): the second job's first reconfiguration is a new
// request, so the controller switches instead of replaying the first
// job's result.
func TestProcessControllerAcrossJobs(t *testing.T) {
	const token = "s3cret"
	ctx := context.Background()
	e, err := reconfig.StartEmulated(ctx, 8, time.Millisecond, token)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	env := []string{"OCCL_OCS_ADDR=" + e.Addr, "OCCL_OCS_TOKEN=" + token}
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	requestID := func(out string) string {
		for _, line := range strings.Split(out, "\n") {
			if _, v, ok := strings.Cut(line, "REQUEST-ID "); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("no request id in the output:\n%s", out)
		return ""
	}
	var ids []string
	for job := range 2 {
		ids = append(ids, requestID(runJobID(t, id.String(), "ring", env...)))
		top, err := e.Client.GetTopology(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(top.Connects) != 4 {
			t.Fatalf("job %d: the switch holds %v after the reconfiguration to a ring of 4 circuits (request %s)", job, top.Connects, ids[job])
		}
		// Between the jobs, someone else takes the circuits down.
		if _, err := e.Client.Apply(ctx, fmt.Sprintf("reset-%d", job), nil); err != nil {
			t.Fatal(err)
		}
	}
	if ids[0] == ids[1] {
		t.Fatalf("both jobs used request id %s", ids[0])
	}
}

// joinRingJob joins the job's communicator on procTopo and returns it with
// the ring of circuits the workers reconfigure to.
func joinRingJob(ctx context.Context) (*comm.Communicator, *topo.Topology, error) {
	base, err := topo.FromSpec(procTopo)
	if err != nil {
		return nil, nil, err
	}
	ring, err := topo.FromSpec(procTopo + ",circuits=0-1/1-2/2-3/0-3")
	if err != nil {
		return nil, nil, err
	}
	c, err := comm.InitFromEnv(ctx, comm.WithTopology(base), comm.WithTimeout(time.Minute))
	return c, ring, err
}
