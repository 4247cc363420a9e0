package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

const token = "ctl-test-token"

// startController serves an emulated 16-port switch on loopback.
func startController(t *testing.T) (string, *ocs.Emulated) {
	t.Helper()
	sw, err := ocs.NewEmulated(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ocs.NewServer(sw, ocs.ServerConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background(), lis)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return lis.Addr().String(), sw
}

// ctl runs the CLI and returns its exit status, stdout and stderr.
func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommands(t *testing.T) {
	addr, _ := startController(t)
	t.Setenv("OCCL_OCS_TOKEN", token)
	t.Setenv("OCCL_OCS_ADDR", "")

	steps := []struct {
		args []string
		code int
		out  string // substring of stdout (or stderr when code != 0)
	}{
		{[]string{"topology"}, 0, "generation 0, 16 ports, 0 cross-connects"},
		{[]string{"apply", "-id", "p1", "0-5,1-7"}, 0, "generation 1: +2 -0 =0"},
		{[]string{"apply", "-id", "p1", "0-5,1-7"}, 0, "replayed: generation 1"},
		{[]string{"apply", "-id", "p1", "0-5"}, 1, "different target"},
		{[]string{"apply", "-id", "p2", "0-5", "2-3"}, 0, "generation 2: +1 -1 =1"},
		{[]string{"apply", "-id", "bad", "0-16"}, 1, "port 16 does not exist"},
		{[]string{"drain", "3"}, 1, "FailedPrecondition"},
		{[]string{"drain", "-force", "3"}, 0, "port 3 drained, tore down 2-3 (generation 3)"},
		{[]string{"drain", "3"}, 0, "port 3 drained (generation 3)"},
		{[]string{"apply", "-id", "p3", "3-4"}, 1, "drained ports [3]"},
		{[]string{"topology"}, 0, "drained ports: 3"},
		{[]string{"undrain", "3"}, 0, "port 3 up"},
		{[]string{"apply", "none"}, 0, "generation 4: +0 -1 =0"},
		{[]string{"watch", "-count", "1"}, 0, "generation 4 snapshot 16 ports none"},
	}
	for _, s := range steps {
		code, out, errb := ctl(t, append([]string{"-addr", addr}, s.args...)...)
		got := out
		if s.code != 0 {
			got = errb
		}
		if code != s.code || !strings.Contains(got, s.out) {
			t.Fatalf("occl-ocsctl %s: exit %d, stdout %q, stderr %q; want exit %d and %q",
				strings.Join(s.args, " "), code, out, errb, s.code, s.out)
		}
	}
}

func TestJSONOutput(t *testing.T) {
	addr, _ := startController(t)
	t.Setenv("OCCL_OCS_TOKEN", token)
	t.Setenv("OCCL_OCS_ADDR", addr) // the address from the environment
	code, out, errb := ctl(t, "-json", "apply", "-id", "j", "0-1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	var res ocs.ApplyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Added != 1 || res.Generation != 1 {
		t.Fatalf("apply -json = %q (%v)", out, err)
	}
	code, out, _ = ctl(t, "-json", "topology")
	var top struct {
		Generation uint64 `json:"generation"`
		Connects   []topo.Circuit
		PortStates []struct{ State string } `json:"port_states"`
	}
	if err := json.Unmarshal([]byte(out), &top); code != 0 || err != nil || len(top.Connects) != 1 || top.PortStates[0].State != "up" {
		t.Fatalf("topology -json = %q (%v)", out, err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestWatchPrintsChanges(t *testing.T) {
	addr, sw := startController(t)
	t.Setenv("OCCL_OCS_TOKEN", token)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-addr", addr, "watch", "-count", "2"}, &out, &errb) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "snapshot") {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot; stderr %q", errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	sw.FailPort(5)
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(out.String(), "port-failed port 5") {
			t.Fatalf("watch: exit %d, printed %q, stderr %q", code, out.String(), errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch did not report the failure: %q", out.String())
	}
}

func TestErrors(t *testing.T) {
	addr, _ := startController(t)
	t.Setenv("OCCL_OCS_ADDR", "")
	t.Setenv("OCCL_OCS_TOKEN", "wrong")
	if code, _, errb := ctl(t, "-addr", addr, "topology"); code != 1 || !strings.Contains(errb, "Unauthenticated") {
		t.Fatalf("wrong token: exit %d, %q", code, errb)
	}
	t.Setenv("OCCL_OCS_TOKEN", token)
	for name, args := range map[string][]string{
		"no command":      {"-addr", addr},
		"no address":      {"topology"},
		"unknown command": {"-addr", addr, "frobnicate"},
		"bad pair":        {"-addr", addr, "apply", "0+5"},
		"no pairs":        {"-addr", addr, "apply", "-id", "x"},
		"bad port":        {"-addr", addr, "drain", "x"},
		"two ports":       {"-addr", addr, "undrain", "1", "2"},
		"extra args":      {"-addr", addr, "topology", "now"},
		"bad sub flag":    {"-addr", addr, "watch", "-n", "1"},
	} {
		if code, _, errb := ctl(t, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, code, errb)
		}
	}
}
