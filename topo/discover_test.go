package topo

import (
	"reflect"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	if got := ParseCPUList("0-3,8,10-11\n"); !reflect.DeepEqual(got, []int{0, 1, 2, 3, 8, 10, 11}) {
		t.Fatalf("ParseCPUList = %v", got)
	}
	if got := ParseCPUList(""); len(got) != 0 {
		t.Fatalf("empty list = %v", got)
	}
}

// Discovery runs on any Linux machine: without RDMA devices or NUMA
// information it reports what it can and fails on nothing.
func TestDiscover(t *testing.T) {
	h := Discover()
	if h.HostID == "" || len(h.NUMANodes) == 0 || len(h.NUMANodes[0].CPUs) == 0 {
		t.Fatalf("discovery found no host id or CPUs: %+v", h)
	}
	for _, n := range h.NICs {
		if n.Name == "lo" {
			t.Fatal("loopback listed as a NIC")
		}
		if n.NUMA < 0 || n.SpeedMbps < 0 {
			t.Fatalf("bad NIC %+v", n)
		}
	}
	for _, d := range h.RDMA {
		if d.Name == "" {
			t.Fatalf("unnamed RDMA device %+v", d)
		}
	}
	t.Logf("%d NUMA nodes, %d NICs, %d RDMA devices", len(h.NUMANodes), len(h.NICs), len(h.RDMA))
}
