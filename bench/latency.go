package bench

import (
	"slices"
	"time"
)

// Latency is the distribution of the time of one operation over a timed
// run (Config.Latency): each iteration timed by one clock reading at its
// end, so that an iteration's time includes the benchmark loop's own
// few nanoseconds. Across ranks each figure is the largest any rank
// measured, as the mean time is the largest rank's.
type Latency struct {
	P50US float64 `json:"p50_us"`
	P99US float64 `json:"p99_us"`
	MaxUS float64 `json:"max_us"`
}

// latencyOf returns the distribution of the iteration times d, which it
// sorts: the nearest-rank 50th and 99th percentiles and the maximum.
func latencyOf(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	us := func(v time.Duration) float64 { return float64(v.Nanoseconds()) / 1e3 }
	return Latency{P50US: us(d[rank(len(d), 50)]), P99US: us(d[rank(len(d), 99)]), MaxUS: us(d[len(d)-1])}
}

// rank returns the index of the nearest-rank p-th percentile of n sorted
// values: the smallest value that at least p percent of them do not
// exceed.
func rank(n, p int) int {
	return max((n*p+99)/100-1, 0)
}
