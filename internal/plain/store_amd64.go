//go:build !race

package plain

import "sync/atomic"

// Enabled tells whether Store is a plain store.
const Enabled = true

// Store stores v in *p with a plain store: readers load *p atomically and
// see either the old value or v, whole.
//
//go:noescape
func Store(p *atomic.Uint64, v uint64)

// Store32 is Store for a 32-bit word.
//
//go:noescape
func Store32(p *atomic.Uint32, v uint32)
