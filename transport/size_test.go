package transport

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"8": 8, "64K": 64 << 10, "1M": 1 << 20, "2G": 2 << 30, "64KB": 64 << 10, " 3m ": 3 << 20, "0": 0} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "K", "-1", "1T", "x", "99999999999G"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}
