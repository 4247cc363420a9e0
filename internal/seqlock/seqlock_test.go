package seqlock

import (
	"sync"
	"testing"
)

// TestTorn: readers copying a record that one writer rewrites in a loop
// never accept a copy that mixes two writes, and see every write's value
// in order.
func TestTorn(t *testing.T) {
	const writes = 200000
	var (
		l   Lock
		rec [32]uint64 // every word holds the number of the write
		wg  sync.WaitGroup
	)
	done := make(chan struct{})
	errs := make(chan string, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				var cp [32]uint64
				s := l.ReadBegin()
				cp = rec
				if l.Retry(s) {
					continue
				}
				for _, v := range cp {
					if v != cp[0] {
						errs <- "torn copy accepted"
						return
					}
				}
				if cp[0] < last {
					errs <- "went back"
					return
				}
				last = cp[0]
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	for w := uint64(1); w <= writes; w++ {
		l.WriteBegin()
		for i := range rec {
			rec[i] = w
		}
		l.WriteEnd()
	}
	close(done)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestReadWaitsForWrite: a reader that starts during a write waits for
// its end.
func TestReadWaitsForWrite(t *testing.T) {
	var l Lock
	l.WriteBegin()
	got := make(chan uint64)
	go func() { got <- l.ReadBegin() }()
	l.WriteEnd()
	s := <-got
	if l.Retry(s) {
		t.Fatal("Retry after a read that no write overlapped")
	}
}

// BenchmarkWrite measures a write of nothing: the lock's own cost.
func BenchmarkWrite(b *testing.B) {
	var l Lock
	for range b.N {
		l.WriteBegin()
		l.WriteEnd()
	}
}
