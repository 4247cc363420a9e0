//go:build linux && cgo

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGroupSplitsInOrder runs testdata/groupsplits.c: two ranks split
// their communicator several times in one group, 60 times over, and every
// new communicator must have the size, the ranks and the order of members
// (an AllGather of the ranks' ranks in the parent) that its colors and
// keys give. The splits of one parent are operations of it, which
// occlGroupEnd must run in the order they were recorded: run
// concurrently, each rank's parent takes them in its own order and the
// ranks pair different splits (the first case: "all" gets 1 rank instead
// of 2). Each case runs with one thread per rank and with one thread
// driving both ranks, whose group then holds the splits of both parents.
// The communicators use TCP, whose splits take a few milliseconds (shared
// memory's take tens), so that many iterations fit in a second.
func TestGroupSplitsInOrder(t *testing.T) {
	const iterations = 60
	dir := buildLib(t)
	bin := filepath.Join(t.TempDir(), "groupsplits")
	cc(t, dir, bin, "testdata/groupsplits.c")
	for _, tc := range []struct {
		name string
		// One split each: "COLOR0 KEY0 COLOR1 KEY1", what ranks 0 and 1
		// pass (color -1 is OCCL_SPLIT_NOCOLOR).
		splits []string
	}{
		{"all then self", []string{"0 0 0 1", "1 0 2 0"}},
		{"same color, keys reversed", []string{"0 0 0 1", "0 1 0 0"}},
		{"one rank without a color", []string{"0 0 0 1", "-1 0 5 0", "7 1 7 0"}},
	} {
		for _, mode := range []string{"threads", "single"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, append([]string{mode, strconv.Itoa(iterations)}, tc.splits...)...)
				cmd.Env = append(os.Environ(), "OCCL_TRANSPORT=tcp", "OCCL_TIMEOUT=20s", "TMPDIR="+t.TempDir())
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.HasSuffix(string(out), "groupsplits: ok\n") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
		}
	}
}
