package comm

import (
	"net"
	"strings"
	"testing"
)

func TestPickIface(t *testing.T) {
	ifs := []netIface{
		{name: "lo", up: true, addrs: []net.IP{net.ParseIP("127.0.0.1")}},
		{name: "eth0", up: true, addrs: []net.IP{net.ParseIP("fd00::2"), net.ParseIP("10.0.0.2")}},
		{name: "eth10", up: true, addrs: []net.IP{net.ParseIP("10.0.10.2")}},
		{name: "ib0", up: false, addrs: []net.IP{net.ParseIP("10.1.0.2")}},
		{name: "ib1", up: true, addrs: []net.IP{net.ParseIP("fd01::2")}},
		{name: "docker0", up: true},
	}
	cases := []struct{ spec, want, err string }{
		{spec: "eth0", want: "10.0.0.2"},  // IPv4 preferred
		{spec: "eth1", want: "10.0.10.2"}, // prefix
		{spec: "=eth1", err: "matches none of this host's interfaces (lo, eth0, eth10, ib0, ib1, docker0)"},
		{spec: "=eth10", want: "10.0.10.2"},
		{spec: "ib", want: "fd01::2"}, // ib0 is down; IPv6 when there is no IPv4
		{spec: "=ib0", err: "interface ib0 is down or has no address"},
		{spec: "docker", err: "interface docker0 is down or has no address"},
		{spec: "^lo,eth", want: "fd01::2"},
		{spec: "nosuch,eth10", want: "10.0.10.2"},
		{spec: "nosuch0", err: "OCCL_SOCKET_IFNAME=nosuch0 matches none"},
		{spec: " , ", err: "names no interface"},
	}
	for _, tc := range cases {
		got, err := pickIface(tc.spec, ifs)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("pickIface(%q) = %q, %v; want error containing %q", tc.spec, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("pickIface(%q) = %q, %v; want %q", tc.spec, got, err, tc.want)
		}
	}
}
