package comm

import (
	"strings"
	"testing"

	"github.com/occl/occl/transport/tcp"
)

func TestTCPCongestionFromEnv(t *testing.T) {
	t.Setenv("OCCL_TCP_CONGESTION", "Reno")
	c, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.tcpOptions().Congestion; got != "reno" {
		t.Errorf("OCCL_TCP_CONGESTION=Reno: %q, want reno", got)
	}
	t.Setenv("OCCL_TCP_CONGESTION", "")
	if c, err = newConfig(nil); err != nil {
		t.Fatal(err)
	}
	if got := c.tcpOptions().Congestion; got != "" && got != tcp.CongestionAuto {
		t.Errorf("unset: %q, want auto", got)
	}
	for _, bad := range []string{"a b", "../../x", "averyveryverylongname"} {
		t.Setenv("OCCL_TCP_CONGESTION", bad)
		if _, err := newConfig(nil); err == nil || !strings.Contains(err.Error(), "OCCL_TCP_CONGESTION") {
			t.Errorf("OCCL_TCP_CONGESTION=%q: %v, want an error naming the variable", bad, err)
		}
	}
}
