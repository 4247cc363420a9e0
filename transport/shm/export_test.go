package shm

import "time"

// SetPieceHook makes c call f between the pieces of every cross-memory
// read, with the number of bytes copied so far.
func SetPieceHook(c *Conn, f func(done int)) { c.pieceHook = f }

// PieceSize is the most one process_vm_readv call copies.
const PieceSize = cmaPiece

// SetYieldHook makes c call f whenever a polling wait lets other
// goroutines run.
func SetYieldHook(c *Conn, f func()) { c.yieldHook = f }

// SetSleepHook makes c call f before a wait sleeps on its futex word.
func SetSleepHook(c *Conn, f func()) { c.sleepHook = f }

// SetLocal sets whether c takes its peer to be in this process.
func SetLocal(c *Conn, local bool) { c.local = local }

// Local reports whether c takes its peer to be in this process.
func Local(c *Conn) bool { return c.local }

// SetCoreYieldHook makes c call f after every sched_yield of a wait.
func SetCoreYieldHook(c *Conn, f func()) { c.coreYieldHook = f }

// SetLockHook sets a function run when a wait locks its goroutine to its
// thread (true) and unlocks it (false).
func SetLockHook(c *Conn, f func(locked bool)) { c.lockHook = f }

// SetPeerSpin sets how many rounds c's waits poll on while the peer is
// marked running.
func SetPeerSpin(c *Conn, n int) { c.peerSpin = n }

// MarkOffCore marks c's side of its rings off core (off true) or back on,
// as a wait of its process that yields or sleeps does.
func MarkOffCore(c *Conn, off bool) {
	v := uint32(0)
	if off {
		v = 1
	}
	c.out.prodOff.Store(v)
	c.in.consOff.Store(v)
}

// PeerOffCore reports whether c's peer is marked off core in the ring c
// reads.
func PeerOffCore(c *Conn) bool { return c.in.prodOff.Load() != 0 }

// AddOffCore adds c's words to the process's, as Connect does for a peer
// in another process.
func AddOffCore(c *Conn) { addOffCore(c) }

// OffCoreWords returns how many words the process marks when it gives its
// core away.
func OffCoreWords() int {
	offCore.mu.Lock()
	defer offCore.mu.Unlock()
	return len(offCore.words)
}

// OffCoreDuring runs f with the process marked off core.
func OffCoreDuring(f func()) { offCoreDuring(f) }

// Plain reports whether c publishes its counters with plain stores.
func Plain(c *Conn) bool { return c.plain }

// SetCopyWaitYield sets how long c's copy waits give their core away
// (transport.CopyWaitYield by default).
func SetCopyWaitYield(c *Conn, d time.Duration) { c.copyWaitYield = d }

// StoreClaim stores v in the claim word of the ring c receives from, as a
// corrupt or malicious peer could.
func StoreClaim(c *Conn, v uint64) { c.in.claim.Store(v) }

// MappedPayloads returns how many payloads c has copied from its mappings
// of the peer's shared buffers.
func MappedPayloads(c *Conn) uint64 {
	if c.regions == nil {
		return 0
	}
	return c.regions.mapped
}
