package comm

import (
	"fmt"
	"net"
	"strings"
)

// netIface is what interface selection needs to know about one network
// interface.
type netIface struct {
	name  string
	up    bool
	addrs []net.IP
}

// localIfaces lists this host's interfaces in the kernel's order.
func localIfaces() ([]netIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	out := make([]netIface, 0, len(ifs))
	for i := range ifs {
		ni := netIface{name: ifs[i].Name, up: ifs[i].Flags&net.FlagUp != 0}
		addrs, _ := ifs[i].Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ni.addrs = append(ni.addrs, n.IP)
			}
		}
		out = append(out, ni)
	}
	return out, nil
}

// InterfaceAddr returns the address occl listens on for an
// OCCL_SOCKET_IFNAME value, which has the syntax of NCCL_SOCKET_IFNAME: a
// comma-separated list of interface name prefixes ("eth,ib" matches eth0
// and ib1), exact names when the list starts with "=" ("=eth0"), or
// prefixes to exclude when it starts with "^" ("^docker,lo"). The first
// matching interface that is up and has an address is used, its IPv4
// address if it has one, else its first IPv6 address. No such interface is
// an error naming the interfaces the host has.
func InterfaceAddr(spec string) (string, error) {
	ifs, err := localIfaces()
	if err != nil {
		return "", fmt.Errorf("occl: OCCL_SOCKET_IFNAME=%s: %w", spec, err)
	}
	return pickIface(spec, ifs)
}

// pickIface is InterfaceAddr over a given list of interfaces.
func pickIface(spec string, ifs []netIface) (string, error) {
	exclude, exact := false, false
	list := strings.TrimSpace(spec)
	switch {
	case strings.HasPrefix(list, "^"):
		exclude, list = true, list[1:]
	case strings.HasPrefix(list, "="):
		exact, list = true, list[1:]
	}
	var pats []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pats = append(pats, p)
		}
	}
	if len(pats) == 0 && !exclude {
		return "", fmt.Errorf("occl: OCCL_SOCKET_IFNAME=%q names no interface", spec)
	}
	matches := func(name string) bool {
		for _, p := range pats {
			if name == p || (!exact && strings.HasPrefix(name, p)) {
				return !exclude
			}
		}
		return exclude
	}
	var names, unusable []string
	for _, ifi := range ifs {
		names = append(names, ifi.name)
		if !matches(ifi.name) {
			continue
		}
		if !ifi.up || len(ifi.addrs) == 0 {
			unusable = append(unusable, ifi.name)
			continue
		}
		for _, ip := range ifi.addrs {
			if ip.To4() != nil {
				return ip.String(), nil
			}
		}
		return ifi.addrs[0].String(), nil
	}
	if len(unusable) > 0 {
		return "", fmt.Errorf("occl: OCCL_SOCKET_IFNAME=%s: interface %s is down or has no address", spec, strings.Join(unusable, ", "))
	}
	return "", fmt.Errorf("occl: OCCL_SOCKET_IFNAME=%s matches none of this host's interfaces (%s)", spec, strings.Join(names, ", "))
}

// ListenAddr returns the address of rank r's data listener (host:port),
// where the other ranks connect to r, as r announced it at bootstrap; ""
// for a communicator that is not bootstrapped over TCP (NewLocal).
func (c *Communicator) ListenAddr(r int) string {
	f, ok := c.linker.(*tcpLinker)
	if !ok || r < 0 || r >= len(f.addrs) {
		return ""
	}
	return f.addrs[r]
}
