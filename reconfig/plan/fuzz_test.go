// Fuzzing of the planners, model and port mapping: errors, never panics.

package plan

import (
	"math"
	"testing"
)

// FuzzPlanners feeds arbitrary matrices and port counts to the planners,
// the model and the port mapping: they may return errors, never panic, and
// what they return is a valid plan within the port budget.
func FuzzPlanners(f *testing.F) {
	f.Add([]byte{3, 2, 1, 0, 5, 9, 0, 0, 7, 1, 2, 3})
	f.Add([]byte{2, 0, 255, 255, 255, 255, 255, 255, 255, 127})
	f.Add([]byte{5, 8, 8, 8, 8, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		n := int(b[0] % 9)
		b = b[1:]
		ports := make([]int, n)
		for i := range ports {
			if len(b) > 0 {
				ports[i] = int(int8(b[0])) % 6 // may be negative
				b = b[1:]
			}
		}
		d := make([][]float64, n)
		for i := range d {
			d[i] = make([]float64, n)
			for j := range d[i] {
				if len(b) > 0 {
					d[i][j] = float64(b[0])
					if b[0] == 255 {
						d[i][j] = math.NaN()
					}
					b = b[1:]
				}
			}
		}
		bw := Bandwidths{OCS: 1, EPS: 0.5}
		for _, p := range Candidates(bw) {
			c, err := p.Plan(d, ports)
			if err != nil {
				continue
			}
			if err := checkCircuits(c, n); err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			ps := make([][]Port, n)
			for i := range ps {
				for k := 0; k < ports[i]; k++ {
					ps[i] = append(ps[i], Port{NIC: 10*i + k, NUMA: k % 2})
				}
			}
			if _, err := PortMapping(c, ps); err != nil {
				t.Fatalf("%s: plan %v exceeds ports %v: %v", p.Name, c, ports, err)
			}
			if _, err := Evaluate(d, c, bw); err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
		}
	})
}
