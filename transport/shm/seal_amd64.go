package shm

import (
	"sync/atomic"
	"unsafe"
)

// seal stores the seal v of the frame at data offset off, after the rest
// of the frame. On amd64 a plain store does: stores become visible to
// other cores in program order, and the compiler keeps the order of
// stores. An atomic store (XCHG) would wait there for the line the
// consumer is polling: 8-byte frames between two processes took 20-24%
// longer one way with it. It is one 32-bit store, through a pointer: the
// bytes of encoding/binary's PutUint32, which the compiler merges into
// one store only when it optimizes (not under the race detector), could
// be seen one by one.
func (r *ring) seal(off uint64, v uint32) {
	*(*uint32)(unsafe.Pointer(&r.data[off+sealOff])) = v
}

// plainPublish tells whether storePlain is a plain store: on amd64 it
// orders every earlier store before it, as a counter's publication needs.
const plainPublish = true

// storePlain publishes v in w with a plain store, which does not wait for
// w's line or drain the store buffer as an atomic store (XCHG) does. What
// it does not order is a later load: see Conn.plain for who makes up for it.
func storePlain(w *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(w)) = v }
