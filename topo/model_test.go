package topo

import (
	"math"
	"strings"
	"testing"
)

func TestFromSpec(t *testing.T) {
	top, err := FromSpec("hosts=4x2,hbd=8GB/s,eps=1GB/s,eps_lat=20us")
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Hosts) != 4 || len(top.Ranks) != 8 || top.Uniformity() != 2 {
		t.Fatalf("%d hosts, %d ranks", len(top.Hosts), len(top.Ranks))
	}
	if top.Ranks[5].Host != 2 || top.Ranks[5].LocalRank != 1 || top.Ranks[5].Rail != 1 {
		t.Fatalf("rank 5: %+v", top.Ranks[5])
	}
	p := top.Path(0, 1)
	if p.Class != HBD || p.Bandwidth != 8e9 {
		t.Fatalf("intra-host path %+v", p)
	}
	p = top.Path(1, 2)
	if p.Class != EPS || p.Bandwidth != 1e9 || math.Abs(p.Latency-20e-6) > 1e-12 || p.SrcNIC != 1 || p.DstNIC != 2 {
		t.Fatalf("inter-host path %+v", p)
	}
	shared, _ := FromSpec("hosts=2x3,nics=host")
	if shared.Path(1, 4).SrcNIC != 0 || shared.Path(1, 4).DstNIC != 1 {
		t.Fatalf("shared NIC path %+v", shared.Path(1, 4))
	}
	for _, bad := range []string{"hosts=4", "hosts=0x2", "hosts=2x2,eps=fast", "hosts=2x2,colour=red", "hosts=2x2,nics=all", "x=1"} {
		if _, err := FromSpec(bad); err == nil {
			t.Errorf("FromSpec(%q) accepted", bad)
		}
	}
}

func TestRailOnlyAndCircuits(t *testing.T) {
	top := Uniform(3, 2)
	top.RailOnly = true
	if p := top.Path(0, 3); p.Class != None {
		t.Fatalf("cross-rail path on a rail-only fabric: %+v", p)
	}
	if p := top.Path(0, 2); p.Class != EPS {
		t.Fatalf("same-rail path: %+v", p)
	}
	// Add one OCS port per host and a circuit between hosts 0 and 2.
	for h := 0; h < 3; h++ {
		top.NICs = append(top.NICs, NIC{Host: h, Class: OCS, Rail: -1})
	}
	top.Circuits = []Circuit{{A: 6, B: 8, Bandwidth: 50e9}}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := top.Path(1, 4); p.Class != OCS || p.Bandwidth != 50e9 || p.SrcNIC != 6 || p.DstNIC != 8 {
		t.Fatalf("circuit path %+v", p)
	}
	if p := top.Path(4, 1); p.Class != OCS || p.SrcNIC != 8 {
		t.Fatalf("reverse circuit path %+v", p)
	}
	top.Circuits = append(top.Circuits, Circuit{A: 6, B: 7})
	if err := top.Validate(); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("port used twice: %v", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	top, _ := FromSpec("hosts=3x3,hbd=10GB/s")
	back, err := Parse(top.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Ranks) != 9 || back.Classes[HBD].Bandwidth != 10e9 {
		t.Fatalf("round trip lost data: %+v", back)
	}
	if _, err := Parse([]byte(`{"hosts":[{}],"ranks":[{"host":3}]}`)); err == nil {
		t.Fatal("bad host index accepted")
	}
}

func TestParseBandwidth(t *testing.T) {
	cases := map[string]float64{"8GB/s": 8e9, "800MB/s": 800e6, "100Gb/s": 12.5e9, "1.5e9": 1.5e9, "64KB": 64e3}
	for in, want := range cases {
		if got, err := ParseBandwidth(in); err != nil || math.Abs(got-want) > 1e-6*want {
			t.Errorf("ParseBandwidth(%q) = %v, %v", in, got, err)
		}
	}
}

func TestSubsetAndFromHosts(t *testing.T) {
	top, _ := FromSpec("hosts=3x2")
	sub := top.Subset([]int{5, 1, 4})
	if err := sub.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(sub.Hosts) != 2 || sub.Ranks[0].Host != 0 || sub.Ranks[1].Host != 1 || sub.Ranks[2].Host != 0 ||
		sub.Ranks[0].LocalRank != 0 || sub.Ranks[2].LocalRank != 1 {
		t.Fatalf("subset ranks %+v", sub.Ranks)
	}
	if p := sub.Path(0, 2); p.Class != HBD {
		t.Fatalf("ranks 5 and 4 share a host: %+v", p)
	}
	fh := FromHosts([]int{1, 0, 1, 0})
	if err := fh.Validate(); err != nil {
		t.Fatal(err)
	}
	hr := fh.HostRanks()
	if len(hr) != 2 || hr[0][0] != 1 || hr[0][1] != 3 || hr[1][1] != 2 {
		t.Fatalf("host ranks %v", hr)
	}
}
