package comm

import (
	"testing"

	"github.com/occl/occl/transport"
)

// namedConn is a connection that names its transport.
type namedConn struct {
	transport.Conn
	name string
}

func (n namedConn) Name() string { return n.name }

func TestLinkSetShm(t *testing.T) {
	shm, tcp := namedConn{name: "shm"}, namedConn{name: "tcp"}
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
	l.replace(map[int]transport.Conn{2: shm})
	if !l.shm {
		t.Error("a rewire back to shared memory left the set unmarked")
	}
}
