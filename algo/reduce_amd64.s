//go:build !purego

#include "textflag.h"

// AVX2 reduction kernels. Go declarations and dispatch are in reduce_amd64.go.
//
// Binary kernels: func(dst, a, b unsafe.Pointer, n int) computes dst = a op b
// over n bytes of dst, n a positive multiple of the block: 32 bytes for
// float32, float64, integers and bfloat16, 16 bytes for float16. 16-bit
// floats are widened to float32 in registers. dst may be a or b.
//
// Division kernels: func(buf unsafe.Pointer, n int, d floatN) divides n bytes
// of buf in place by d, with the same blocks.
//
// Register use: DI = dst, SI = a, DX = b, CX = bytes left. A COMPUTE macro
// reads a from Y0 and b from Y1, leaves the result in Y2 and may clobber
// Y3-Y5. Y12 holds the divisor, Y11 and Y13-Y15 constants loaded by SETUP.

DATA consts<>+0(SB)/4, $1                   // bfloat16 rounding: lowest kept bit
DATA consts<>+4(SB)/4, $0x7fff              // bfloat16 rounding: just under half a unit
DATA consts<>+8(SB)/4, $0x00400000          // float32 quiet-NaN bit
DATA consts<>+12(SB)/4, $0x00ff00ff         // low byte of each 16-bit word
DATA consts<>+16(SB)/8, $0x8000000000000000 // sign bit of a 64-bit integer
GLOBL consts<>(SB), RODATA|NOPTR, $24

#define NOSETUP
#define BF16_SETUP VPXOR Y11, Y11, Y11; VPBROADCASTD consts<>+0(SB), Y13; VPBROADCASTD consts<>+4(SB), Y14; VPBROADCASTD consts<>+8(SB), Y15
#define BYTEMUL_SETUP VPBROADCASTD consts<>+12(SB), Y14
#define UNSIGNED64_SETUP VPBROADCASTQ consts<>+16(SB), Y15

// Float32 operations (also used for float16 and bfloat16). Max and Min take
// the maximum (minimum) both ways round and combine the two with AND (OR) so
// that +0 beats -0 (-0 beats +0) whatever the order; where either input is
// a NaN they take a+b instead, which is that NaN, quietened.
#define ADD_PS VADDPS Y1, Y0, Y2
#define MUL_PS VMULPS Y1, Y0, Y2
#define MAX_PS VMAXPS Y1, Y0, Y2; VMAXPS Y0, Y1, Y3; VANDPS Y3, Y2, Y2; VADDPS Y1, Y0, Y3; VCMPPS $3, Y1, Y0, Y4; VBLENDVPS Y4, Y3, Y2, Y2
#define MIN_PS VMINPS Y1, Y0, Y2; VMINPS Y0, Y1, Y3; VORPS Y3, Y2, Y2; VADDPS Y1, Y0, Y3; VCMPPS $3, Y1, Y0, Y4; VBLENDVPS Y4, Y3, Y2, Y2
#define DIV_PS VDIVPS Y12, Y0, Y2

// Float64 operations, as for float32.
#define ADD_PD VADDPD Y1, Y0, Y2
#define MUL_PD VMULPD Y1, Y0, Y2
#define MAX_PD VMAXPD Y1, Y0, Y2; VMAXPD Y0, Y1, Y3; VANDPD Y3, Y2, Y2; VADDPD Y1, Y0, Y3; VCMPPD $3, Y1, Y0, Y4; VBLENDVPD Y4, Y3, Y2, Y2
#define MIN_PD VMINPD Y1, Y0, Y2; VMINPD Y0, Y1, Y3; VORPD Y3, Y2, Y2; VADDPD Y1, Y0, Y3; VCMPPD $3, Y1, Y0, Y4; VBLENDVPD Y4, Y3, Y2, Y2
#define DIV_PD VDIVPD Y12, Y0, Y2

// Integer operations. Sums and products wrap; the low half of a product is
// the same for signed and unsigned operands.
#define ADD_B VPADDB Y1, Y0, Y2
#define ADD_D VPADDD Y1, Y0, Y2
#define ADD_Q VPADDQ Y1, Y0, Y2
#define MUL_D VPMULLD Y1, Y0, Y2

// Bytes: multiply the even and the odd bytes as 16-bit words and merge the
// low bytes of the products.
#define MUL_B VPMULLW Y1, Y0, Y2; VPSRLW $8, Y0, Y3; VPSRLW $8, Y1, Y4; VPMULLW Y4, Y3, Y3; VPSLLW $8, Y3, Y3; VPAND Y14, Y2, Y2; VPOR Y3, Y2, Y2

// 64-bit: lo(a)*lo(b) + (hi(a)*lo(b) + lo(a)*hi(b)) << 32.
#define MUL_Q VPMULUDQ Y1, Y0, Y2; VPSRLQ $32, Y0, Y3; VPMULUDQ Y1, Y3, Y3; VPSRLQ $32, Y1, Y4; VPMULUDQ Y4, Y0, Y4; VPADDQ Y4, Y3, Y3; VPSLLQ $32, Y3, Y3; VPADDQ Y3, Y2, Y2

#define MAX_SB VPMAXSB Y1, Y0, Y2
#define MIN_SB VPMINSB Y1, Y0, Y2
#define MAX_UB VPMAXUB Y1, Y0, Y2
#define MIN_UB VPMINUB Y1, Y0, Y2
#define MAX_SD VPMAXSD Y1, Y0, Y2
#define MIN_SD VPMINSD Y1, Y0, Y2
#define MAX_UD VPMAXUD Y1, Y0, Y2
#define MIN_UD VPMINUD Y1, Y0, Y2

// 64-bit min and max select with a signed compare; unsigned operands are
// compared with their sign bits flipped.
#define MAX_SQ VPCMPGTQ Y1, Y0, Y3; VBLENDVPD Y3, Y0, Y1, Y2
#define MIN_SQ VPCMPGTQ Y1, Y0, Y3; VBLENDVPD Y3, Y1, Y0, Y2
#define MAX_UQ VPXOR Y15, Y0, Y3; VPXOR Y15, Y1, Y4; VPCMPGTQ Y4, Y3, Y3; VBLENDVPD Y3, Y0, Y1, Y2
#define MIN_UQ VPXOR Y15, Y0, Y3; VPXOR Y15, Y1, Y4; VPCMPGTQ Y4, Y3, Y3; VBLENDVPD Y3, Y1, Y0, Y2

// Rounds the float32 values in Y2 to bfloat16, nearest even, leaving each
// result in the low half of a dword of Y3: (x + 0x7fff + (x>>16 & 1)) >> 16,
// or (x | 0x400000) >> 16 for a NaN, which makes it quiet.
#define BF16_ROUND \
	VPSRLD $16, Y2, Y3; \
	VPAND Y13, Y3, Y3; \
	VPADDD Y14, Y3, Y3; \
	VPADDD Y2, Y3, Y3; \
	VCMPPS $3, Y2, Y2, Y4; \
	VPOR Y15, Y2, Y5; \
	VBLENDVPS Y4, Y5, Y3, Y3; \
	VPSRLD $16, Y3, Y3

// Loop bodies: load one block of a (and b), compute, store one block of dst.
#define VEC_BODY(COMPUTE, off) VMOVDQU off(SI), Y0; VMOVDQU off(DX), Y1; COMPUTE; VMOVDQU Y2, off(DI)
// float16 converts with F16C; rounding mode 0 is nearest even.
#define F16_BODY(COMPUTE, off) VCVTPH2PS off(SI), Y0; VCVTPH2PS off(DX), Y1; COMPUTE; VCVTPS2PH $0, Y2, off(DI)

// bfloat16 blocks are 16 elements: interleaving them with zero words (Y11)
// widens the low four and the high four of each 128-bit lane to float32
// in place, and packing the two halves of results undoes the interleaving.
// The inputs stay in Y6 and Y7 and the first half of the results in Y8.
#define BF16_BODY(COMPUTE, off) \
	VMOVDQU off(SI), Y6; \
	VMOVDQU off(DX), Y7; \
	VPUNPCKLWD Y6, Y11, Y0; \
	VPUNPCKLWD Y7, Y11, Y1; \
	COMPUTE; \
	BF16_ROUND; \
	VMOVDQA Y3, Y8; \
	VPUNPCKHWD Y6, Y11, Y0; \
	VPUNPCKHWD Y7, Y11, Y1; \
	COMPUTE; \
	BF16_ROUND; \
	VPACKUSDW Y3, Y8, Y3; \
	VMOVDQU Y3, off(DI)

// Bodies of the division kernels, which read only a.
#define VEC_UBODY(COMPUTE, off) VMOVDQU off(SI), Y0; COMPUTE; VMOVDQU Y2, off(DI)
#define F16_UBODY(COMPUTE, off) VCVTPH2PS off(SI), Y0; COMPUTE; VCVTPS2PH $0, Y2, off(DI)
#define BF16_UBODY(COMPUTE, off) \
	VMOVDQU off(SI), Y6; \
	VPUNPCKLWD Y6, Y11, Y0; \
	COMPUTE; \
	BF16_ROUND; \
	VMOVDQA Y3, Y8; \
	VPUNPCKHWD Y6, Y11, Y0; \
	COMPUTE; \
	BF16_ROUND; \
	VPACKUSDW Y3, Y8, Y3; \
	VMOVDQU Y3, off(DI)

// The loop: four blocks at a time, then one at a time. O1-O3 are the
// offsets of the second to fourth blocks, STEP the block size and STEP4 four
// blocks.
#define LOOP(BODY, COMPUTE, O1, O2, O3, STEP, STEP4) \
	CMPQ CX, $STEP4; \
	JB   one; \
four: \
	BODY(COMPUTE, 0); \
	BODY(COMPUTE, O1); \
	BODY(COMPUTE, O2); \
	BODY(COMPUTE, O3); \
	ADDQ $STEP4, SI; \
	ADDQ $STEP4, DX; \
	ADDQ $STEP4, DI; \
	SUBQ $STEP4, CX; \
	CMPQ CX, $STEP4; \
	JAE  four; \
one: \
	TESTQ CX, CX; \
	JZ   done; \
	BODY(COMPUTE, 0); \
	ADDQ $STEP, SI; \
	ADDQ $STEP, DX; \
	ADDQ $STEP, DI; \
	SUBQ $STEP, CX; \
	JMP  one; \
done: \
	VZEROUPPER; \
	RET

// Binary kernels on 32-byte blocks.
#define VEC_KERNEL(name, COMPUTE, SETUP) \
TEXT name(SB), NOSPLIT, $0-32; \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	SETUP; \
	LOOP(VEC_BODY, COMPUTE, 32, 64, 96, 32, 128)

// Binary kernels on float16, 16-byte blocks.
#define F16_KERNEL(name, COMPUTE) \
TEXT name(SB), NOSPLIT, $0-32; \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	LOOP(F16_BODY, COMPUTE, 16, 32, 48, 16, 64)

// Binary kernels on bfloat16, 32-byte blocks.
#define BF16_KERNEL(name, COMPUTE) \
TEXT name(SB), NOSPLIT, $0-32; \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	BF16_SETUP; \
	LOOP(BF16_BODY, COMPUTE, 32, 64, 96, 32, 128)

// Division kernels; BROADCAST loads the divisor d into Y12. ARGS is the
// size of the arguments, which depends on the divisor's type.
#define DIV_KERNEL(name, ARGS, BROADCAST, BODY, COMPUTE, SETUP, O1, O2, O3, STEP, STEP4) \
TEXT name(SB), NOSPLIT, $0-ARGS; \
	MOVQ buf+0(FP), DI; \
	MOVQ DI, SI; \
	MOVQ DI, DX; \
	MOVQ n+8(FP), CX; \
	BROADCAST d+16(FP), Y12; \
	SETUP; \
	LOOP(BODY, COMPUTE, O1, O2, O3, STEP, STEP4)

VEC_KERNEL(·addF32, ADD_PS, NOSETUP)
VEC_KERNEL(·mulF32, MUL_PS, NOSETUP)
VEC_KERNEL(·maxF32, MAX_PS, NOSETUP)
VEC_KERNEL(·minF32, MIN_PS, NOSETUP)

VEC_KERNEL(·addF64, ADD_PD, NOSETUP)
VEC_KERNEL(·mulF64, MUL_PD, NOSETUP)
VEC_KERNEL(·maxF64, MAX_PD, NOSETUP)
VEC_KERNEL(·minF64, MIN_PD, NOSETUP)

F16_KERNEL(·addF16, ADD_PS)
F16_KERNEL(·mulF16, MUL_PS)
F16_KERNEL(·maxF16, MAX_PS)
F16_KERNEL(·minF16, MIN_PS)

BF16_KERNEL(·addBF16, ADD_PS)
BF16_KERNEL(·mulBF16, MUL_PS)
BF16_KERNEL(·maxBF16, MAX_PS)
BF16_KERNEL(·minBF16, MIN_PS)

VEC_KERNEL(·addI8, ADD_B, NOSETUP)
VEC_KERNEL(·mulI8, MUL_B, BYTEMUL_SETUP)
VEC_KERNEL(·maxS8, MAX_SB, NOSETUP)
VEC_KERNEL(·minS8, MIN_SB, NOSETUP)
VEC_KERNEL(·maxU8, MAX_UB, NOSETUP)
VEC_KERNEL(·minU8, MIN_UB, NOSETUP)

VEC_KERNEL(·addI32, ADD_D, NOSETUP)
VEC_KERNEL(·mulI32, MUL_D, NOSETUP)
VEC_KERNEL(·maxS32, MAX_SD, NOSETUP)
VEC_KERNEL(·minS32, MIN_SD, NOSETUP)
VEC_KERNEL(·maxU32, MAX_UD, NOSETUP)
VEC_KERNEL(·minU32, MIN_UD, NOSETUP)

VEC_KERNEL(·addI64, ADD_Q, NOSETUP)
VEC_KERNEL(·mulI64, MUL_Q, NOSETUP)
VEC_KERNEL(·maxS64, MAX_SQ, NOSETUP)
VEC_KERNEL(·minS64, MIN_SQ, NOSETUP)
VEC_KERNEL(·maxU64, MAX_UQ, UNSIGNED64_SETUP)
VEC_KERNEL(·minU64, MIN_UQ, UNSIGNED64_SETUP)

DIV_KERNEL(·divF32, 20, VBROADCASTSS, VEC_UBODY, DIV_PS, NOSETUP, 32, 64, 96, 32, 128)
DIV_KERNEL(·divF64, 24, VBROADCASTSD, VEC_UBODY, DIV_PD, NOSETUP, 32, 64, 96, 32, 128)
DIV_KERNEL(·divF16, 20, VBROADCASTSS, F16_UBODY, DIV_PS, NOSETUP, 16, 32, 48, 16, 64)
DIV_KERNEL(·divBF16, 20, VBROADCASTSS, BF16_UBODY, DIV_PS, BF16_SETUP, 32, 64, 96, 32, 128)
