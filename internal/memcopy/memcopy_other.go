//go:build !amd64

package memcopy

const fast = false

func move(dst, src *byte, n uintptr) { panic("memcopy: no string move") }
