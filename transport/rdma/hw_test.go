//go:build rdma

package rdma

// Integration tests on a real RDMA device (InfiniBand HCA, RoCE NIC, or
// soft-RoCE): go test -tags rdma ./transport/rdma. They select the device
// as a communicator would (OCCL_IB_HCA, OCCL_IB_GID_INDEX) and skip when
// the machine has none.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
	"github.com/occl/occl/transport/transporttest"
)

// hwDevice opens the device the environment selects, or skips.
func hwDevice(t testing.TB) *Device {
	t.Helper()
	infos, err := verbs.Devices()
	if err != nil {
		t.Skipf("no RDMA device: %v", err)
	}
	if len(infos) == 0 {
		t.Skip("no RDMA device: ibv_get_device_list returned none")
	}
	dc, err := DeviceConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	dc.Emulate = false
	d, err := OpenDevice(dc)
	if err != nil {
		t.Skipf("no usable RDMA device among %v: %v", infos, err)
	}
	t.Cleanup(func() { d.Close() })
	t.Logf("device %v", d)
	return d
}

// hwPair connects two queue pairs of the device to each other (loopback
// through the HCA).
func hwPair(t testing.TB, d *Device, edit func(*Config)) (*Conn, *Conn) {
	t.Helper()
	ca := Config{Comm: 42, Epoch: 1, Self: 0, Peer: 1, Device: d}
	cb := Config{Comm: 42, Epoch: 1, Self: 1, Peer: 0, Device: d}
	if edit != nil {
		edit(&ca)
		edit(&cb)
	}
	a, b, erra, errb := connectPair(t, ca, cb)
	if erra != nil || errb != nil {
		t.Fatalf("Connect: %v / %v", erra, errb)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestHardwareConformance(t *testing.T) {
	d := hwDevice(t)
	transporttest.Run(t, func(t testing.TB) (transport.Conn, transport.Conn) { return hwPair(t, d, nil) })
	t.Run("small-window", func(t *testing.T) {
		transporttest.Run(t, func(t testing.TB) (transport.Conn, transport.Conn) {
			return hwPair(t, d, func(c *Config) { c.Slots, c.SlotSize = 4, 4096 })
		})
	})
}

func TestHardwareRendezvousAndCredits(t *testing.T) {
	d := hwDevice(t)
	a, b := hwPair(t, d, func(c *Config) { c.Slots, c.SlotSize, c.RendezvousChunk = 4, 256, 1<<20 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes := []int{0, 1, 100, 5000, 3<<20 + 1}
	go func() {
		for i, n := range sizes {
			a.Send(ctx, hdr(uint64(i), 0), pattern(n, byte(i)))
		}
	}()
	for i, n := range sizes {
		buf := make([]byte, n)
		if err := b.Recv(ctx, hdr(uint64(i), 0), buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, pattern(n, byte(i))) {
			t.Fatalf("frame %d corrupted", i)
		}
	}
	if st := a.Stats(); st.RendezvousFrames == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A bad remote key gives a remote access error on the device too.
func TestHardwareBadRemoteKey(t *testing.T) {
	d := hwDevice(t)
	a, b := hwPair(t, d, nil)
	b.hookCTS = func(c *cts) { c.rkey ^= 0xffff }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, hdr(1, 0), make([]byte, 1<<20)) }()
	go b.Recv(ctx, hdr(1, 0), make([]byte, 1<<20))
	if err := <-sent; !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Send with a bad remote key: %v", err)
	}
}
