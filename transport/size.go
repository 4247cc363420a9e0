package transport

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte count with an optional K, M or G suffix (powers of
// 1024), as nccl-tests does: "8", "64K", "1M", "2G". A trailing "B" is
// allowed ("64KB").
func ParseSize(v string) (int, error) {
	s := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(v), "B"), "b")
	mult := 1
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q", v)
	}
	return n * mult, nil
}
