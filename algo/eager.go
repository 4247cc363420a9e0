package algo

import "runtime"

// eagerBlock is the largest message a schedule sends inline (on the
// calling goroutine, before its receives) when the process can run more
// than one thread at a time: above it, sending from a goroutine while
// receiving overlaps the two copies. A process with one processor
// (GOMAXPROCS 1, as occl sets it when it binds each of a host's ranks to
// one CPU) cannot overlap them, and a goroutine there only adds switches
// (from a thread locked to its goroutine, as a call from C is, each one
// hands the processor to another thread and back): it sends inline every
// message that fits in its connection's eager limit.
const eagerBlock = 64 << 10

// eagerTo reports whether a message of n bytes fits the eager limit of
// every peer in peers and, unless the process has one processor,
// eagerBlock.
func eagerTo(p Peers, peers []int, n int) bool {
	ep, ok := p.(EagerPeers)
	if !ok {
		return false
	}
	for _, to := range peers {
		if n > ep.EagerLimit(to) {
			return false
		}
	}
	return n <= eagerBlock || oneProcessor()
}

// eagerAllToAll reports whether every block this rank sends fits in its
// connection's eager limit and, unless the process has one processor,
// eagerBlock.
func eagerAllToAll(p Peers, sendLens []int) bool {
	me := p.Rank()
	return eagerEach(p, len(sendLens), func(to int) int {
		if to == me {
			return 0
		}
		return sendLens[to]
	})
}

// eagerMessages is eagerAllToAll for messages, nil where there is none.
func eagerMessages(p Peers, msgs [][]byte) bool {
	return eagerEach(p, len(msgs), func(to int) int { return len(msgs[to]) })
}

// eagerEach is eagerAllToAll for n peers, size(to) bytes to each (0:
// nothing).
func eagerEach(p Peers, n int, size func(to int) int) bool {
	ep, ok := p.(EagerPeers)
	if !ok {
		return false
	}
	large := false
	for to := range n {
		if m := size(to); m > 0 {
			if m > ep.EagerLimit(to) {
				return false
			}
			large = large || m > eagerBlock
		}
	}
	return !large || oneProcessor()
}

// oneProcessor reports whether the process runs Go code on one thread at
// a time (GOMAXPROCS 1). Asked only for messages above eagerBlock:
// GOMAXPROCS takes the scheduler's lock.
func oneProcessor() bool { return runtime.GOMAXPROCS(0) == 1 }
