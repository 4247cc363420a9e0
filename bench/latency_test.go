package bench

import (
	"testing"
	"time"
)

func TestLatencyOf(t *testing.T) {
	us := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Microsecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 .. 1, unsorted
	}
	thousand := make([]int, 1000)
	for i := range thousand {
		thousand[i] = 1
	}
	thousand[3], thousand[500] = 40, 7 // 998 ones, a 7 and a 40
	for _, tc := range []struct {
		name string
		d    []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", us(5), Latency{5, 5, 5}},
		{"two", us(9, 1), Latency{1, 9, 9}},
		{"1..100", us(hundred...), Latency{50, 99, 100}},
		{"tail of two in 1000", us(thousand...), Latency{1, 1, 40}},
		{"odd count", us(3, 1, 2), Latency{2, 3, 3}},
	} {
		if got := latencyOf(tc.d); got != tc.want {
			t.Errorf("%s: latencyOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
