package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

const token = "daemon-test-token"

var listenLine = regexp.MustCompile(`^occl-ocsd listening on (127\.0\.0\.1:[0-9]+)$`)

// readAddr reads the daemon's "listening on" line.
func readAddr(t *testing.T, r io.Reader) string {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, r)
	}()
	select {
	case line := <-lines:
		m := listenLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first line %q, want %q", line, listenLine)
		}
		return m[1]
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon printed no address")
		return ""
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("OCCL_OCS_TOKEN", token)
	for name, args := range map[string][]string{
		"bad flag":       {"-nope"},
		"extra argument": {"extra"},
		"one port":       {"-ports", "1"},
		"bad driver":     {"-driver", "polatis"},
		"negative delay": {"-delay", "-1ms"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, code, errb.String())
		}
	}
	t.Setenv("OCCL_OCS_TOKEN", "")
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "OCCL_OCS_TOKEN") {
		t.Errorf("no token: exit %d, stderr %q", code, errb.String())
	}
	var help bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &help); code != 0 || !strings.Contains(help.String(), "-state") {
		t.Errorf("-h: exit %d, %q", code, help.String())
	}
}

// TestRunInProcess runs the daemon's run function, applies through a
// client and stops it by cancelling its context (as SIGTERM does).
func TestRunInProcess(t *testing.T) {
	t.Setenv("OCCL_OCS_TOKEN", token)
	state := filepath.Join(t.TempDir(), "ocs.state")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"-ports", "8", "-delay", "1ms", "-state", state}, pw, &errb)
		pw.Close()
	}()
	addr := readAddr(t, pr)
	c, err := ocs.Dial(ctx, addr, ocs.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Apply(ctx, "in-process", []topo.Circuit{{A: 0, B: 7}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d after cancel; stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

// buildDaemon compiles occl-ocsd into a temporary directory.
func buildDaemon(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("no go tool to build occl-ocsd")
		}
	}
	bin := filepath.Join(t.TempDir(), "occl-ocsd")
	cmd := exec.Command(goBin, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type daemon struct {
	cmd  *exec.Cmd
	addr string
	errb *bytes.Buffer
}

func startDaemon(t *testing.T, bin string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "OCCL_OCS_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &bytes.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return &daemon{cmd: cmd, addr: readAddr(t, stdout), errb: errb}
}

// TestDaemonProcessSurvivesKill builds occl-ocsd, runs it as a real
// process, applies through the client, kills it with SIGKILL, restarts it
// on the same state file and checks that the topology (and the request-id
// log) persisted; then stops it with SIGTERM.
func TestDaemonProcessSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs occl-ocsd")
	}
	bin := buildDaemon(t)
	state := filepath.Join(t.TempDir(), "ocs.state")
	args := []string{"-listen", "127.0.0.1:0", "-ports", "16", "-delay", "1ms", "-state", state}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	d1 := startDaemon(t, bin, args...)
	c1, err := ocs.Dial(ctx, d1.addr, ocs.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	first, err := c1.Apply(ctx, "before-kill", []topo.Circuit{{A: 0, B: 5}, {A: 7, B: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Drain(ctx, 9, false); err != nil {
		t.Fatal(err)
	}
	if err := d1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d1.cmd.Wait()

	d2 := startDaemon(t, bin, args...)
	c2, err := ocs.Dial(ctx, d2.addr, ocs.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	top, err := c2.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if top.Generation != first.Generation || ocs.FormatConnects(top.Connects) != "0-5,1-7" ||
		!slices.Equal(top.PortsIn(ocs.PortDrained), []int{9}) {
		t.Fatalf("after kill -9 and restart: generation %d, %v, drained %v",
			top.Generation, top.Connects, top.PortsIn(ocs.PortDrained))
	}
	again, err := c2.Apply(ctx, "before-kill", []topo.Circuit{{A: 0, B: 5}, {A: 1, B: 7}})
	if err != nil || !again.Replayed {
		t.Fatalf("replay after restart = %+v, %v", again, err)
	}

	if err := d2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- d2.cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, d2.errb)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("occl-ocsd did not stop on SIGTERM")
	}
}
