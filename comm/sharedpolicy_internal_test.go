package comm

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestNoteSharedPolicy checks that a policy which keeps shared buffers on
// base pages is logged, with the file that changes it, and that a policy
// which gives them huge pages, or none found, is not.
func TestNoteSharedPolicy(t *testing.T) {
	for _, c := range []struct {
		policy string
		huge   bool
		logs   bool
	}{
		{"never", false, true},
		{"deny", false, true},
		{"advise", true, false},
		{"always", true, false},
		{"", false, false},
	} {
		var buf bytes.Buffer
		noteSharedPolicy(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), c.policy, c.huge)
		out := buf.String()
		if !c.logs {
			if out != "" {
				t.Errorf("policy %q: logged %q, want nothing", c.policy, out)
			}
			continue
		}
		for _, w := range []string{"shmem_enabled=" + c.policy, "/sys/kernel/mm/transparent_hugepage/shmem_enabled", "4 KiB pages"} {
			if !strings.Contains(out, w) {
				t.Errorf("policy %q: logged %q, want it to contain %q", c.policy, out, w)
			}
		}
	}
}
