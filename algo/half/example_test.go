package half_test

import (
	"fmt"

	"github.com/occl/occl/algo/half"
)

func Example() {
	h := half.Float16FromFloat32(3.14159)
	fmt.Printf("float16:  %v (%#04x)\n", h, h.Bits())

	b := half.BFloat16FromFloat32(3.14159)
	fmt.Printf("bfloat16: %v (%#04x)\n", b, b.Bits())

	// Out of range for float16, but not for bfloat16.
	fmt.Println(half.Float16FromFloat32(1e5), half.BFloat16FromFloat32(1e5))

	// Sums are computed in float32 and rounded back.
	x, y := half.Float16FromFloat32(2048), half.Float16FromFloat32(1)
	fmt.Println(half.Float16FromFloat32(x.Float32() + y.Float32()))

	// Output:
	// float16:  3.140625 (0x4248)
	// bfloat16: 3.140625 (0x4049)
	// +Inf 99840
	// 2048
}
