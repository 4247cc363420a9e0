package nettest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestRefusedAddrRefuses(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want ECONNREFUSED", addr, err)
		}
	}
	// The port stays taken: nobody can listen on it meanwhile.
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listen on %s succeeded while the test holds it", addr)
	}
}
