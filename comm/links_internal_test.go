package comm

import (
	"testing"

	"github.com/occl/occl/transport"
)

// namedConn is a connection that names its transport and has an eager
// limit.
type namedConn struct {
	transport.Conn
	name  string
	eager int
}

func (n namedConn) Name() string    { return n.name }
func (n namedConn) EagerLimit() int { return n.eager }

// lendingConn is a shared-memory connection that lends messages of at
// least min bytes (transport.Lender; 0: none).
type lendingConn struct {
	namedConn
	transport.Lender
	min int
}

func (l lendingConn) LendMin() int { return l.min }

// offeringMinConn is a shared-memory connection that offers messages of
// at least min bytes (transport.Offerer; 0: none).
type offeringMinConn struct {
	namedConn
	transport.Offerer
	min int
}

func (o offeringMinConn) OfferMin() int { return o.min }
func (o offeringMinConn) LendMin() int  { return 0 }

// The smallest message some connection offers, so that smaller sends ask
// none of them.
func TestMinOffer(t *testing.T) {
	shm := namedConn{name: "shm", eager: 1 << 20}
	o32, o64, none := offeringMinConn{namedConn: shm, min: 32 << 10}, offeringMinConn{namedConn: shm, min: 64 << 10}, offeringMinConn{namedConn: shm}
	for _, tc := range []struct {
		conns []transport.Conn
		want  int
	}{
		{[]transport.Conn{nil, o64, o32}, 32 << 10},
		{[]transport.Conn{nil, none, o64}, 64 << 10},
		{[]transport.Conn{nil, shm, none}, 0},
		{[]transport.Conn{nil}, 0},
	} {
		var l linkSet
		l.set(tc.conns)
		if l.offerMin != tc.want {
			t.Errorf("%v: offerMin %d, want %d", tc.conns, l.offerMin, tc.want)
		}
		if tc.want > 0 && l.offers(1, tc.want-1) != nil {
			t.Errorf("%v: a message below the smallest offer asked to be offered", tc.conns)
		}
	}
}

func TestLinkSet(t *testing.T) {
	shm, tcp := namedConn{name: "shm", eager: 1 << 20}, namedConn{name: "tcp", eager: 64 << 10}
	for _, tc := range []struct {
		conns []transport.Conn
		want  bool
	}{
		{[]transport.Conn{nil, shm, shm}, true},
		{[]transport.Conn{shm, nil, tcp}, false},
		{[]transport.Conn{namedConn{name: "emu(shm)"}, nil}, false},
		{[]transport.Conn{nil}, false},
	} {
		var l linkSet
		l.set(tc.conns)
		if l.shm != tc.want {
			t.Errorf("%v: shm %v, want %v", tc.conns, l.shm, tc.want)
		}
	}
	var l linkSet
	l.set([]transport.Conn{nil, shm, shm})
	l.replace(map[int]transport.Conn{2: tcp})
	if l.shm {
		t.Error("a rewire to TCP left the set marked shared memory")
	}
	if l.eager != 64<<10 {
		t.Errorf("eager limit %d after a rewire to TCP, want TCP's %d", l.eager, 64<<10)
	}
	l.replace(map[int]transport.Conn{2: shm})
	if !l.shm {
		t.Error("a rewire back to shared memory left the set unmarked")
	}
	if l.eager != 1<<20 {
		t.Errorf("eager limit %d after a rewire back to shared memory, want %d", l.eager, 1<<20)
	}
	l.set([]transport.Conn{nil})
	if l.eager != 0 {
		t.Errorf("eager limit %d without peers, want 0", l.eager)
	}

	// Lending, which makes a large all-to-all's waits wait for copies.
	// The smallest message every connection lends, which makes a large
	// broadcast's and allgather's waits wait for copies.
	lender, none := lendingConn{namedConn: shm, min: 128 << 10}, lendingConn{namedConn: shm}
	lender64 := lendingConn{namedConn: shm, min: 64 << 10}
	for _, tc := range []struct {
		conns   []transport.Conn
		want    bool
		lendMin int
	}{
		{[]transport.Conn{nil, lender, lender}, true, 128 << 10},
		{[]transport.Conn{nil, lender64, lender}, true, 128 << 10},
		{[]transport.Conn{nil, shm, lender}, true, 0},
		{[]transport.Conn{nil, none, shm}, false, 0},
		{[]transport.Conn{nil, lender, none}, true, 0},
		{[]transport.Conn{nil}, false, 0},
	} {
		l.set(tc.conns)
		if l.lends() != tc.want || l.lendMin != tc.lendMin {
			t.Errorf("%d connections: lends %v, every one from %d, want %v, %d", len(tc.conns), l.lends(), l.lendMin, tc.want, tc.lendMin)
		}
	}
	l.set([]transport.Conn{nil, lender, lender})
	l.replace(map[int]transport.Conn{1: tcp, 2: tcp})
	if l.lends() || l.lendMin != 0 {
		t.Error("a rewire to TCP left the set lending")
	}
}
