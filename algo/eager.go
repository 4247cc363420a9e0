package algo

import "runtime"

// eagerBlock is the largest message a schedule sends inline (on the
// calling goroutine, before its receives) when the rank can keep more than
// one CPU busy: above it, sending from a goroutine while receiving overlaps
// the two copies. A rank with one CPU's worth (see CPUPeers; a process
// with GOMAXPROCS 1, as occl sets it when it binds each of a host's ranks
// to one CPU) cannot overlap them, and a goroutine there only adds
// switches (from a thread locked to its goroutine, as a call from C is,
// each one hands the processor to another thread and back), or takes a
// CPU from another rank of the host: it sends inline every message that
// fits in its connection's eager limit.
const eagerBlock = 64 << 10

// CPUPeers is implemented by Peers that know how many CPUs their rank may
// keep busy at once: its share of its machine's, when the machine runs
// several ranks. Schedules send from a goroutine while they receive only
// when it is more than one. Without it, the process's GOMAXPROCS decides.
type CPUPeers interface {
	Peers
	// CPUs returns the number of CPUs the rank may keep busy, at least 1.
	CPUs() int
}

// cpusOf returns the CPUs p's rank may keep busy (see CPUPeers).
func cpusOf(p Peers) int {
	if cp, ok := p.(CPUPeers); ok {
		return cp.CPUs()
	}
	return runtime.GOMAXPROCS(0)
}

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
	return n <= eagerBlock || oneCPU(p)
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
	return !large || oneCPU(p)
}

// oneCPU reports whether p's rank keeps one CPU busy at a time (see
// CPUPeers). Asked only for messages above eagerBlock: without CPUPeers,
// GOMAXPROCS takes the scheduler's lock.
func oneCPU(p Peers) bool { return cpusOf(p) <= 1 }
