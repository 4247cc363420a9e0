package shm

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAllowPeerReads checks the declaration against the system: where the
// Yama module restricts ptrace to ancestors (ptrace_scope 1) it must
// succeed, since peers' single copies need it; without Yama the kernel
// refuses the option (EINVAL), which setup ignores. With ptrace_scope 2
// or 3 the kernel accepts it, but it grants nothing. Its effect is
// TestTwoProcessesCMA's: there the child reads its parent's memory, which
// Yama's relational mode refuses a descendant without the declaration.
func TestAllowPeerReads(t *testing.T) {
	err := allowPeerReads()
	scope, rerr := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	switch {
	case rerr != nil:
		if err != nil && !errors.Is(err, unix.EINVAL) {
			t.Fatalf("without Yama: allowPeerReads() = %v, want nil or EINVAL", err)
		}
		t.Logf("no Yama here (%v): allowPeerReads() = %v", rerr, err)
	case strings.TrimSpace(string(scope)) == "1":
		if err != nil {
			t.Fatalf("Yama ptrace_scope 1: allowPeerReads() = %v, want nil", err)
		}
	default:
		t.Logf("Yama ptrace_scope %s: allowPeerReads() = %v", strings.TrimSpace(string(scope)), err)
	}
}
