//go:build !race

#include "textflag.h"

// func Store(p *atomic.Uint64, v uint64)
TEXT ·Store(SB), NOSPLIT, $0-16
	MOVQ	p+0(FP), AX
	MOVQ	v+8(FP), BX
	MOVQ	BX, 0(AX)
	RET

// func Store32(p *atomic.Uint32, v uint32)
TEXT ·Store32(SB), NOSPLIT, $0-12
	MOVQ	p+0(FP), AX
	MOVL	v+8(FP), BX
	MOVL	BX, 0(AX)
	RET
