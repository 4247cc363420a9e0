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
}
