package shm

// SetPieceHook makes c call f between the pieces of every cross-memory
// read, with the number of bytes copied so far.
func SetPieceHook(c *Conn, f func(done int)) { c.pieceHook = f }

// PieceSize is the most one process_vm_readv call copies.
const PieceSize = cmaPiece

// SetYieldHook makes c call f whenever a polling wait lets other
// goroutines run.
func SetYieldHook(c *Conn, f func()) { c.yieldHook = f }

// SetLocal sets whether c takes its peer to be in this process.
func SetLocal(c *Conn, local bool) { c.local = local }

// Local reports whether c takes its peer to be in this process.
func Local(c *Conn) bool { return c.local }

// SetCoreYieldHook makes c call f after every sched_yield of a wait.
func SetCoreYieldHook(c *Conn, f func()) { c.coreYieldHook = f }

// SetLockHook sets a function run when a wait locks its goroutine to its
// thread (true) and unlocks it (false).
func SetLockHook(c *Conn, f func(locked bool)) { c.lockHook = f }
