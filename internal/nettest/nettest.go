// Package nettest gives tests network addresses with a known behaviour.
package nettest

import (
	"net"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// RefusedAddr returns a TCP address on 127.0.0.1 where a connection is
// refused (ECONNREFUSED) for as long as the test runs: a socket bound to
// the port and never listening holds it, so that no other process can
// take the port and answer, as it could after a listener that was opened
// only to pick a free port is closed.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("nettest: socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("nettest: bind: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatalf("nettest: getsockname: %v", err)
	}
	in, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		t.Fatalf("nettest: bound to %T, want an IPv4 address", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.Port))
}
