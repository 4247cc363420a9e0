package membarrier

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occl/occl/internal/plain"
)

// TestReady: both kinds of barrier are available here (Linux 4.14 and
// later, no sandbox refusing the call) and run without error.
func TestReady(t *testing.T) {
	if !GlobalReady() {
		t.Fatal("membarrier's global expedited command is not available")
	}
	if err := Global(); err != nil {
		t.Fatalf("Global: %v", err)
	}
	if !PrivateReady() {
		t.Fatal("membarrier's private expedited command is not available")
	}
	if err := Private(); err != nil {
		t.Fatalf("Private: %v", err)
	}
}

// TestPrivateOrders runs the asymmetric pattern many times: one thread
// stores its word with a plain store and then loads the other's, the
// other stores its word atomically, issues a Private barrier and loads
// the first one's. At least one of the two must see the other's store.
func TestPrivateOrders(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors")
	}
	if !PrivateReady() {
		t.Fatal("membarrier's private expedited command is not available")
	}
	const rounds = 3000
	var fast, slow atomic.Uint64 // the round each side stored last
	var start atomic.Uint64      // the round both sides may begin
	var fastSaw, slowSaw [rounds]uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= rounds; i++ {
			for start.Load() < i {
			}
			plain.Store(&fast, i)
			fastSaw[i-1] = slow.Load()
		}
	}()
	for i := uint64(1); i <= rounds; i++ {
		start.Store(i)
		slow.Store(i)
		if err := Private(); err != nil {
			t.Fatalf("Private: %v", err)
		}
		slowSaw[i-1] = fast.Load()
		for fast.Load() < i {
		}
	}
	wg.Wait()
	for i := range rounds {
		if r := uint64(i + 1); fastSaw[i] < r && slowSaw[i] < r {
			t.Errorf("round %d: neither side saw the other's store", r)
		}
	}
}
