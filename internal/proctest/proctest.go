// Package proctest runs tests across real processes. The test binary
// doubles as its own peer: started again with an environment variable set,
// it runs a child function instead of the tests, and the test talks to it
// over a connection of package tcp.
package proctest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/occl/occl/transport/tcp"
)

// Main is the body of TestMain for a test binary that doubles as its own
// child process. With the environment variable env set it runs child with
// the variable's value and exits, with status 1 after printing the error
// if child fails; otherwise it runs the tests.
func Main(m *testing.M, env string, child func(mode string) error) {
	if mode := os.Getenv(env); mode != "" {
		if err := child(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Command returns a command, not yet started, that runs the test binary
// without running any test, with env added to the environment. The child's
// standard error is the test's.
func Command(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// Build compiles the command in package pkg (a directory as go build
// takes it, relative to the test's own) into a temporary directory of t
// and returns the binary's path: tests that run occl's commands as a user
// would build them so.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	dir, err := filepath.Abs(pkg)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(dir)) // the command's own name
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Start starts cmd and, when the test ends, kills it and waits for it.
func Start(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// StartChild starts the test binary as a child process with env added to
// its environment, and returns the connection the child dials back with
// tcp.Dial and secret, along with the child. The child finds the address
// to dial in the environment variable addrEnv. ctx bounds the wait for the
// child's connection.
func StartChild(ctx context.Context, t testing.TB, secret []byte, addrEnv string, env ...string) (*tcp.Conn, *exec.Cmd) {
	t.Helper()
	ln, err := tcp.Listen("127.0.0.1:0", secret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := Command(append([]string{addrEnv + "=" + ln.Addr().String()}, env...)...)
	Start(t, cmd)
	ctl, _ := Accept(ctx, t, ln)
	return ctl, cmd
}

// Accept takes the next connection on ln, waiting no longer than ctx
// allows, and returns it as a single-stream tcp.Conn with the hello its
// dialer presented.
func Accept(ctx context.Context, t testing.TB, ln *tcp.Listener) (*tcp.Conn, tcp.Hello) {
	t.Helper()
	a, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tcp.NewConn([]*net.TCPConn{a.Conn}, tcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, a.Hello
}
