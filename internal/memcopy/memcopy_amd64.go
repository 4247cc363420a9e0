package memcopy

import "golang.org/x/sys/cpu"

// fast: the processor has enhanced REP MOVSB.
var fast = cpu.X86.HasERMS && !raceEnabled

// move copies n bytes from src to dst with REP MOVSB.
//
//go:noescape
func move(dst, src *byte, n uintptr)

// moveNT copies n bytes from src to dst with non-temporal stores; dst
// must be 16-byte aligned and n a multiple of 64.
//
//go:noescape
func moveNT(dst, src *byte, n uintptr)
