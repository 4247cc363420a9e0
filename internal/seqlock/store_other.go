//go:build !amd64 || race

package seqlock

import "sync/atomic"

// plain tells whether the lock is a sequence lock with plain stores: not
// here, where it is a mutex.
const plain = false

// storeSeq is not used in mutex mode.
func storeSeq(p *atomic.Uint64, v uint64) { p.Store(v) }
