//go:build !amd64 || race

package plain

import "sync/atomic"

// Enabled tells whether Store is a plain store: not here.
const Enabled = false

// Store stores v in *p: an atomic store here.
func Store(p *atomic.Uint64, v uint64) { p.Store(v) }

// Store32 is Store for a 32-bit word.
func Store32(p *atomic.Uint32, v uint32) { p.Store(v) }
