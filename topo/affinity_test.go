package topo

import (
	"reflect"
	"testing"
)

func TestCPUShare(t *testing.T) {
	cpus := []int{0, 1, 2, 3, 4, 5, 6, 7}
	cases := []struct {
		rank, size int
		want       []int
	}{
		{0, 1, cpus},
		{0, 2, []int{0, 1, 2, 3}},
		{1, 2, []int{4, 5, 6, 7}},
		{2, 3, []int{5, 6, 7}},
		{1, 3, []int{2, 3, 4}},
		{9, 10, []int{1}}, // more ranks than CPUs: round robin
		{3, 2, nil},
	}
	for _, c := range cases {
		if got := CPUShare(cpus, c.rank, c.size); !reflect.DeepEqual(got, c.want) {
			t.Errorf("CPUShare(rank %d of %d) = %v, want %v", c.rank, c.size, got, c.want)
		}
	}
	// Every CPU is used exactly once when ranks divide them.
	seen := map[int]int{}
	for r := 0; r < 3; r++ {
		for _, c := range CPUShare(cpus, r, 3) {
			seen[c]++
		}
	}
	if len(seen) != 8 {
		t.Fatalf("3 ranks cover %d of 8 CPUs", len(seen))
	}
}

func TestAllowedCPUs(t *testing.T) {
	cpus, err := AllowedCPUs()
	if err != nil || len(cpus) == 0 {
		t.Fatalf("AllowedCPUs = %v, %v", cpus, err)
	}
}
