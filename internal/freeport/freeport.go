// Package freeport picks a TCP port that is free now and that the kernel
// will not hand out on its own before the caller binds it.
//
// A port found by listening on port 0 and closing the listener lies in the
// kernel's ephemeral range, from which every outgoing connection and every
// other port-0 listener on the host also draws: between the pick and the
// bind, any of them can take it. A rendezvous address is picked long before
// rank 0 binds it (a unique id is made, handed to other processes, then
// served), so On picks below the ephemeral range, where only an explicit
// bind can collide.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Lowest port On picks: above the ports well-known services use.
const lowest = 10000

// tries is how many random ports On tests before it lets the kernel pick.
const tries = 64

// On returns a TCP port on host that is free now, chosen at random below
// the kernel's ephemeral port range (from 10000 up) when the range is
// known and leaves room; otherwise, or if no port there is free after a few
// tries, one the kernel picks.
func On(host string) (int, error) {
	return pick(host, lowest, ephemeralLow(), tries)
}

// pick tries up to n random ports in [lo, hi) and falls back to port 0.
func pick(host string, lo, hi, n int) (int, error) {
	for i := 0; hi > lo && i < n; i++ {
		p := lo + rand.IntN(hi-lo)
		if ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
			ln.Close()
			return p, nil
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or 0
// where it cannot be read (then On lets the kernel pick).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
