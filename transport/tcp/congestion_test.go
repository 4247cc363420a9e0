package tcp

import (
	"net"
	"os"
	"strings"
	"testing"
)

func TestCongestionFor(t *testing.T) {
	addr := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }
	for _, c := range []struct {
		setting, local, remote, want string
	}{
		{"", "127.0.0.1", "127.0.0.1", SameHostCongestion},
		{CongestionAuto, "127.0.0.1", "127.0.0.2", SameHostCongestion},
		{CongestionAuto, "::1", "127.0.0.1", SameHostCongestion},
		{CongestionAuto, "10.0.0.1", "10.0.0.1", SameHostCongestion},
		{CongestionAuto, "10.0.0.1", "10.0.0.2", ""},
		{"", "10.0.0.1", "127.0.0.1", ""},
		{CongestionSystem, "127.0.0.1", "127.0.0.1", ""},
		{"reno", "10.0.0.1", "10.0.0.2", "reno"},
		{"reno", "127.0.0.1", "127.0.0.1", "reno"},
	} {
		if got := congestionFor(c.setting, addr(c.local), addr(c.remote)); got != c.want {
			t.Errorf("congestionFor(%q, %s, %s) = %q, want %q", c.setting, c.local, c.remote, got, c.want)
		}
	}
	if got := congestionFor("", &net.UDPAddr{}, &net.UDPAddr{}); got != "" {
		t.Errorf("non-TCP addresses: %q, want the system's", got)
	}
}

func TestLocalIP(t *testing.T) {
	for _, c := range []struct {
		ip   string
		want bool
	}{{"127.0.0.1", true}, {"127.0.0.2", true}, {"::1", true}, {"192.0.2.1", false}} {
		if got := localIP(net.ParseIP(c.ip)); got != c.want {
			t.Errorf("localIP(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !localIP(n.IP) {
			t.Errorf("localIP(%s) = false for an address of this host", n.IP)
		}
	}
}

// TestPresetCongestion checks that a loopback connection made by Listen
// and Dial has SameHostCongestion on both ends before NewConn: chosen
// before connecting, so that no other algorithm ever ran on it.
func TestPresetCongestion(t *testing.T) {
	allowed := " " + strings.Join(procWords(t, "tcp_allowed_congestion_control"), " ") + " "
	if !strings.Contains(allowed, " "+SameHostCongestion+" ") {
		t.Skipf("%s is not allowed here", SameHostCongestion)
	}
	if procWords(t, "tcp_congestion_control")[0] == SameHostCongestion {
		t.Skipf("the system's default is %s already: a preset cannot be told from it", SameHostCongestion)
	}
	ln, ctx := testListener(t)
	h := Hello{Purpose: PurposeData, Comm: 7, From: 1, To: 0, NStreams: 1}
	type res struct {
		a   Accepted
		err error
	}
	ch := make(chan res, 1)
	go func() {
		a, err := ln.Accept(ctx)
		ch <- res{a, err}
	}()
	tc, err := Dial(ctx, ln.Addr().String(), testSecret, h)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.a.Conn.Close()
	for name, c := range map[string]*net.TCPConn{"dialled": tc, "accepted": r.a.Conn} {
		if got, err := congestionOf(c); err != nil || got != SameHostCongestion {
			t.Errorf("%s socket before NewConn: %q (%v), want %q", name, got, err, SameHostCongestion)
		}
	}
}

// procWords returns the words of a file under /proc/sys/net/ipv4.
func procWords(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		t.Skipf("no %s: %v", name, err)
	}
	return strings.Fields(string(b))
}

// TestConnCongestion checks the algorithm the kernel reports on both ends
// of a loopback connection for each setting.
func TestConnCongestion(t *testing.T) {
	system := procWords(t, "tcp_congestion_control")[0]
	allowed := strings.Join(procWords(t, "tcp_allowed_congestion_control"), " ")
	// A process with CAP_NET_ADMIN (root, as a rule) may set any
	// algorithm the kernel has, allowed or not.
	settable := allowed
	if os.Geteuid() == 0 {
		settable = strings.Join(procWords(t, "tcp_available_congestion_control"), " ")
	}
	auto := system
	if strings.Contains(" "+settable+" ", " "+SameHostCongestion+" ") {
		auto = SameHostCongestion
	}
	for _, c := range []struct{ setting, want string }{
		{"", auto},
		{CongestionAuto, auto},
		{CongestionSystem, system},
		{"reno", "reno"}, // built into every kernel and always allowed
	} {
		a, b := pairOpts(t, 2, Options{Congestion: c.setting})
		for _, conn := range []*Conn{a.(*Conn), b.(*Conn)} {
			for i, s := range conn.streams {
				got, err := congestionOf(s.tc)
				if err != nil {
					t.Fatal(err)
				}
				if got != c.want {
					t.Errorf("setting %q: stream %d has %q, want %q", c.setting, i, got, c.want)
				}
			}
		}
		a.Close()
		b.Close()
	}
}

// TestConnCongestionRefused checks that an algorithm the kernel does not
// have fails NewConn with its name and what is available, and closes the
// sockets.
func TestConnCongestionRefused(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	_, err = NewConn([]*net.TCPConn{client}, Options{Congestion: "nosuchcc"})
	if err == nil || !strings.Contains(err.Error(), `"nosuchcc"`) || !strings.Contains(err.Error(), "available") {
		t.Fatalf("NewConn with an unknown algorithm: %v", err)
	}
	if _, err := client.Write([]byte{1}); err == nil {
		t.Error("the socket is still open after NewConn failed")
	}
}
