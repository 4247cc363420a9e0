package comm_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// initAll runs Init for every rank of size in goroutines and returns the
// communicators and errors by rank.
func initAll(t *testing.T, id comm.UniqueID, size int, opts ...comm.Option) ([]*comm.Communicator, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, errs := make([]*comm.Communicator, size), make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = comm.Init(ctx, id, r, size, opts...)
		}()
	}
	wg.Wait()
	t.Cleanup(func() { closeAll(cs) })
	return cs, errs
}

// closeAll closes communicators concurrently, as their ranks would.
func closeAll(cs []*comm.Communicator) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
}

// TestSocketIfnameUnknown: an interface that does not exist makes Init
// fail at once on every rank, naming the variable, rather than being
// ignored.
func TestSocketIfnameUnknown(t *testing.T) {
	t.Setenv("OCCL_SOCKET_IFNAME", "occlnosuch9")
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, errs := initAll(t, id, 2, comm.WithTransport(comm.TransportTCP))
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "OCCL_SOCKET_IFNAME=occlnosuch9 matches none") {
			t.Errorf("rank %d: Init = %v, want an error about OCCL_SOCKET_IFNAME", r, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Init took %v to refuse the interface", d)
	}
	if _, err := comm.NewUniqueID(); err == nil || !strings.Contains(err.Error(), "occlnosuch9") {
		t.Errorf("NewUniqueID = %v, want an error about OCCL_SOCKET_IFNAME", err)
	}
}

// TestSocketIfnameListeners: with the rendezvous on a non-loopback address
// and OCCL_SOCKET_IFNAME=lo, every rank's data listener is on the loopback
// interface, and a Split child's listeners follow. (Two interfaces on
// separate networks are tested in namespaces by TestNetnsSocketIfname.)
func TestSocketIfnameListeners(t *testing.T) {
	var other string
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifi := range ifs {
			if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, _ := ifi.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && other == "" {
					other = n.IP.String()
				}
			}
		}
	}
	if other == "" {
		t.Skip("this host has no non-loopback IPv4 address to put the rendezvous on")
	}
	id, err := comm.NewUniqueIDAt(net.JoinHostPort(other, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OCCL_SOCKET_IFNAME", "lo")
	const size = 3
	cs, errs := initAll(t, id, size, comm.WithTransport(comm.TransportTCP))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range size {
		if a := cs[0].ListenAddr(r); !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("rank %d listens on %q, want 127.0.0.1 (OCCL_SOCKET_IFNAME=lo; rendezvous on %s)", r, a, other)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	subs := make([]*comm.Communicator, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subs[r], errs[r] = cs[r].Split(ctx, 0, r)
		}()
	}
	wg.Wait()
	defer closeAll(subs)
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("split, rank %d: %v", r, errs[r])
		}
		if a := subs[0].ListenAddr(r); !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("split: rank %d listens on %q, want 127.0.0.1", r, a)
		}
	}
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []int32{int32(r)}
			errs[r] = comm.AllReduce(ctx, subs[r], x, x, comm.Sum)
			if errs[r] == nil && x[0] != 3 {
				t.Errorf("rank %d: AllReduce over the split gave %d, want 3", r, x[0])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: AllReduce: %v", r, err)
		}
	}
}
