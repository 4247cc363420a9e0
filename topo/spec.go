package topo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// FromSpec builds a topology from OCCL_TOPO's value: either the path of a
// JSON topology file, or a spec of comma-separated key=value pairs:
//
//	hosts=HxR     H hosts of R ranks each (rank r on host r/R); required
//	hbd=BW        intra-host bandwidth, e.g. 8GB/s, 800MB/s, 100Gb/s
//	eps=BW        packet-network bandwidth per NIC
//	ocs=BW        optical circuit bandwidth
//	hbd_lat=D     latencies, e.g. 2us, 0.5ms (also eps_lat, ocs_lat)
//	nics=rank     one NIC per rank, on rail = local rank (default)
//	nics=host     one NIC per host, shared by its ranks
//	rail_only=1   no packet path across rails of different hosts
//	grid=XxY      hosts on an X by Y grid (host h at x = h mod X,
//	              y = h / X) that reach only their row and column (RailX)
//	ocs_ports=N   N optical-switch ports per host, port i driven by
//	              local rank i mod R (ocs_shared=1: usable by every rank)
//	circuits=L    circuits between hosts, L a list such as 0-1/1-2/0-1
//	              (a pair may repeat), each on free ports of both hosts
//	switch_ports=L
//	              the OCS ports' numbers on the optical switch, in NIC
//	              order (host by host, port by port), L a list such as
//	              8/9 or 16-23/40-47 (ranges inclusive); default 0, 1, ...
//	              in that order. A host described apart from its fabric
//	              (a spare) names the switch ports it is cabled to so.
//
// For example "hosts=4x2,hbd=8GB/s,eps=1GB/s" emulates four hosts of two
// ranks whose intra-host links are eight times faster than the network.
func FromSpec(spec string) (*Topology, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("topology: empty spec")
	}
	if !strings.Contains(spec, "=") {
		return Load(spec)
	}
	kv := map[string]string{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("topology spec %q: %q is not key=value", spec, part)
		}
		kv[strings.ToLower(k)] = v
	}
	hs, ok := kv["hosts"]
	if !ok {
		return nil, fmt.Errorf("topology spec %q: hosts=HxR is required", spec)
	}
	h, r, err := parseGrid(hs)
	if err != nil {
		return nil, fmt.Errorf("topology spec %q: %w", spec, err)
	}
	t := Uniform(h, r)
	t.Name = spec
	for k, v := range kv {
		var err error
		switch k {
		case "hosts":
		case "hbd", "eps", "ocs":
			p := t.Classes[LinkClass(k)]
			p.Bandwidth, err = ParseBandwidth(v)
			t.Classes[LinkClass(k)] = p
		case "hbd_lat", "eps_lat", "ocs_lat":
			c := LinkClass(strings.TrimSuffix(k, "_lat"))
			p := t.Classes[c]
			var d time.Duration
			d, err = time.ParseDuration(v)
			p.Latency = d.Seconds()
			t.Classes[c] = p
		case "nics":
			switch v {
			case "rank":
			case "host":
				t.shareNICs()
			default:
				err = fmt.Errorf("nics=%s: want rank or host", v)
			}
		case "rail_only":
			t.RailOnly = v == "1" || v == "true"
		case "grid":
			var x, y int
			if x, y, err = parseGrid(v); err == nil && x*y != len(t.Hosts) {
				err = fmt.Errorf("grid=%s has %d places for %d hosts", v, x*y, len(t.Hosts))
			}
			for hi := range t.Hosts {
				t.Hosts[hi].Coord = []int{hi % max(x, 1), hi / max(x, 1)}
			}
			t.GridOnly = true
		case "ocs_ports", "ocs_shared", "circuits", "switch_ports":
			// Applied below, once NICs are settled.
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return nil, fmt.Errorf("topology spec %q: %w", spec, err)
		}
	}
	if err := t.specCircuits(kv); err != nil {
		return nil, fmt.Errorf("topology spec %q: %w", spec, err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// specCircuits applies the ocs_ports, ocs_shared and circuits keys.
func (t *Topology) specCircuits(kv map[string]string) error {
	if v, ok := kv["ocs_ports"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("ocs_ports=%s: want a count", v)
		}
		t.AddPorts(n, kv["ocs_shared"] == "1" || kv["ocs_shared"] == "true")
	}
	if v, ok := kv["switch_ports"]; ok {
		if err := t.setSwitchPorts(v); err != nil {
			return err
		}
	}
	v, ok := kv["circuits"]
	if !ok || v == "" {
		return nil
	}
	for _, pair := range strings.Split(v, "/") {
		a, b, ok := strings.Cut(pair, "-")
		ha, err1 := strconv.Atoi(a)
		hb, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("circuits=%s: %q is not HOST-HOST", v, pair)
		}
		if err := t.Connect(ha, hb, 0); err != nil {
			return err
		}
	}
	return nil
}

// setSwitchPorts applies switch_ports=v: the switch ports of t's OCS NICs
// in NIC order.
func (t *Topology) setSwitchPorts(v string) error {
	var ports []int
	for _, item := range strings.Split(v, "/") {
		a, b, isRange := strings.Cut(item, "-")
		lo, err1 := strconv.Atoi(a)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.Atoi(b)
		}
		if err1 != nil || err2 != nil || lo < 0 || hi < lo {
			return fmt.Errorf("switch_ports=%s: %q is not a port or an ascending range of ports", v, item)
		}
		for p := lo; p <= hi; p++ {
			ports = append(ports, p)
		}
	}
	nics := t.SwitchPorts()
	if len(ports) != len(nics) {
		return fmt.Errorf("switch_ports=%s: %d ports for %d OCS NICs", v, len(ports), len(nics))
	}
	for k, i := range nics {
		p := ports[k]
		t.NICs[i].SwitchPort = &p
	}
	return nil
}

// shareNICs gives every host a single NIC that all its ranks use.
func (t *Topology) shareNICs() {
	t.NICs = t.NICs[:0]
	for h := range t.Hosts {
		t.NICs = append(t.NICs, NIC{Host: h, Name: "nic0", Rail: 0, Class: EPS})
	}
	for r := range t.Ranks {
		t.Ranks[r].NIC = t.Ranks[r].Host
		t.Ranks[r].Rail = 0
	}
}

func parseGrid(s string) (int, int, error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want AxB", s)
	}
	h, err1 := strconv.Atoi(a)
	r, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || h < 1 || r < 1 {
		return 0, 0, fmt.Errorf("%q: want AxB, both positive", s)
	}
	return h, r, nil
}

// ParseBandwidth parses a bandwidth such as "8GB/s", "800MB/s", "100Gb/s"
// or "1.5e9" (bytes per second) into bytes per second. Decimal prefixes.
func ParseBandwidth(s string) (float64, error) {
	v := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	units := []struct {
		suffix string
		mult   float64
	}{
		{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"Gb", 1e9 / 8}, {"Mb", 1e6 / 8}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			mult, v = u.mult, strings.TrimSuffix(v, u.suffix)
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("bad bandwidth %q", s)
	}
	return f * mult, nil
}

// FromEnv returns the topology OCCL_TOPO describes, or nil if it is unset.
func FromEnv() (*Topology, error) {
	spec := os.Getenv("OCCL_TOPO")
	if spec == "" {
		return nil, nil
	}
	return FromSpec(spec)
}
