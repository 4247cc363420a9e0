package algo_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/occl/occl/algo"
)

// Averaging float32 contributions from three ranks: combine with Avg's
// combiner, then divide once by the number of contributions.
func ExampleReduceInto() {
	enc := func(vals ...float32) []byte {
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	acc := enc(1, 2, 3)
	for _, contribution := range [][]byte{enc(4, 5, 6), enc(7, 8, 9)} {
		algo.ReduceInto(acc, contribution, algo.Float32, algo.Avg.Combiner())
	}
	algo.Finalize(acc, algo.Float32, algo.Avg, 3)
	for i := 0; i < len(acc); i += 4 {
		fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(acc[i:])))
	}
	// Output:
	// 4
	// 5
	// 6
}
