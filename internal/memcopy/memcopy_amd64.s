#include "textflag.h"

// func move(dst, src *byte, n uintptr)
TEXT ·move(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	REP; MOVSB
	RET
