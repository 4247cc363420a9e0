package tsc

import (
	"testing"
	"time"
)

// TestReadAdvancesWithTime checks that the counter, where it is trusted,
// advances at a rate that stays the same between two intervals of the
// monotonic clock.
func TestReadAdvancesWithTime(t *testing.T) {
	if !Supported {
		if Read() != 0 {
			t.Fatal("Read returned a counter on an architecture without one")
		}
		if Trusted() {
			t.Fatal("Trusted without a counter")
		}
		return
	}
	rate := func() float64 {
		t0, c0 := time.Now(), Read()
		time.Sleep(20 * time.Millisecond)
		c1 := Read()
		d := time.Since(t0)
		if c1 <= c0 {
			t.Fatalf("counter went from %d to %d over %v", c0, c1, d)
		}
		return float64(c1-c0) / float64(d)
	}
	// A reading pair split by a preemption skews one measure: the rate
	// must hold in one of three tries.
	for try := range 3 {
		a, b := rate(), rate()
		t.Logf("%.4f and %.4f ticks per ns; trusted: %v", a, b, Trusted())
		if !Trusted() {
			return
		}
		if r := a / b; r > 0.99 && r < 1.01 {
			return
		}
		if try == 2 {
			t.Fatalf("the counter's rate moved from %.4f to %.4f ticks per ns", a, b)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	var sink uint64
	for range b.N {
		sink += Read()
	}
	_ = sink
}

// TestTrusts checks which clock sources keep time with the counter: the
// counter itself always, a paravirtual clock only where the vDSO reads it
// (and only there is the vDSO timed), any other never.
func TestTrusts(t *testing.T) {
	for _, c := range []struct {
		source string
		vdso   bool
		want   bool
		timed  bool
	}{
		{"tsc", false, true, false},
		{"kvm-clock", true, true, true},
		{"kvm-clock", false, false, true},
		{"hyperv_clocksource_tsc_page", true, true, true},
		{"xen", false, false, true},
		{"hpet", true, false, false},
		{"acpi_pm", true, false, false},
		{"", true, false, false},
	} {
		timed := false
		got := trusts(c.source, func() bool { timed = true; return c.vdso })
		if got != c.want || timed != c.timed {
			t.Errorf("trusts(%q), the vDSO reading the counter: %v; got %v (vDSO timed: %v), want %v (timed: %v)",
				c.source, c.vdso, got, timed, c.want, c.timed)
		}
	}
}

// TestCheaper checks the verdict on the vDSO's and the system call's
// costs: under a quarter trusts, a quarter or more does not, and a read
// that took no ticks (no counter) proves nothing.
func TestCheaper(t *testing.T) {
	for _, c := range []struct {
		vdso, sys uint64
		want      bool
	}{
		{60, 3000, true},    // kvm-clock's vDSO against a system call on a virtual machine
		{60, 241, true},     // just under a quarter
		{60, 240, false},    // a quarter
		{1500, 1400, false}, // the vDSO fell back to the system call
		{0, 3000, false},
	} {
		if got := cheaper(c.vdso, c.sys); got != c.want {
			t.Errorf("cheaper(%d, %d) = %v, want %v", c.vdso, c.sys, got, c.want)
		}
	}
}

func BenchmarkRecheck(b *testing.B) {
	for range b.N {
		Recheck()
	}
}
