package topo

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// LocalHost is what discovery finds on this machine.
type LocalHost struct {
	Hostname  string       `json:"hostname"`
	HostID    string       `json:"host_id"`
	NUMANodes []NUMANode   `json:"numa_nodes"`
	NICs      []LocalNIC   `json:"nics"`
	RDMA      []RDMADevice `json:"rdma_devices"`
}

// NUMANode is one NUMA node and its CPUs.
type NUMANode struct {
	ID   int   `json:"id"`
	CPUs []int `json:"cpus"`
}

// LocalNIC is a network interface of this machine.
type LocalNIC struct {
	Name string `json:"name"`
	NUMA int    `json:"numa"`
	// SpeedMbps is the link speed the driver reports (0 if unknown, as for
	// most virtual interfaces).
	SpeedMbps int      `json:"speed_mbps"`
	Up        bool     `json:"up"`
	Addrs     []string `json:"addrs,omitempty"`
	// RDMA is the RDMA device behind the interface ("" if none).
	RDMA string `json:"rdma,omitempty"`
}

// RDMADevice is an RDMA device (InfiniBand HCA or RoCE NIC).
type RDMADevice struct {
	Name  string   `json:"name"`
	Ports []string `json:"ports"`
	NUMA  int      `json:"numa"`
}

// Discover describes this machine from sysfs: NUMA nodes and their CPUs,
// network interfaces (except loopback) with their NUMA node, speed and
// addresses, and RDMA devices with the interfaces they serve (through
// github.com/Mellanox/rdmamap). Anything missing — no NUMA information, no
// RDMA device — is left empty rather than failing.
func Discover() *LocalHost {
	h := &LocalHost{HostID: LocalHostID()}
	h.Hostname, _ = os.Hostname()
	h.NUMANodes = discoverNUMA("/sys/devices/system/node")
	h.NICs = discoverNICs("/sys/class/net")
	for _, name := range rdmamap.GetRdmaDeviceList() {
		d := RDMADevice{Name: name, Ports: rdmamap.GetPorts(name), NUMA: readInt(filepath.Join("/sys/class/infiniband", name, "device/numa_node"), 0)}
		if d.NUMA < 0 {
			d.NUMA = 0
		}
		h.RDMA = append(h.RDMA, d)
	}
	for i := range h.NICs {
		if dev, err := rdmamap.GetRdmaDeviceForNetdevice(h.NICs[i].Name); err == nil {
			h.NICs[i].RDMA = dev
		}
	}
	return h
}

func discoverNUMA(dir string) []NUMANode {
	entries, _ := os.ReadDir(dir)
	var out []NUMANode
	for _, e := range entries {
		id, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if err != nil || !strings.HasPrefix(e.Name(), "node") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name(), "cpulist"))
		out = append(out, NUMANode{ID: id, CPUs: ParseCPUList(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) == 0 {
		if cpus, err := AllowedCPUs(); err == nil {
			out = []NUMANode{{ID: 0, CPUs: cpus}}
		}
	}
	return out
}

func discoverNICs(dir string) []LocalNIC {
	entries, _ := os.ReadDir(dir)
	var out []LocalNIC
	for _, e := range entries {
		name := e.Name()
		if name == "lo" {
			continue
		}
		base := filepath.Join(dir, name)
		n := LocalNIC{Name: name, NUMA: readInt(filepath.Join(base, "device/numa_node"), 0)}
		if n.NUMA < 0 {
			n.NUMA = 0
		}
		n.SpeedMbps = max(readInt(filepath.Join(base, "speed"), 0), 0)
		state, _ := os.ReadFile(filepath.Join(base, "operstate"))
		n.Up = strings.TrimSpace(string(state)) == "up"
		n.Addrs = interfaceAddrs(name)
		out = append(out, n)
	}
	return out
}

func readInt(path string, def int) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return def
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return v
}

// ParseCPUList parses a Linux CPU list such as "0-3,8,10-11".
func ParseCPUList(s string) []int {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}
