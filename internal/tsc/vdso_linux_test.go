package tsc

import (
	"os"
	"strings"
	"testing"
)

// TestVDSOTiming times both reads of the monotonic clock on this machine:
// both take ticks, and Recheck agrees with the kernel's clock source and,
// on a paravirtual clock whose vDSO read is clearly cheaper (an eighth of
// the system call), with the timing.
func TestVDSOTiming(t *testing.T) {
	if !Supported {
		t.Skip("no counter on this architecture")
	}
	v, s := vdsoTicks(), syscallTicks()
	b, err := os.ReadFile(clocksource)
	source := strings.TrimSpace(string(b))
	trusted := Recheck()
	t.Logf("clock source %q (%v); fewest ticks: vDSO %d, system call %d; trusted %v", source, err, v, s, trusted)
	if v == 0 || s == 0 {
		t.Fatalf("a read took no ticks: vDSO %d, system call %d", v, s)
	}
	switch {
	case err != nil:
		if trusted {
			t.Errorf("trusted without a clock source (%v)", err)
		}
	case source == "tsc":
		if !trusted {
			t.Errorf("the kernel keeps time with the counter, which is not trusted")
		}
	case paravirtual[source]:
		if v*8 < s && !trusted {
			t.Errorf("paravirtual clock %q whose vDSO read took %d ticks against the system call's %d: not trusted", source, v, s)
		}
	default:
		if trusted {
			t.Errorf("clock source %q trusted", source)
		}
	}
}
