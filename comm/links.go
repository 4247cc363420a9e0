package comm

import (
	"sync"

	"github.com/occl/occl/transport"
)

// linkSet is a communicator's connections to its peers, and those a rewire
// replaced.
//
// The worker is the only goroutine that changes the set (replace, in a
// rewire's resume) and reads conns without locking, through to, on every
// frame. Other goroutines (a failure closing the connections, Close,
// TransportName) take a snapshot, under mu, which replace holds while it
// writes.
type linkSet struct {
	mu    sync.Mutex
	conns []transport.Conn // by peer rank; nil at this rank
	// retired are the connections the last rewire replaced. They are
	// closed by the next rewire, while the switch runs, or at shutdown:
	// closing them as the rewire ends would wake their peers just when
	// the ranks resume.
	retired []transport.Conn
	// gen counts rewire attempts; it names their new connections.
	// Worker-only.
	gen uint32
	// shm: every connection is shared memory (see shortOp). Worker-only,
	// kept by set and replace.
	shm bool
	// eager is the smallest eager limit of the connections (see
	// transport.Conn.EagerLimit), 0 without peers: a message of at most
	// this goes to any peer without waiting for it. Worker-only, kept by
	// set and replace.
	eager int
	// lend: some connection lends large messages (transport.Lender with
	// a LendMin), as shared memory does when the processes outnumber the
	// cores (see allToAllWaits). Worker-only, kept by set and replace.
	lend bool
	// lendMin is the smallest message that every connection lends, 0 if
	// some connection lends none (see transport.Lender). Worker-only,
	// kept by set and replace.
	lendMin int
	// offerMin is the smallest message some connection offers
	// (transport.Offerer), 0 if none does, so that a smaller send asks
	// no connection. Worker-only, kept by set and replace.
	offerMin int
}

// set installs the first connections, by peer rank (nil at this rank).
func (l *linkSet) set(conns []transport.Conn) {
	l.conns = conns
	l.shm, l.eager, l.lend, l.lendMin, l.offerMin = allShm(conns), minEager(conns), anyLends(conns), allLend(conns), minOffer(conns)
}

// allShm reports whether every connection of conns is shared memory
// (transport.Name "shm"); nil entries (this rank) do not count, and a
// communicator without peers has none.
func allShm(conns []transport.Conn) bool {
	n := 0
	for _, conn := range conns {
		if conn == nil {
			continue
		}
		if transport.Name(conn) != "shm" {
			return false
		}
		n++
	}
	return n > 0
}

// minEager returns the smallest eager limit of conns, 0 if it has no
// connection (nil entries, this rank, do not count).
func minEager(conns []transport.Conn) int {
	n := -1
	for _, conn := range conns {
		if conn != nil && (n < 0 || conn.EagerLimit() < n) {
			n = conn.EagerLimit()
		}
	}
	return max(n, 0)
}

// anyLends reports whether some connection of conns lends large messages
// (see transport.Lender).
func anyLends(conns []transport.Conn) bool {
	for _, conn := range conns {
		if l, ok := conn.(transport.Lender); ok && l.LendMin() > 0 {
			return true
		}
	}
	return false
}

// allLend returns the smallest message that every connection of conns
// lends (the largest of their LendMin), 0 if one of them lends none or
// conns has no connection (nil entries, this rank, do not count).
func allLend(conns []transport.Conn) int {
	n := 0
	for _, conn := range conns {
		if conn == nil {
			continue
		}
		l, ok := conn.(transport.Lender)
		if !ok || l.LendMin() == 0 {
			return 0
		}
		n = max(n, l.LendMin())
	}
	return n
}

// minOffer returns the smallest message that some connection of conns
// offers (the smallest of their OfferMin), 0 if none offers.
func minOffer(conns []transport.Conn) int {
	n := 0
	for _, conn := range conns {
		if o, ok := conn.(transport.Offerer); ok && o.OfferMin() > 0 && (n == 0 || o.OfferMin() < n) {
			n = o.OfferMin()
		}
	}
	return n
}

// offers returns the connection to peer as a transport.Offerer if it
// offers a payload of n bytes now and a group offers it (n is within its
// eager limit, so that the send returns without the receiver as a
// buffered one does), else nil. Worker only.
func (l *linkSet) offers(peer, n int) transport.Offerer {
	if l.offerMin == 0 || n < l.offerMin {
		return nil
	}
	conn := l.conns[peer]
	if n > conn.EagerLimit() {
		return nil
	}
	if o, ok := conn.(transport.Offerer); ok && o.Offers(n) {
		return o
	}
	return nil
}

// lends reports whether some connection lends large messages. Worker only.
func (l *linkSet) lends() bool { return l.lend }

// to returns the connection to peer. Worker only.
func (l *linkSet) to(peer int) transport.Conn { return l.conns[peer] }

// snapshot returns a copy of the connections, by peer rank.
func (l *linkSet) snapshot() []transport.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]transport.Conn(nil), l.conns...)
}

// nextGen starts a rewire attempt and returns its generation. New
// connections are named by the attempt, not the epoch: a failed attempt's
// late connections must not be taken for the next one's. Worker only.
func (l *linkSet) nextGen() uint32 {
	l.gen++
	return l.gen
}

// replace installs conns (by peer rank) in place of the connections to
// those peers, which it retires. Worker only.
func (l *linkSet) replace(conns map[int]transport.Conn) {
	l.mu.Lock()
	for r, conn := range conns {
		l.retired = append(l.retired, l.conns[r])
		l.conns[r] = conn
	}
	l.shm, l.eager, l.lend, l.lendMin, l.offerMin = allShm(l.conns), minEager(l.conns), anyLends(l.conns), allLend(l.conns), minOffer(l.conns)
	l.mu.Unlock()
}

// retiredConns returns the connections the last rewire replaced.
func (l *linkSet) retiredConns() []transport.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]transport.Conn(nil), l.retired...)
}

// closeRetired closes the connections the previous rewire replaced.
func (l *linkSet) closeRetired() {
	l.mu.Lock()
	old := l.retired
	l.retired = nil
	l.mu.Unlock()
	for _, conn := range old {
		conn.Close()
	}
}

// closeCurrent closes the connections in use, so that operations blocked
// on them return; the set keeps them (closing twice is harmless).
func (l *linkSet) closeCurrent() {
	for _, conn := range l.snapshot() {
		if conn != nil {
			conn.Close()
		}
	}
}

// closeAll closes every connection, current and retired.
func (l *linkSet) closeAll() {
	l.closeCurrent()
	l.closeRetired()
}
