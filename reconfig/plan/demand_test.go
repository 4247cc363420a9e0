// Tests of the server-demand aggregation of Algorithm 1 line 5
// (demand.go).

package plan

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestServerDemand(t *testing.T) {
	// 4 ranks, 2 per server.
	e := [][]float64{
		{0, 1, 2, 3},
		{4, 0, 5, 6},
		{7, 8, 0, 9},
		{1, 1, 1, 0},
	}
	server := []int{0, 0, 1, 1}
	s, err := AggregateDemand(e, server, server, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]float64{{5, 16}, {17, 10}}; !reflect.DeepEqual(s, want) {
		t.Fatalf("AggregateDemand = %v, want %v", s, want)
	}
	d, err := ServerDemand(e, server, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]float64{{0, 33}, {0, 0}}; !reflect.DeepEqual(d, want) {
		t.Fatalf("ServerDemand = %v, want %v", d, want)
	}
	// Sources by experts: 2 source ranks, 3 experts on servers 1, 0, 1.
	s, err = AggregateDemand([][]float64{{1, 2, 3}, {4, 5, 6}}, []int{0, 1}, []int{1, 0, 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]float64{{2, 4}, {5, 10}}; !reflect.DeepEqual(s, want) {
		t.Fatalf("sources by experts = %v, want %v", s, want)
	}
	bad := []func() error{
		func() error { _, err := AggregateDemand(e, server[:3], server, 2); return err },
		func() error { _, err := AggregateDemand(e, server, []int{0, 0, 2, 1}, 2); return err },
		func() error { _, err := AggregateDemand(e, server, server, -1); return err },
		func() error { _, err := AggregateDemand([][]float64{{0, 1}}, []int{0}, []int{0}, 1); return err },
		func() error { _, err := AggregateDemand([][]float64{{-1}}, []int{0}, []int{0}, 1); return err },
		func() error { _, err := ServerDemand([][]float64{{math.NaN()}}, []int{0}, 1); return err },
		func() error { _, err := Undirected([][]float64{{0, 1}}); return err },
	}
	for i, f := range bad {
		if err := f(); !errors.Is(err, ErrDemand) {
			t.Errorf("bad input %d: %v", i, err)
		}
	}
	if got := UniformPorts(3, 2); !reflect.DeepEqual(got, []int{2, 2, 2}) {
		t.Fatalf("UniformPorts = %v", got)
	}
}
