package main

import (
	"strings"
	"testing"
	"time"
)

// TestTimeoutMustBePositive shows that a -timeout of zero or less is a
// usage error (exit 2, naming the flag) rather than a call without any
// deadline: before, such a value silently disabled the client's deadline,
// so a call to a slow controller waited as long as the controller took.
func TestTimeoutMustBePositive(t *testing.T) {
	addr, sw := startController(t)
	t.Setenv("OCCL_OCS_TOKEN", token)
	t.Setenv("OCCL_OCS_ADDR", "")
	sw.SlowApply(2 * time.Second)
	for _, d := range []string{"0", "-1ms"} {
		start := time.Now()
		code, _, errb := ctl(t, "-addr", addr, "-timeout", d, "apply", "0-1")
		if code != 2 || !strings.Contains(errb, "-timeout") {
			t.Errorf("-timeout %s: exit %d after %v, stderr %q; want exit 2 naming -timeout", d, code, time.Since(start).Round(time.Millisecond), errb)
		}
	}
}

// TestApplyEmptyTargetNeedsNone shows that apply with an empty PAIRS
// argument (say an unset shell variable, or only commas) is a usage error
// that switches nothing: only the explicit word "none" tears every circuit
// down. Before, an empty argument parsed as the empty set and removed every
// installed circuit.
func TestApplyEmptyTargetNeedsNone(t *testing.T) {
	addr, sw := startController(t)
	t.Setenv("OCCL_OCS_TOKEN", token)
	t.Setenv("OCCL_OCS_ADDR", "")
	if code, _, errb := ctl(t, "-addr", addr, "apply", "0-1,2-3"); code != 0 {
		t.Fatalf("apply 0-1,2-3: exit %d, %q", code, errb)
	}
	for _, arg := range []string{"", " ", ",,"} {
		code, _, errb := ctl(t, "-addr", addr, "apply", arg)
		if code != 2 || !strings.Contains(errb, "none") {
			t.Errorf("apply %q: exit %d, stderr %q; want exit 2 pointing to \"none\"", arg, code, errb)
		}
		cs, err := sw.Connections(t.Context())
		if err != nil || len(cs) != 2 {
			t.Fatalf("after apply %q the switch holds %v (%v), want 0-1,2-3", arg, cs, err)
		}
	}
	if code, _, errb := ctl(t, "-addr", addr, "apply", "none"); code != 0 {
		t.Fatalf("apply none: exit %d, %q", code, errb)
	}
}
