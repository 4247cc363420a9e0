package reconfig_test

// The OCS controller on a host of its own (a network namespace, package
// internal/netns), cut off from the job while it applies a
// reconfiguration. Needs root; skips without it.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/netns"
	"github.com/occl/occl/internal/proctest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

func init() {
	// The ranks of TestNetnsControllerPartition run this instead of the
	// tests (a variable of their own, apart from TestMain's scenarios).
	if os.Getenv("OCCL_TEST_NETNS") != "" {
		if err := netnsWorker(); err != nil {
			fmt.Printf("FAIL %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// announced is a controller that prints APPLY-SENT before it calls the
// real one, so that the test knows when to cut the controller off.
type announced struct{ reconfig.Controller }

func (a announced) Apply(ctx context.Context, id string, connects []topo.Circuit) (time.Duration, error) {
	fmt.Println("APPLY-SENT")
	return a.Controller.Apply(ctx, id, connects)
}

// netnsWorker reconfigures once, expecting the controller to vanish during
// Apply, and prints the error it gets.
func netnsWorker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, ring, err := joinRingJob(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var opts []reconfig.Option
	if c.Rank() == 0 {
		cl, err := ocs.Dial(ctx, os.Getenv("OCCL_OCS_ADDR"), ocs.WithToken(os.Getenv("OCCL_OCS_TOKEN")))
		if err != nil {
			return err
		}
		defer cl.Close()
		// The controller answers before the job starts: the connection
		// is up when Apply goes out.
		if _, err := cl.GetTopology(ctx); err != nil {
			return err
		}
		opts = append(opts, reconfig.WithController(announced{reconfig.OCS{Client: cl}}), reconfig.WithApplyTimeout(3*time.Second))
	}
	_, err = reconfig.Reconfigure(ctx, []*comm.Communicator{c}, ring, opts...)
	var re *comm.RewireError
	if !errors.As(err, &re) {
		return fmt.Errorf("reconfiguration with the controller cut off returned %v, want a RewireError", err)
	}
	fmt.Printf("REWIRE-ERROR %s\n", re.Error())
	return nil
}

// TestNetnsControllerPartition runs occl-ocsd on a host of its own and
// cuts that host off the network once rank 0 has sent Apply (the switch
// takes 2 s, longer than the cut takes to happen): the reconfiguration
// fails on every rank with the same error, and no rank hangs.
func TestNetnsControllerPartition(t *testing.T) {
	const np, token = 4, "netns-token"
	lab := netns.New(t)
	a := lab.Network()
	var hosts []*netns.Host
	for range np {
		hosts = append(hosts, lab.Host(a))
	}
	ctlHost := lab.Host(a)

	bin := proctest.Build(t, "./cmd/occl-ocsd")
	ctlAddr := ctlHost.Addr(a) + ":7070"
	daemon := ctlHost.Command(bin, "-listen", ctlAddr, "-ports", "8", "-delay", "2s")
	daemon.Env = append(os.Environ(), "OCCL_OCS_TOKEN="+token)
	daemon.Stderr = os.Stderr
	dout, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemon.Process.Kill(); daemon.Wait() })
	sc := bufio.NewScanner(dout)
	if !sc.Scan() || !strings.Contains(sc.Text(), "listening") {
		t.Fatalf("occl-ocsd did not start: %q", sc.Text())
	}
	go io.Copy(io.Discard, dout)

	var mu sync.Mutex
	var all strings.Builder
	applied := make(chan struct{})
	var once sync.Once
	var readers sync.WaitGroup
	cmds := make([]*exec.Cmd, np)
	for r := range np {
		cmd := hosts[r].Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OCCL_TEST_NETNS=1", "OCCL_OCS_ADDR="+ctlAddr, "OCCL_OCS_TOKEN="+token,
			"OCCL_SECRET=00112233445566778899aabbccddeeff", "OCCL_RENDEZVOUS="+hosts[0].Addr(a)+":29500",
			fmt.Sprintf("OCCL_RANK=%d", r), fmt.Sprintf("OCCL_WORLD_SIZE=%d", np), "OCCL_HOSTID="+hosts[r].Name)
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		cmds[r] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		readers.Add(1)
		go func() {
			defer readers.Done()
			s := bufio.NewScanner(pr)
			for s.Scan() {
				mu.Lock()
				fmt.Fprintf(&all, "[%d] %s\n", r, s.Text())
				mu.Unlock()
				if s.Text() == "APPLY-SENT" {
					once.Do(func() { close(applied) })
				}
			}
		}()
	}
	output := func() string { mu.Lock(); defer mu.Unlock(); return all.String() }

	select {
	case <-applied:
	case <-time.After(time.Minute):
		t.Fatalf("rank 0 did not call Apply within a minute:\n%s", output())
	}
	time.Sleep(300 * time.Millisecond) // the request is at the controller, switching
	if err := ctlHost.SetLink(a, false); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, np)
	for r, cmd := range cmds {
		go func() {
			err := cmd.Wait()
			if err != nil {
				err = fmt.Errorf("rank %d: %w", r, err)
			}
			done <- err
		}()
	}
	timeout := time.After(time.Minute)
	for range np {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%v", err)
			}
		case <-timeout:
			t.Fatalf("ranks still running a minute after the controller was cut off (hang):\n%s", output())
		}
	}
	readers.Wait()
	out := output()
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
	msg := sameError(t, out)
	t.Logf("every rank: %s", msg)
}
