package memcopy

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/occl/occl/transport"
)

// lastLevelCache returns the size in bytes of the largest unified cache
// of CPU 0 as the kernel describes it (sysfs), 0 if it cannot be read.
func lastLevelCache() int {
	return largestUnifiedCache("/sys/devices/system/cpu/cpu0/cache")
}

// largestUnifiedCache returns the size of the largest unified cache
// described under dir (a CPU's sysfs cache directory: index*/type and
// index*/size, as in "32768K"), 0 if none can be read.
func largestUnifiedCache(dir string) int {
	caches, _ := filepath.Glob(filepath.Join(dir, "index*"))
	best := 0
	for _, c := range caches {
		typ, err := os.ReadFile(filepath.Join(c, "type"))
		if err != nil || strings.TrimSpace(string(typ)) != "Unified" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(c, "size"))
		if err != nil {
			continue
		}
		if n, err := transport.ParseSize(string(b)); err == nil {
			best = max(best, n)
		}
	}
	return best
}
