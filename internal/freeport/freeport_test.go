package freeport

import (
	"net"
	"runtime"
	"strconv"
	"testing"
)

// TestOnBelowEphemeral: on Linux the port lies below the ephemeral range
// and can be bound.
func TestOnBelowEphemeral(t *testing.T) {
	lo := ephemeralLow()
	if runtime.GOOS == "linux" && lo <= lowest {
		t.Fatalf("ephemeral range starts at %d on Linux", lo)
	}
	for range 20 {
		p, err := On("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if lo > lowest && (p < lowest || p >= lo) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, lo)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		ln.Close()
	}
}

// TestPickTaken: when the only candidate is taken, pick falls back to a
// port the kernel chooses instead of returning the taken one.
func TestPickTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	p, err := pick("127.0.0.1", taken, taken+1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if p == taken || p == 0 {
		t.Fatalf("picked %d with %d taken", p, taken)
	}
}
