//go:build !amd64

package shm

import "sync/atomic"

// seal stores the seal v of the frame at data offset off, after the rest
// of the frame: an atomic store, which orders the frame's stores before
// it where the hardware may reorder plain stores.
func (r *ring) seal(off uint64, v uint32) { r.sealWord(off).Store(v) }

// plainPublish tells whether storePlain is a plain store; here it is not.
const plainPublish = false

// storePlain publishes v in w: an atomic store here, which orders the
// stores before it where the hardware may reorder plain ones.
func storePlain(w *atomic.Uint64, v uint64) { w.Store(v) }
