package shm

import "unsafe"

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
