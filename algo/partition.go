package algo

// Partition splits count elements into parts balanced, contiguous parts and
// returns the offset and length of part i. The first count%parts parts get
// one element more than the others, so part lengths differ by at most one;
// parts may be empty when count < parts. parts must be positive and i in
// [0, parts).
func Partition(count, parts, i int) (off, n int) {
	q, rem := count/parts, count%parts
	if i < rem {
		return i * (q + 1), q + 1
	}
	return rem*(q+1) + (i-rem)*q, q
}

// PartitionOffsets returns the parts+1 boundaries of Partition(count, parts,
// ·): part i is [offs[i], offs[i+1]). It reuses dst when it is large enough.
// The result is the segs argument ReduceScatterRing expects.
func PartitionOffsets(dst []int, count, parts int) []int {
	if cap(dst) < parts+1 {
		dst = make([]int, parts+1)
	}
	dst = dst[:parts+1]
	for i := 0; i < parts; i++ {
		dst[i], _ = Partition(count, parts, i)
	}
	dst[parts] = count
	return dst
}

// chunkSize returns the pipelining unit in bytes for buffers of elements of
// esize bytes: chunkBytes rounded down to a whole number of elements, at
// least one element. chunkBytes <= 0 means no chunking (the result is
// unbounded).
func chunkSize(chunkBytes, esize int) int {
	if chunkBytes <= 0 {
		return int(^uint(0) >> 1)
	}
	if esize <= 0 {
		esize = 1
	}
	if c := chunkBytes / esize * esize; c > 0 {
		return c
	}
	return esize
}

// numChunks returns how many chunks of at most chunk bytes cover n bytes
// (0 for n == 0).
func numChunks(n, chunk int) int {
	if n <= 0 {
		return 0
	}
	return 1 + (n-1)/chunk
}

// chunkAt returns the byte range [lo, hi) of chunk k of the block
// [off, off+n) cut into chunks of at most chunk bytes.
func chunkAt(off, n, chunk, k int) (lo, hi int) {
	lo = off + k*chunk
	hi = lo + chunk
	if end := off + n; hi > end || hi < lo {
		hi = end
	}
	return lo, hi
}

// mod returns a modulo p in [0, p). A rank a step or two around a ring or
// a tree, a in [-p, 2p), costs no division (tens of cycles, on every
// message of a small operation).
func mod(a, p int) int {
	switch {
	case a >= 0 && a < p:
		return a
	case a >= p && a-p < p:
		return a - p
	case a < 0 && a >= -p:
		return a + p
	}
	a %= p
	if a < 0 {
		a += p
	}
	return a
}

// floorPow2 returns the largest power of two <= n (n >= 1) and its log2.
func floorPow2(n int) (pof2, log int) {
	pof2 = 1
	for pof2*2 <= n {
		pof2 *= 2
		log++
	}
	return pof2, log
}
