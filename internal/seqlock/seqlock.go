// Package seqlock is a sequence lock: one writer at a time updates data
// that readers copy without blocking it, retrying when a write overlapped
// their copy. On amd64 the writer makes no locked instruction: its two
// stores of the sequence number are plain stores, which total store order
// keeps in order with the data stores between them, where a mutex costs a
// locked compare-and-swap and a locked add. It suits data written on
// every operation and read seldom, such as a flight record.
//
// A reader's copy may be torn while a write overlaps it: it must copy
// into its own memory, use nothing of the copy until Retry reports it
// whole, and never follow a pointer or index of a torn copy. With the race
// detector on (which would report the overlapping copies) and on other
// architectures the lock is a mutex, and Retry never asks for a retry.
package seqlock

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/occl/occl/internal/plain"
)

// Lock is a sequence lock. The zero value is unlocked.
type Lock struct {
	// seq is odd while a write is under way.
	seq atomic.Uint64
	// mu serializes everything where plain.Enabled is false.
	mu sync.Mutex
}

// WriteBegin starts a write. Writers must not overlap: the caller
// serializes them (only mutex mode would do it for it).
func (l *Lock) WriteBegin() {
	if !plain.Enabled {
		l.mu.Lock()
		return
	}
	plain.Store(&l.seq, l.seq.Load()+1)
}

// WriteEnd ends the write WriteBegin started.
func (l *Lock) WriteEnd() {
	if !plain.Enabled {
		l.mu.Unlock()
		return
	}
	plain.Store(&l.seq, l.seq.Load()+1)
}

// ReadBegin starts a read and returns what to pass to Retry. It waits
// while a write is under way.
func (l *Lock) ReadBegin() uint64 {
	if !plain.Enabled {
		l.mu.Lock()
		return 0
	}
	for {
		if s := l.seq.Load(); s&1 == 0 {
			return s
		}
		runtime.Gosched()
	}
}

// Retry ends the read ReadBegin started and reports whether a write
// overlapped it: the copy made since is then torn and must be made again.
func (l *Lock) Retry(s uint64) bool {
	if !plain.Enabled {
		l.mu.Unlock()
		return false
	}
	return l.seq.Load() != s
}
