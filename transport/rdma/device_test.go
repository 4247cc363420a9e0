package rdma

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/occl/occl/transport/rdma/verbs"
)

func TestParseHCA(t *testing.T) {
	cases := []struct {
		spec  string
		dev   string
		ok    bool
		port  int
		isErr bool
	}{
		{"", "mlx5_3", true, 0, false},
		{"mlx5_0:1", "mlx5_0", true, 1, false},
		{"mlx5_0:1", "mlx5_1", false, 0, false},
		{"mlx5", "mlx5_7", true, 0, false},
		{"=mlx5", "mlx5_7", false, 0, false},
		{"=mlx5_7:2", "mlx5_7", true, 2, false},
		{"^mlx5_0", "mlx5_0", false, 0, false},
		{"^mlx5_0", "mlx5_1", true, 0, false},
		{"mlx5_0:1,mlx5_1:2", "mlx5_1", true, 2, false},
		{"mlx5_0:x", "", false, 0, true},
		{"mlx5_0:0", "", false, 0, true},
		{":1", "", false, 0, true},
	}
	for _, tc := range cases {
		f, err := ParseHCA(tc.spec)
		if (err != nil) != tc.isErr {
			t.Fatalf("ParseHCA(%q): %v", tc.spec, err)
		}
		if err != nil {
			continue
		}
		ok, port := f.Match(tc.dev)
		if ok != tc.ok || port != tc.port {
			t.Errorf("ParseHCA(%q).Match(%q) = %v, %d, want %v, %d", tc.spec, tc.dev, ok, port, tc.ok, tc.port)
		}
	}
}

func gid(s string) verbs.GID { return verbs.GID(netip.MustParseAddr(s).As16()) }

func TestSelectGID(t *testing.T) {
	roce := []verbs.GIDEntry{
		{Index: 0, GID: gid("fe80::1"), Type: verbs.GIDTypeRoCEv1},
		{Index: 1, GID: gid("fe80::1"), Type: verbs.GIDTypeRoCEv2},
		{Index: 2, GID: gid("::ffff:10.0.0.5"), Type: verbs.GIDTypeRoCEv1},
		{Index: 3, GID: gid("::ffff:10.0.0.5"), Type: verbs.GIDTypeRoCEv2},
		{Index: 4, GID: gid("2001:db8::5"), Type: verbs.GIDTypeRoCEv2},
		{Index: 5},
	}
	pick := func(tab []verbs.GIDEntry, ll verbs.LinkLayer, want int) int {
		e, err := SelectGID(tab, ll, want)
		if err != nil {
			return -1
		}
		return e.Index
	}
	if got := pick(roce, verbs.LinkLayerEthernet, -1); got != 3 {
		t.Fatalf("RoCE v2 IPv4: picked %d", got)
	}
	if got := pick(roce[:3], verbs.LinkLayerEthernet, -1); got != 1 {
		t.Fatalf("RoCE v2 link-local over v1: picked %d", got)
	}
	if got := pick(append(roce[:2:2], roce[4]), verbs.LinkLayerEthernet, -1); got != 4 {
		t.Fatalf("routable v6 over link-local: picked %d", got)
	}
	if got := pick(roce[:1], verbs.LinkLayerEthernet, -1); got != 0 {
		t.Fatalf("v1 only: picked %d", got)
	}
	if got := pick(roce, verbs.LinkLayerEthernet, 2); got != 2 {
		t.Fatalf("forced index: picked %d", got)
	}
	if pick(roce, verbs.LinkLayerEthernet, 5) != -1 || pick(roce, verbs.LinkLayerEthernet, 9) != -1 {
		t.Fatal("empty or missing forced index accepted")
	}
	if pick(roce[5:], verbs.LinkLayerEthernet, -1) != -1 {
		t.Fatal("a table of zero GIDs gave a GID")
	}
	if got := pick(roce, verbs.LinkLayerInfiniBand, -1); got != 0 {
		t.Fatalf("InfiniBand: picked %d", got)
	}
}

func TestEnvConfig(t *testing.T) {
	t.Setenv("OCCL_IB_HCA", "mlx5_0:1")
	t.Setenv("OCCL_IB_GID_INDEX", "3")
	t.Setenv("OCCL_IB_EMULATE", "ib")
	dc, err := DeviceConfigFromEnv()
	if err != nil || dc.HCA != "mlx5_0:1" || dc.GIDIndex != 3 || !dc.Emulate || !dc.EmulateIB {
		t.Fatalf("%+v %v", dc, err)
	}
	t.Setenv("OCCL_IB_GID_INDEX", "x")
	if _, err := DeviceConfigFromEnv(); err == nil {
		t.Fatal("bad GID index accepted")
	}
	t.Setenv("OCCL_IB_GID_INDEX", "")
	t.Setenv("OCCL_IB_EMULATE", "maybe")
	if _, err := DeviceConfigFromEnv(); err == nil {
		t.Fatal("bad OCCL_IB_EMULATE accepted")
	}

	t.Setenv("OCCL_IB_SLOTS", "8")
	t.Setenv("OCCL_IB_SLOT_SIZE", "16K")
	t.Setenv("OCCL_IB_RNDV_THRESHOLD", "off")
	t.Setenv("OCCL_IB_TC", "106")
	c, err := ConfigFromEnv(Config{})
	if err != nil || c.Slots != 8 || c.SlotSize != 16<<10 || c.RendezvousThreshold != -1 || c.TrafficClass != 106 {
		t.Fatalf("%+v %v", c, err)
	}
	t.Setenv("OCCL_IB_SLOT_SIZE", "100")
	if _, err := ConfigFromEnv(Config{}); err == nil {
		t.Fatal("slot size 100 accepted")
	}
}

// Without OCCL_IB_EMULATE and without a device, opening fails clearly.
func TestOpenDeviceNone(t *testing.T) {
	if verbs.Compiled {
		if infos, err := verbs.Devices(); err != nil || len(infos) > 0 {
			t.Skip("this machine has RDMA devices")
		}
	}
	_, err := OpenDevice(DeviceConfig{GIDIndex: -1})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "OCCL_IB_EMULATE=1") {
		t.Fatalf("OpenDevice without devices: %v", err)
	}
	t.Log(err)
}

// The process's emulated device is shared and reference counted; an HCA
// list that excludes it is refused.
func TestOpenDeviceEmulated(t *testing.T) {
	d1, err := OpenDevice(DeviceConfig{Emulate: true, GIDIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := OpenDevice(DeviceConfig{Emulate: true, GIDIndex: -1, HCA: "emu0:1"})
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || !d1.Emulated() || d1.Name() != "emu0" || d1.GID().Index != 2 || d1.GID().Type != verbs.GIDTypeRoCEv2 {
		t.Fatalf("%v / %v", d1, d2)
	}
	if !strings.Contains(strings.Join(OpenDevices(), ","), "[emulated verbs]") {
		t.Fatalf("OpenDevices = %v", OpenDevices())
	}
	d1.Close()
	d2.Close()
	if _, err := OpenDevice(DeviceConfig{Emulate: true, GIDIndex: -1, HCA: "mlx5_0"}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("HCA excluding the emulated device: %v", err)
	}
}

func TestSysfsGIDAttrs(t *testing.T) {
	root := t.TempDir()
	if _, _, ok := verbs.GIDAttrs(root, "mlx5_0", 1, 3); ok {
		t.Fatal("attributes read from nothing")
	}
	write := func(rel, s string) {
		t.Helper()
		p := root + "/mlx5_0/ports/1/gid_attrs/" + rel
		if err := mkfile(p, s); err != nil {
			t.Fatal(err)
		}
	}
	write("types/3", "RoCE v2\n")
	write("ndevs/3", "ens1f0\n")
	write("types/0", "IB/RoCE v1\n")
	if ty, nd, ok := verbs.GIDAttrs(root, "mlx5_0", 1, 3); !ok || ty != verbs.GIDTypeRoCEv2 || nd != "ens1f0" {
		t.Fatalf("%v %q %v", ty, nd, ok)
	}
	if ty, _, _ := verbs.GIDAttrs(root, "mlx5_0", 1, 0); ty != verbs.GIDTypeRoCEv1 {
		t.Fatalf("%v", ty)
	}
}
