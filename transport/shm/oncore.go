package shm

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/occl/occl/internal/plain"
)

// offCore is this process's record, in the control page of every ring it
// shares with another process, of whether it has given its core away: a
// word, the producer's of the rings it writes and the consumer's of the
// rings it reads, that is 1 while any of its waits is in sched_yield or
// asleep on a futex. A wait for a peer whose word is zero polls on instead
// of yielding its own core (for a while): the peer is running, on another
// core, and about to answer, and a yield would only hand this core to a
// process that waits as well. A peer whose word is set is not running:
// yielding is how it gets a core.
//
// The words are hints: a process the kernel preempts, or one computing
// outside occl, leaves its words at zero, which is why the polling is
// bounded (peerSpin).
var offCore struct {
	// mu guards n and words; a wait holds it only while it marks the
	// words, and Close while it removes a connection's, so that it
	// never unmaps a word a wait is about to store to.
	mu sync.Mutex
	// n counts the process's waits that have given the core away; the
	// words are 1 while it is not zero. Marking only its changes, with
	// plain stores (internal/plain), costs a wait no locked instruction on
	// a line the peers read: with one locked add per word and per yield,
	// 4 processes on 2 cores running 64 B AllToAlls spent 4.5% of their
	// samples marking, 3% since (the mutex's unlock still waits for the
	// stores' lines).
	n     int
	words []*atomic.Uint32
}

// peerSpin is how many rounds a wait under transport.WithCoreYield keeps
// polling, instead of yielding its core, while the peer it waits for is
// marked running: 10-20 us. Measured with 4 processes on 2 cores (occl-bench
// -z 1, 3 interleaved rounds): 8 B AllReduce 6.1-7.1 us without it, 3.9-4.4
// with 4096 rounds, 4.7-11.7 with 1024; 1 KiB AllToAll 4.5-5.2, 4.1-4.6
// and 4.3-4.8 us.
const peerSpin = 4096

// addOffCore adds c's words to the process's words (see offCore), marked
// as the others are.
func addOffCore(c *Conn) {
	offCore.mu.Lock()
	offCore.words = append(offCore.words, c.out.prodOff, c.in.consOff)
	if offCore.n > 0 {
		plain.Store32(c.out.prodOff, 1)
		plain.Store32(c.in.consOff, 1)
	}
	offCore.mu.Unlock()
}

// removeOffCore removes c's words, if they are there.
func removeOffCore(c *Conn) {
	offCore.mu.Lock()
	offCore.words = slices.DeleteFunc(offCore.words, func(w *atomic.Uint32) bool { return w == c.out.prodOff || w == c.in.consOff })
	offCore.mu.Unlock()
}

// offCoreDuring runs f, which gives the core away, with the process marked
// off core in every ring it shares.
func offCoreDuring(f func()) {
	markOffCore(1)
	f()
	markOffCore(-1)
}

// markOffCore adds d to the count of waits off core and marks the words
// if the count became or stopped being zero.
func markOffCore(d int) {
	offCore.mu.Lock()
	was := offCore.n
	offCore.n += d
	if (was == 0) != (offCore.n == 0) {
		v := uint32(0)
		if offCore.n > 0 {
			v = 1
		}
		for _, w := range offCore.words {
			plain.Store32(w, v)
		}
	}
	offCore.mu.Unlock()
}
