package plain

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestWhole: a reader loading the word while the writer stores values
// whose halves agree never sees a mix of two stores, and sees them in
// order.
func TestWhole(t *testing.T) {
	var w atomic.Uint64
	const n = 1 << 20
	var wg sync.WaitGroup
	var stop atomic.Bool
	errs := make(chan string, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		for last != n && !stop.Load() {
			v := w.Load()
			hi, lo := v>>32, v&0xffffffff
			if hi != lo {
				errs <- "torn"
				return
			}
			if lo < last {
				errs <- "went back"
				return
			}
			last = lo
		}
	}()
	for i := uint64(1); i <= n; i++ {
		Store(&w, i<<32|i)
	}
	stop.Store(true) // a reader that missed the last store ends too
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
	if got := w.Load(); got != n<<32|n {
		t.Fatalf("last value %#x", got)
	}
}
