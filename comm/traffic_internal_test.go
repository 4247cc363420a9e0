package comm

import "testing"

// BenchmarkTrafficRecord measures what the monitor adds to one AllToAllV on
// 64 ranks; compare with BenchmarkAllToAllMonitor's time per operation.
func BenchmarkTrafficRecord(b *testing.B) {
	var m monitor
	lens := make([]int, 64)
	for i := range lens {
		lens[i] = 4096 * i
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.record("layer7/dispatch", len(lens), lens, 0)
	}
}
