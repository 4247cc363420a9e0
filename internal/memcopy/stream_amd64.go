package memcopy

import "unsafe"

// moveStream copies n bytes, at least 64, from src to dst with stores that go
// past the caches: the bytes up to dst's first 16-byte boundary and after
// its last whole 64 bytes with the built-in copy, the rest with moveNT.
func moveStream(dst, src []byte, n int) {
	head := int(-uintptr(unsafe.Pointer(&dst[0])) & 15)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	moveNT(&dst[head], &src[head], uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
}
