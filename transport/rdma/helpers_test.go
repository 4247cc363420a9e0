package rdma

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/rdma/verbs"
)

// emuPair opens two emulated devices that reach each other (two "hosts");
// the second is configured by cfgB if it is not nil.
func emuPair(t testing.TB, cfg verbs.EmuConfig, cfgB *verbs.EmuConfig) (*verbs.EmuDevice, *verbs.EmuDevice) {
	t.Helper()
	ns := fmt.Sprintf("rdma-test-%x", rand.Uint64())
	var devs [2]*verbs.EmuDevice
	for i := range devs {
		c := cfg
		if i == 1 && cfgB != nil {
			c = *cfgB
		}
		c.Namespace = ns
		c.Name = fmt.Sprintf("emu%d", i)
		d, err := verbs.OpenEmulated(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return devs[0], devs[1]
}

func openDev(t testing.TB, ed *verbs.EmuDevice, edit func(*DeviceConfig)) *Device {
	t.Helper()
	dc := DeviceConfig{Emulated: ed, GIDIndex: -1}
	if edit != nil {
		edit(&dc)
	}
	d, err := OpenDevice(dc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type pairOpts struct {
	emu    verbs.EmuConfig
	emuB   *verbs.EmuConfig
	a, b   func(*Config)
	devCfg func(*DeviceConfig)
}

// connectPair runs both sides of Connect over an in-process control pipe
// that buffers nothing.
func connectPair(t testing.TB, ca, cb Config) (*Conn, *Conn, error, error) {
	t.Helper()
	x, y := mem.Pipe(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := Connect(ctx, y, cb)
		ch <- res{c, err}
	}()
	a, erra := Connect(ctx, x, ca)
	r := <-ch
	return a, r.c, erra, r.err
}

// pairWith connects a pair over two emulated devices.
func pairWith(t testing.TB, o pairOpts) (*Conn, *Conn) {
	t.Helper()
	a, b, _, _ := pairDevs(t, o)
	return a, b
}

// pairDevs is pairWith that also returns the emulated devices.
func pairDevs(t testing.TB, o pairOpts) (*Conn, *Conn, *verbs.EmuDevice, *verbs.EmuDevice) {
	t.Helper()
	ea, eb := emuPair(t, o.emu, o.emuB)
	comm := rand.Uint64()
	ca := Config{Comm: comm, Epoch: 1, Self: 0, Peer: 1, Device: openDev(t, ea, o.devCfg)}
	cb := Config{Comm: comm, Epoch: 1, Self: 1, Peer: 0, Device: openDev(t, eb, o.devCfg)}
	if o.a != nil {
		o.a(&ca)
	}
	if o.b != nil {
		o.b(&cb)
	}
	a, b, erra, errb := connectPair(t, ca, cb)
	if erra != nil || errb != nil {
		t.Fatalf("Connect: %v / %v", erra, errb)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, ea, eb
}

func pair(t testing.TB) (transport.Conn, transport.Conn) {
	a, b := pairWith(t, pairOpts{})
	return a, b
}

func hdr(seq uint64, step uint32) transport.Header {
	return transport.Header{Kind: transport.KindCollective, Op: 1, DType: 7, Comm: 0xC0FFEE, Epoch: 3, Seq: seq, Step: step, Count: 99, Root: 2}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131) ^ seed
	}
	return b
}

func memPipe() (transport.Conn, transport.Conn) {
	x, y := mem.Pipe(0)
	return x, y
}

func mkfile(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
