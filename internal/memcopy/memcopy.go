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
// Elsewhere, below Min, and under the race detector (which sees only the
// built-in copy), Copy is the built-in copy.
package memcopy

// Min is the smallest range Copy hands to the string move: below it the
// instruction's start-up cost outweighs its rate.
const Min = 16 << 10

// Copy copies min(len(dst), len(src)) bytes from src to dst, which must
// not overlap, and returns the number copied.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < Min || !fast {
		return copy(dst, src)
	}
	move(&dst[0], &src[0], uintptr(n))
	return n
}
