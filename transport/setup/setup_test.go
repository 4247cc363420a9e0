package setup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/setup"
	"github.com/occl/occl/transport/tcp"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		sameHost bool
		want     string // "" : an error
	}{
		{setup.PolicyAuto, true, "shm"},
		{setup.PolicyAuto, false, "tcp"},
		{setup.PolicyTCP, true, "tcp"},
		{setup.PolicyTCP, false, "tcp"},
		{setup.PolicySHM, true, "shm"},
		{setup.PolicySHM, false, ""},
		{setup.PolicyRDMA, true, "rdma"},
		{setup.PolicyRDMA, false, "rdma"},
		{"carrier-pigeon", true, ""},
	} {
		got, err := setup.Choose(tc.policy, tc.sameHost)
		if tc.want == "" {
			if err == nil {
				t.Errorf("Choose(%q, sameHost=%v) = %q, want an error", tc.policy, tc.sameHost, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Choose(%q, sameHost=%v) = %q, %v; want %q", tc.policy, tc.sameHost, got, err, tc.want)
		}
	}
}

// connectPair runs Connect on ranks 0 and 1 of one communicator in this
// process, with f (if set) as both ranks' emulated fabric, and returns each
// rank's connection to the other.
func connectPair(t *testing.T, policy string, sameHost bool, f *emu.Fabric) [2]transport.Conn {
	t.Helper()
	return connectPairWith(t, func(c *setup.Config) {
		c.Policy, c.SameHost, c.Emulation = policy, func(int) bool { return sameHost }, f
	})
}

// connectPairWith is connectPair with the configuration edit makes of
// each rank's (its mesh filled in).
func connectPairWith(t *testing.T, edit func(*setup.Config)) [2]transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	secret := []byte("0123456789abcdef")
	const comm = 0x5e7a9
	var lns [2]*tcp.Listener
	for r := range lns {
		ln, err := tcp.Listen("127.0.0.1:0", secret, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns[r] = ln
	}
	var out [2]transport.Conn
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			peer := 1 - r
			cfg := setup.Config{Mesh: tcp.MeshConfig{Self: r, Comm: comm, Secret: secret, Streams: 1, Listener: lns[r]}}
			edit(&cfg)
			conns, err := setup.Connect(ctx, cfg, []tcp.Endpoint{{Rank: peer, Addr: lns[peer].Addr().String()}})
			if err == nil && len(conns) != 1 {
				err = fmt.Errorf("rank %d: %d connections, want 1", r, len(conns))
			}
			out[r] = conns[peer]
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range out {
		t.Cleanup(func() { c.Close() })
	}
	return out
}

// TestConnectFollowsTheTable checks that each pair gets the transport the
// table chooses, wrapped by the emulation layer when there is one, and
// that the connections carry a frame both ways.
func TestConnectFollowsTheTable(t *testing.T) {
	fabric, err := emu.New(topo.Uniform(2, 1), emu.Config{Local: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fabric.Close()
	for _, tc := range []struct {
		policy   string
		sameHost bool
		f        *emu.Fabric
		want     string
	}{
		{setup.PolicyAuto, false, nil, "tcp"},
		{setup.PolicyAuto, true, nil, "shm"},
		{setup.PolicyTCP, true, nil, "tcp"},
		{setup.PolicySHM, true, fabric, "emu(shm)"},
		{setup.PolicyTCP, false, fabric, "emu(tcp)"},
	} {
		t.Run(fmt.Sprintf("%s/same=%v/%s", tc.policy, tc.sameHost, tc.want), func(t *testing.T) {
			conns := connectPair(t, tc.policy, tc.sameHost, tc.f)
			for r, c := range conns {
				if got := transport.Name(c); got != tc.want {
					t.Errorf("rank %d: transport %q, want %q", r, got, tc.want)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h := transport.Header{Kind: transport.KindCollective, Comm: 1, Seq: 7}
			errs := make(chan error, 2)
			var got [2][4]byte
			for r, c := range conns {
				go func() {
					errs <- transport.Exchange(ctx, c, h, []byte{byte(r), 1, 2, 3}, h, got[r][:])
				}()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for r := range 2 {
				if want := [4]byte{byte(1 - r), 1, 2, 3}; got[r] != want {
					t.Errorf("rank %d received %v, want %v", r, got[r], want)
				}
			}
		})
	}
}

// TestConnectSHMSingleCopy checks that the single-copy settings reach the
// shared-memory connections: what they lend, offer and lend whole.
func TestConnectSHMSingleCopy(t *testing.T) {
	const lendMin, offerMin, wholeMin = 64 << 10, 32 << 10, 32 << 10
	conns := connectPairWith(t, func(c *setup.Config) {
		c.Policy, c.SameHost = setup.PolicySHM, func(int) bool { return true }
		c.CMAThreshold, c.CMAOffer, c.CMAWhole = lendMin, offerMin, wholeMin
	})
	for r, c := range conns {
		l, ok := c.(transport.WholeLender)
		if !ok {
			t.Fatalf("rank %d: %T lends nothing whole", r, c)
		}
		o, ok := c.(transport.Offerer)
		if !ok {
			t.Fatalf("rank %d: %T offers nothing", r, c)
		}
		if l.LendMin() != lendMin || o.OfferMin() != offerMin {
			t.Errorf("rank %d: lends from %d, offers from %d; want %d, %d", r, l.LendMin(), o.OfferMin(), lendMin, offerMin)
		}
		if !l.LendsWhole(make([]byte, wholeMin)) || l.LendsWhole(make([]byte, wholeMin-1)) {
			t.Errorf("rank %d: a payload of %d bytes taken whole is lent: %v, of %d: %v; want true, false",
				r, wholeMin, l.LendsWhole(make([]byte, wholeMin)), wholeMin-1, l.LendsWhole(make([]byte, wholeMin-1)))
		}
	}
}

// TestConnectSHMAcrossHosts checks that forcing shared memory between
// ranks of different hosts fails before any connection is opened.
func TestConnectSHMAcrossHosts(t *testing.T) {
	_, err := setup.Connect(context.Background(), setup.Config{Policy: setup.PolicySHM,
		Mesh:     tcp.MeshConfig{Self: 0, Comm: 1},
		SameHost: func(int) bool { return false }}, []tcp.Endpoint{{Rank: 1, Addr: "127.0.0.1:1"}})
	if err == nil {
		t.Fatal("Connect with shm forced across hosts succeeded")
	}
}
