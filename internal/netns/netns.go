// Package netns builds small networks out of Linux network namespaces for
// tests that need real network stacks: each host is a namespace of its
// own, each network an Ethernet bridge, and each host has one veth per
// network it is on, with an address in 10.233.N.0/24 (N the network's
// index). The bridges live in a namespace of their own too, so the test
// adds nothing to the machine's namespace, and the addresses exist only
// inside namespaces the lab made.
//
// A Lab removes everything it made when the test ends, failed or not:
// processes still running in its namespaces are killed, and the
// namespaces (with their interfaces) deleted. Building a lab needs root
// (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ip and tc commands of
// iproute2; without them New skips the test, saying why.
//
// Processes run inside a host with Host.Command, which is
// "ip netns exec NAME cmd args...": the command sees only the host's
// interfaces and addresses but shares the file system, IPC and PID
// namespaces with the test.
package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Subnet is the first two octets of every address a lab assigns: network
// n is 10.233.n.0/24, and host h has address 10.233.n.(h+1) on it.
const Subnet = "10.233"

// Lab is a set of hosts (network namespaces) joined by networks
// (bridges), all removed when the test ends.
type Lab struct {
	t      testing.TB
	prefix string // unique per lab: namespace and interface names start with it
	sw     string // the namespace holding the bridges

	mu    sync.Mutex
	nets  []*Network
	hosts []*Host
	nsAll []string // every namespace made, for cleanup
}

// Network is one Ethernet segment: a bridge in the lab's switch namespace.
type Network struct {
	lab    *Lab
	index  int
	bridge string
}

// Host is one network namespace with an interface on each of its networks.
type Host struct {
	lab   *Lab
	index int
	// Name is the namespace's name (as ip netns list shows it).
	Name   string
	ifaces map[*Network]*link
}

type link struct {
	inside  string // interface name inside the host: eth0, eth1, ...
	outside string // its peer on the bridge, in the switch namespace
	addr    string
}

// New makes an empty lab, or skips the test if this process cannot make
// network namespaces.
func New(t testing.TB) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: skipped: building network namespaces needs root (run the tests as root, as CI does)")
	}
	for _, cmd := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Skipf("netns: skipped: the %s command of iproute2 is not installed", cmd)
		}
	}
	var b [3]byte
	rand.Read(b[:])
	l := &Lab{t: t, prefix: "ot" + hex.EncodeToString(b[:])}
	l.sw = l.prefix + "-sw"
	if out, err := exec.Command("ip", "netns", "add", l.sw).CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("not permitted")) {
			t.Skipf("netns: skipped: root here may not create network namespaces: %s", bytes.TrimSpace(out))
		}
		t.Fatalf("netns: ip netns add %s: %v: %s", l.sw, err, bytes.TrimSpace(out))
	}
	l.nsAll = append(l.nsAll, l.sw)
	t.Cleanup(l.cleanup)
	l.run("ip", "-n", l.sw, "link", "set", "lo", "up")
	return l
}

// run runs a command and fails the test if it fails.
func (l *Lab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("netns: %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// Network adds a network (a bridge) to the lab. The n-th network made has
// addresses 10.233.n.0/24.
func (l *Lab) Network() *Network {
	l.t.Helper()
	l.mu.Lock()
	n := &Network{lab: l, index: len(l.nets), bridge: fmt.Sprintf("br%d", len(l.nets))}
	l.nets = append(l.nets, n)
	l.mu.Unlock()
	if n.index > 255 {
		l.t.Fatal("netns: more than 256 networks")
	}
	l.run("ip", "-n", l.sw, "link", "add", n.bridge, "type", "bridge")
	l.run("ip", "-n", l.sw, "link", "set", n.bridge, "up")
	return n
}

// Host adds a host on the given networks: a namespace with the loopback
// interface up and, for the i-th network, an interface ethi attached to
// that network's bridge with address 10.233.N.H/24, where N is the
// network's index and H the host's index plus one.
func (l *Lab) Host(nets ...*Network) *Host {
	l.t.Helper()
	l.mu.Lock()
	h := &Host{lab: l, index: len(l.hosts), ifaces: map[*Network]*link{}}
	h.Name = fmt.Sprintf("%s-h%d", l.prefix, h.index)
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	if h.index > 250 {
		l.t.Fatal("netns: more than 251 hosts")
	}
	l.run("ip", "netns", "add", h.Name)
	l.mu.Lock()
	l.nsAll = append(l.nsAll, h.Name)
	l.mu.Unlock()
	l.run("ip", "-n", h.Name, "link", "set", "lo", "up")
	for i, n := range nets {
		k := &link{
			inside:  fmt.Sprintf("eth%d", i),
			outside: fmt.Sprintf("h%dn%d", h.index, n.index),
			addr:    fmt.Sprintf("%s.%d.%d", Subnet, n.index, h.index+1),
		}
		h.ifaces[n] = k
		l.run("ip", "-n", l.sw, "link", "add", k.outside, "type", "veth", "peer", "name", k.inside, "netns", h.Name)
		l.run("ip", "-n", l.sw, "link", "set", k.outside, "master", n.bridge)
		l.run("ip", "-n", l.sw, "link", "set", k.outside, "up")
		l.run("ip", "-n", h.Name, "addr", "add", k.addr+"/24", "dev", k.inside)
		l.run("ip", "-n", h.Name, "link", "set", k.inside, "up")
	}
	return h
}

// cleanup kills what still runs in the lab's namespaces and deletes them.
func (l *Lab) cleanup() {
	l.mu.Lock()
	all := append([]string(nil), l.nsAll...)
	l.mu.Unlock()
	for _, ns := range all {
		l.killAll(ns)
	}
	for i := len(all) - 1; i >= 0; i-- {
		if out, err := exec.Command("ip", "netns", "del", all[i]).CombinedOutput(); err != nil {
			l.t.Errorf("netns: ip netns del %s: %v: %s", all[i], err, bytes.TrimSpace(out))
		}
	}
}

// killAll SIGKILLs every process in namespace ns (all of them started by
// the test) and waits up to 5 s for them to be gone.
func (l *Lab) killAll(ns string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.t.Errorf("netns: processes %v still in %s after SIGKILL", pids, ns)
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Index is the network's index N: its addresses are 10.233.N.0/24.
func (n *Network) Index() int { return n.index }

// Command returns a command, not yet started, that runs name with args
// inside the host's namespace. Its environment is the test's unless set.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

func (h *Host) link(n *Network) *link {
	h.lab.t.Helper()
	k, ok := h.ifaces[n]
	if !ok {
		h.lab.t.Fatalf("netns: host %s is not on network %d", h.Name, n.index)
	}
	return k
}

// Addr returns the host's IPv4 address on network n.
func (h *Host) Addr(n *Network) string { return h.link(n).addr }

// IfName returns the name of the host's interface on network n.
func (h *Host) IfName(n *Network) string { return h.link(n).inside }

// SetLink takes the host's link to network n down or up at the bridge's
// end, like pulling the cable out of the switch: the host's interface
// loses its carrier and nothing passes either way. Connections stay open
// and see silence, as across a real partition.
func (h *Host) SetLink(n *Network, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	k := h.link(n)
	if out, err := exec.Command("ip", "-n", h.lab.sw, "link", "set", k.outside, state).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: set %s's link to network %d %s: %v: %s", h.Name, n.index, state, err, bytes.TrimSpace(out))
	}
	if up {
		// Forget the neighbours that failed to answer while the link was
		// down, here and on the other hosts of the network, so that
		// traffic resumes at once.
		h.lab.mu.Lock()
		hosts := append([]*Host(nil), h.lab.hosts...)
		h.lab.mu.Unlock()
		for _, o := range hosts {
			if ko, ok := o.ifaces[n]; ok {
				exec.Command("ip", "-n", o.Name, "neigh", "flush", "dev", ko.inside).Run()
			}
		}
	}
	return nil
}

// SetRate limits the host's link to network n to rate (tc syntax:
// "100mbit", "1gbit") in both directions with a token bucket filter.
func (h *Host) SetRate(n *Network, rate string) error {
	k := h.link(n)
	for _, c := range [][]string{
		{"tc", "-n", h.Name, "qdisc", "replace", "dev", k.inside, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "100ms"},
		{"tc", "-n", h.lab.sw, "qdisc", "replace", "dev", k.outside, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "100ms"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("netns: %s: %v: %s", strings.Join(c, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// Counters returns the bytes the host has received and sent on its
// interface to network n since it was made.
func (h *Host) Counters(n *Network) (rx, tx uint64, err error) {
	k := h.link(n)
	out, err := exec.Command("ip", "-n", h.Name, "-j", "-s", "link", "show", "dev", k.inside).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("netns: statistics of %s in %s: %w", k.inside, h.Name, err)
	}
	var st []struct {
		Stats struct {
			RX struct{ Bytes uint64 } `json:"rx"`
			TX struct{ Bytes uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &st); err != nil || len(st) != 1 {
		return 0, 0, errors.Join(fmt.Errorf("netns: statistics of %s in %s: unexpected output %q", k.inside, h.Name, out), err)
	}
	return st[0].Stats.RX.Bytes, st[0].Stats.TX.Bytes, nil
}

// Namespaces lists the namespaces the lab made, the switch's first.
func (l *Lab) Namespaces() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.nsAll...)
}
