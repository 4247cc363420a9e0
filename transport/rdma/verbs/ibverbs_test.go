//go:build rdma && cgo

package verbs

import "testing"

// TestDevices lists the machine's devices through libibverbs; it skips
// when there are none.
func TestDevices(t *testing.T) {
	infos, err := Devices()
	if err != nil {
		t.Fatalf("ibv_get_device_list: %v", err)
	}
	if len(infos) == 0 {
		t.Skip("no RDMA device: ibv_get_device_list returned none")
	}
	for _, in := range infos {
		d, err := Open(in.Name)
		if err != nil {
			t.Fatalf("open %s: %v", in.Name, err)
		}
		a, err := d.Query()
		if err != nil {
			t.Fatal(err)
		}
		for p := 1; p <= a.PhysPortCnt; p++ {
			pa, err := d.QueryPort(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s port %d: %v %v MTU %d LID %d, %d GIDs", in.Name, p, pa.State, pa.LinkLayer, pa.ActiveMTU.Bytes(), pa.LID, pa.GIDTableLen)
		}
		if err := d.AsyncError(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	if _, err := Open("no-such-device"); err == nil {
		t.Fatal("opened a device that does not exist")
	}
}
