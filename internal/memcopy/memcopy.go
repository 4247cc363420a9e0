// Package memcopy copies large byte ranges with the copy instruction the
// processor runs fastest where that is not what the Go runtime's memmove
// uses.
//
// On amd64 processors with fast string moves (ERMS), Copy uses REP MOVSB
// from Min bytes up, as glibc's memcpy and the kernel's user copies do.
// On a 2-core AMD EPYC virtual machine it copied 64 KiB in one process at
// 1.6-2 times the rate of the runtime's vector loop, and 512 KiB pieces
// out of 64 MiB at 1.2 times. Across processes the difference was larger:
// for minutes at a time, shared-memory AllToAll and AllReduce took up to
// twice as long through the built-in copy as through this one, which kept
// their speed (why those phases hit the vector loop was not found).
//
// Deliver is Copy for a range copied to its final place, which the caller
// does not read again (an all-to-all's own block): from a quarter of the
// last-level cache up (DefaultStream where its size is not known) it is
// the built-in copy, whose stores go past the caches (non-temporal) from
// 1 MiB where it copies with AVX, as on this machine (Deliver differs from
// Copy only where the processor has ERMS). A range that large would not stay in the cache until it is read
// anyway, and streaming it saves reading every destination line before
// it is written. On the same machine (32 MiB of L3), two processes
// copying at once: the string move was faster at 2 and 4 MiB (68-182
// against 125-252 us), the built-in copy from 8 MiB (8 MiB 486-684
// against 733-1149 us, 32 MiB 3.4-4.0 against 4.9-5.3 ms). A copy whose
// destination the caller reads next (an all-reduce's input copied into
// its output, then reduced there) keeps Copy: streamed, 64 MiB AllReduce
// at 2 processes took 14% longer by the medians of 3 rounds (each build's
// rounds spread over 18-27 ms).
//
// Stream copies past the caches whatever the size, with non-temporal
// stores of its own (amd64): for the pieces of a range that Deliver
// would stream (Streams), such as a large block received piece by piece
// out of a ring. Two processes copying 32 MiB each in 512 KiB pieces at
// once took 15% less time with Stream than with the string move.
//
// Elsewhere, below Min, and under the race detector (which sees only the
// built-in copy), Copy is the built-in copy.
package memcopy

import "sync"

// Min is the smallest range Copy hands to the string move: below it the
// instruction's start-up cost outweighs its rate.
const Min = 16 << 10

// stream is the smallest range Deliver leaves to the built-in copy's
// non-temporal stores: a quarter of the last-level cache (see
// lastLevelCache), or DefaultStream where its size is not known. It is
// set on the first large Deliver (streamOnce), so that a program that
// never copies that much reads nothing from sysfs.
var (
	stream     int
	streamOnce sync.Once
)

// StreamMin returns the smallest range Deliver copies past the caches (a
// quarter of the last-level cache, or DefaultStream), reading it from the
// system on its first call.
func StreamMin() int {
	streamOnce.Do(func() { stream = streamFrom(lastLevelCache()) })
	return stream
}

// DefaultStream is where Deliver leaves ranges to the built-in copy's
// non-temporal stores when the last-level cache's size is not known.
const DefaultStream = 8 << 20

// streamFrom returns stream for a last-level cache of llc bytes (0:
// unknown).
func streamFrom(llc int) int {
	if llc <= 0 {
		return DefaultStream
	}
	return max(llc/4, Min)
}

// Copy copies min(len(dst), len(src)) bytes from src to dst, which must
// not overlap unless they are the same bytes (then nothing is copied), and
// returns the number copied.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < Min || !fast {
		return copy(dst, src)
	}
	if &dst[0] == &src[0] {
		return n // in place: already there
	}
	move(&dst[0], &src[0], uintptr(n))
	return n
}

// Streams reports whether a range of n bytes that is copied to its final
// place and not read again soon is copied past the caches (Deliver), in
// one copy or piece by piece (Stream): from a quarter of the last-level
// cache up.
func Streams(n int) bool { return n >= Min && n >= StreamMin() }

// Stream copies min(len(dst), len(src)) bytes from src to dst, which must
// not overlap unless they are the same bytes (then nothing is copied), and
// returns the number copied. Its stores go past the caches whatever the
// size (non-temporal, on amd64 only): it copies a piece of a larger range
// for which Streams is true, such as a block received piece by piece.
func Stream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < 64 || raceEnabled {
		return copy(dst, src)
	}
	if &dst[0] == &src[0] {
		return n
	}
	moveStream(dst, src, n)
	return n
}

// Deliver copies min(len(dst), len(src)) bytes from src to dst, which
// must not overlap, and returns the number copied, as Copy does; dst is
// not read again soon (see the package documentation).
func Deliver(dst, src []byte) int {
	if n := min(len(dst), len(src)); Streams(n) {
		return copy(dst, src)
	}
	return Copy(dst, src)
}
