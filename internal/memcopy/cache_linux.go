package memcopy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lastLevelCache returns the size in bytes of the largest unified cache
// of CPU 0 as the kernel describes it (sysfs), 0 if it cannot be read.
func lastLevelCache() int {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	best := 0
	for _, d := range dirs {
		typ, err := os.ReadFile(filepath.Join(d, "type"))
		if err != nil || strings.TrimSpace(string(typ)) != "Unified" {
			continue
		}
		size, err := os.ReadFile(filepath.Join(d, "size"))
		if err != nil {
			continue
		}
		best = max(best, parseCacheSize(string(size)))
	}
	return best
}

// parseCacheSize parses a sysfs cache size ("32768K", "8M", "512"), 0 if
// it is not one.
func parseCacheSize(s string) int {
	s = strings.TrimSpace(s)
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 1<<40/mult {
		return 0
	}
	return n * mult
}
