//go:build !amd64

package memcopy

// moveStream copies n bytes from src to dst with the built-in copy: non-temporal
// stores are written for amd64 only.
func moveStream(dst, src []byte, n int) { copy(dst[:n], src[:n]) }
