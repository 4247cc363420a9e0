// Package shm is occl's same-host transport: two processes (or two
// goroutines) exchange frames through rings in shared memory, one ring per
// direction.
//
// # Ring layout
//
// Each ring is a file, mapped MAP_SHARED by both sides: a 4 KiB control
// page followed by a data area whose size is a power of two (Capacity,
// 4 MiB by default). The control page holds
//
//	  0  magic "OCCLSHM1", version, control page size, capacity,
//	     creator pid, 16-byte random nonce
//	128  tail: bytes ever written (written by the producer only)
//	256  head: bytes ever read (written by the consumer only)
//	384  data futex word (the consumer sleeps on it, the producer bumps it)
//	512  consumer-sleeping flag
//	640  space futex word (the producer sleeps on it, the consumer bumps it)
//	768  producer-sleeping flag, and the head it waits for
//	896  producer-closed flag
//	1024 consumer-closed flag
//
// Each field that changes sits in its own 128-byte slot so that the two
// sides never write to the same cache line. Head and tail are free-running
// 64-bit byte counters; byte i of the stream lives at data[i mod capacity].
// A frame is the 56-byte transport.Header encoded with Encode followed by
// the payload, written as one byte stream that wraps around the end of the
// data area; a frame larger than the ring simply streams through it while
// the consumer drains it.
//
// # Memory ordering
//
// The producer copies bytes into the data area with ordinary stores and
// then publishes them with an atomic store of tail; the consumer reads tail
// atomically, copies the bytes out and publishes head with an atomic store,
// after which the producer may overwrite them. The counters are accessed
// through sync/atomic on the mapped page. Go's atomics are sequentially
// consistent, and the hardware provides the same guarantees between
// processes as between threads because both map the same physical pages;
// on amd64 (total store order) an atomic load is a plain load, which is
// never reordered with later loads, and an atomic store is an XCHG, a full
// barrier, so data stores are visible before the counter that publishes
// them. The race detector does not see memory outside the Go heap and
// ignores these accesses.
//
// Each side keeps its own counter in process memory and only reads the
// other side's counter from the shared page, checking it before use: a
// head outside [last head seen, tail] or a tail outside [last tail seen,
// head + capacity] is reported as a *transport.FrameError, never used as an
// index or a length. Geometry (capacity) is read and validated once at
// setup. Every header is decoded and checked with transport.Check before
// its payload is touched, so garbage in the ring yields an error, not a
// panic, an out-of-bounds access or an allocation sized by the garbage.
//
// # Waiting
//
// A side that cannot make progress re-reads the shared counter a few dozen
// times, then yields to other goroutines about a hundred times (10 to 30 µs
// in all: the host may run more processes than cores, so spinning is kept
// short), then sleeps with FUTEX_WAIT on its ring's futex word (the shared,
// not the process-private, futex operations, since the word lives in memory
// shared between processes). It announces the sleep in a flag; the other
// side issues FUTEX_WAKE only when that flag is set, and clears it as it
// does, so the fast path makes no system call and one sleep costs one
// wake-up. A producer that finds the ring full waits for a sizeable amount
// of space (256 KiB, or a quarter of a small ring) and publishes the head it
// waits for, so it refills the ring in large pieces instead of waking for
// every frame the consumer takes. A sleep lasts at most 2 ms, or until the
// context's deadline if that comes first, so cancellation and a dead peer
// are noticed even without a wake-up.
//
// # Setup, liveness and cleanup
//
// Connect runs the setup over an existing connection to the peer (for a
// communicator, its authenticated TCP connection): each side creates the
// ring it writes under /dev/shm (os.TempDir() if that does not exist),
// named occl-<comm>-<from>-<to>-<epoch>-<pid>-<random>, announces it, maps
// the peer's ring and unlinks it; both files are gone from the directory
// when Connect returns, so nothing is left behind if a process is killed
// later. CleanStale removes the files of processes killed during setup.
//
// After setup the control connection carries nothing; the Conn owns it and
// watches it. When the peer's process dies the kernel closes its socket,
// the watch sees the error, marks the peer gone and wakes any sleeper, so a
// pending Send or Recv fails promptly with an error wrapping
// transport.ErrPeerClosed. Close sets this side's closed flags in shared
// memory, wakes the peer and closes the control connection.
package shm
