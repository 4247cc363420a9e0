package tcp

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Values of Options.Congestion besides an algorithm's name.
const (
	// CongestionAuto gives SameHostCongestion to a stream whose two ends
	// are addresses of one host and the system's default to the others
	// (the zero value of Options.Congestion means it too).
	CongestionAuto = "auto"
	// CongestionSystem gives every stream the system's default
	// (net.ipv4.tcp_congestion_control).
	CongestionSystem = "system"
)

// SameHostCongestion is the congestion control CongestionAuto gives a
// stream between two addresses of one host. Between them there is no
// network queue for a sender to overrun, but an algorithm that paces, as
// BBR does (a common system default), still spaces the segments of a
// large message with a timer: on loopback the kernel then sends most of
// them from a timer interrupt rather than from the writing call. Cubic
// does not pace. Measured on 2 cores, 2 processes over loopback, BBR
// against cubic as the system default (occl-bench -z 1, 2 interleaved
// rounds, medians): 1 MiB AllReduce 574 / 336 us, 1 MiB AllToAll 281 /
// 190 us, 16 MiB AllReduce 9.3 / 5.9 ms, 8 B and 64 KiB unchanged; Open
// MPI's TCP transport in the same rounds 439 / 377 us and 196 / 187 us.
//
// The choice is made before the connection is, where it can be (see
// presetCongestion): sockets that connected under BBR stayed slower after
// switching to cubic (2 processes, 8 interleaved rounds, medians, switched
// after connecting / cubic from the start: 16 MiB AllReduce 8.69 / 5.59
// ms, 16 MiB AllToAll 4.04 / 2.99 ms; 1 and 4 MiB unchanged), as BBR's
// start marks a socket for the kernel's own pacing and, as we read
// Linux's source, a switch does not clear the mark.
const SameHostCongestion = "cubic"

// congestionFor returns the congestion control a stream from local to
// remote gets under setting s; "" when it is the system's default.
func congestionFor(s string, local, remote net.Addr) string {
	switch s {
	case "", CongestionAuto:
		if sameHost(local, remote) {
			return SameHostCongestion
		}
		return ""
	case CongestionSystem:
		return ""
	}
	return s
}

// sameHost reports whether two TCP addresses are on one host: the same IP
// address, or loopback addresses both.
func sameHost(local, remote net.Addr) bool {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	return l.IP.Equal(r.IP) || (l.IP.IsLoopback() && r.IP.IsLoopback())
}

// localIP reports whether ip is an address of this host: a loopback
// address or one of its interfaces'.
func localIP(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// presetCongestion gives a socket that is not connected yet
// SameHostCongestion: every listener (the sockets it accepts inherit it),
// and a dialling socket whose peer is an address of this host. NewConn then
// sets what the setting asks for the connected stream, the system's
// default included; a refusal here leaves the system's default.
func presetCongestion(rc syscall.RawConn) {
	rc.Control(func(fd uintptr) {
		unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, SameHostCongestion)
	})
}

// dialControl is the net.Dialer's Control of occl's dials: it presets the
// congestion control of a socket about to connect to this host.
func dialControl(_, address string, rc syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if ip := net.ParseIP(host); err == nil && ip != nil && localIP(ip) {
		presetCongestion(rc)
	}
	return nil
}

// applyCongestion gives the connected stream tc what setting asks (see
// Options.Congestion). Under CongestionAuto and CongestionSystem a refusal
// (an algorithm the kernel lacks, or does not allow unprivileged processes:
// net.ipv4.tcp_allowed_congestion_control) leaves what the socket has; a
// name the caller chose must be accepted.
func applyCongestion(tc *net.TCPConn, setting string) error {
	name := congestionFor(setting, tc.LocalAddr(), tc.RemoteAddr())
	chosen := name != "" && setting != "" && setting != CongestionAuto
	if name == "" {
		if name = systemCongestion(); name == "" {
			return nil
		}
	}
	if cur, err := congestionOf(tc); err == nil && cur == name {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	if serr != nil && chosen {
		return fmt.Errorf("congestion control %q: %w (available: %s)", name, serr, procFirstLine("tcp_allowed_congestion_control"))
	}
	return nil
}

// congestionOf returns the congestion control algorithm of a socket, as
// the kernel reports it.
func congestionOf(tc *net.TCPConn) (string, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(name, "\x00"), gerr
}

// systemCongestion returns the system's default congestion control, ""
// if it cannot be read.
func systemCongestion() string {
	f := strings.Fields(procFirstLine("tcp_congestion_control"))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// procFirstLine returns a file of /proc/sys/net/ipv4, trimmed ("" if it
// cannot be read).
func procFirstLine(name string) string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
