//go:build !amd64

package shm

// seal stores the seal v of the frame at data offset off, after the rest
// of the frame: an atomic store, which orders the frame's stores before
// it where the hardware may reorder plain stores.
func (r *ring) seal(off uint64, v uint32) { r.sealWord(off).Store(v) }
