// A runnable example of the whole pipeline: ServerDemand, a planner,
// PortMapping and Best.

package plan_test

import (
	"fmt"

	"github.com/occl/occl/reconfig/plan"
)

// From a rank-level all-to-all to OCS cross connects: 8 ranks on 4
// servers, 2 optical ports per server, one port per NUMA node. Servers 0
// and 1 exchange the most; every other pair the same, so the greedy serves
// pairs (0,2) and (1,2) next and server 3 keeps its ports idle, while the
// matching rounds planner, which counts the packet network, does better.
func Example() {
	server := []int{0, 0, 1, 1, 2, 2, 3, 3}
	e := make([][]float64, 8)
	for i := range e {
		e[i] = make([]float64, 8)
		for j := range e[i] {
			if server[i] != server[j] {
				e[i][j] = 1 << 20
			}
		}
	}
	e[0][2], e[1][3] = 64<<20, 64<<20 // servers 0 and 1 talk a lot

	d, _ := plan.ServerDemand(e, server, 4)
	c, _ := plan.MFabricContinue(d, plan.UniformPorts(4, 2))
	fmt.Println("circuits:", c)

	ports := make([][]plan.Port, 4)
	for s := range ports {
		ports[s] = []plan.Port{{NIC: 2 * s, NUMA: 0}, {NIC: 2*s + 1, NUMA: 1}}
	}
	xs, _ := plan.PortMapping(c, ports)
	fmt.Println("cross connects:", xs)

	s, _ := plan.AggregateDemand(e, server, server, 4)
	best, _ := plan.Best(s, plan.UniformPorts(4, 2), plan.DefaultBandwidths())
	fmt.Printf("best: %s, %.2f ms\n", best.Planner, best.Completion.Time*1e3)
	// Output:
	// circuits: [[0 1 1 0] [1 0 1 0] [1 1 0 0] [0 0 0 0]]
	// cross connects: [0-2 1-4 3-5]
	// best: matching, 5.45 ms
}
