package algo_test

import (
	"testing"

	"github.com/occl/occl/algo"
)

// TestWorkspaceBytes checks that Bytes counts what Get holds, in child
// Workspaces too, and that Release drops the buffers above its limit and
// only those.
func TestWorkspaceBytes(t *testing.T) {
	var w algo.Workspace
	if got := w.Bytes(); got != 0 {
		t.Fatalf("empty: Bytes() = %d", got)
	}
	w.Get(algo.SlotStage, 100)             // rounded up to 4096
	w.Get(algo.SlotHierStage, 1<<20)       // 1 MiB and a quarter
	w.Child(1).Get(algo.SlotStage, 64<<10) // 64 KiB and a quarter
	want := 4096 + (1<<20 + 1<<18) + (64<<10 + 16<<10)
	if got := w.Bytes(); got != want {
		t.Fatalf("Bytes() = %d, want %d", got, want)
	}
	w.Release(128 << 10)
	if got, want := w.Bytes(), 4096+(64<<10+16<<10); got != want {
		t.Fatalf("after Release(128 KiB): Bytes() = %d, want %d", got, want)
	}
	w.Release(0)
	if got := w.Bytes(); got != 0 {
		t.Fatalf("after Release(0): Bytes() = %d", got)
	}
}
