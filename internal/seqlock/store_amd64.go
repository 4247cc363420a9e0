//go:build !race

package seqlock

import "sync/atomic"

// plain tells whether the lock is a sequence lock with plain stores.
const plain = true

// storeSeq stores v in *p with a plain store. It is written in assembly so
// that the compiler can neither drop the first of a write's two stores,
// which a later store to the same word makes dead in its eyes, nor move
// the data stores across it.
//
//go:noescape
func storeSeq(p *atomic.Uint64, v uint64)
