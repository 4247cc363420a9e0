// Package smaps reads what /proc/self/smaps says about the mapping that
// holds an address: its flags and how much of it huge pages back.
package smaps

import (
	"fmt"
	"os"
	"strings"
)

// Mapping is the part of a mapping's smaps entry that occl's tests read.
type Mapping struct {
	Lo, Hi uintptr
	// Flags are the VmFlags, space-separated ("rd wr mr mw me ac hg").
	Flags string
}

// Advised reports whether the mapping is advised for huge pages (hg).
func (m Mapping) Advised() bool { return strings.Contains(" "+m.Flags+" ", " hg ") }

// Of returns the mapping of /proc/self/smaps that holds addr.
func Of(addr uintptr) (Mapping, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return Mapping{}, err
	}
	var m Mapping
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 { // a mapping's first line
			in = lo <= addr && addr < hi
			m = Mapping{Lo: lo, Hi: hi}
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			m.Flags = strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:"))
			return m, nil
		}
	}
	return Mapping{}, fmt.Errorf("smaps: no mapping holds %#x", addr)
}
