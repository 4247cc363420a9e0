package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
)

// vmFlags returns the VmFlags of the mapping of /proc/self/smaps that
// holds addr, "" if none does.
func vmFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 { // a mapping's first line
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	return ""
}

// advisedHuge reports whether b starts in a mapping advised for huge pages
// (smaps' "hg" flag).
func advisedHuge(t *testing.T, b []byte) bool {
	return strings.Contains(" "+vmFlags(t, uintptr(unsafe.Pointer(unsafe.SliceData(b))))+" ", " hg ")
}

// TestHugePages: with Config.HugePages a runner's buffers from 2 MiB start
// on a huge-page boundary in a mapping the kernel has been advised to back
// with huge pages, an AllToAll over them gives the right results, and
// Close unmaps them; below 2 MiB they are the heap's.
func TestHugePages(t *testing.T) {
	const n = 3
	const max = 6 << 20
	comms := commtest.Local(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs := make([]*Runner, n)
	for r, c := range comms {
		var err error
		if runs[r], err = NewRunner(c, Config{Op: AllToAll, DType: algo.Float32, Iters: 2, Warmup: 1, Check: true, HugePages: true}, max); err != nil {
			t.Fatal(err)
		}
	}
	sbuf := runs[0].sbuf
	for _, b := range [][]byte{sbuf, runs[0].rbuf} {
		if addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))); addr%hugePage != 0 {
			t.Errorf("buffer at %#x: not on a huge-page boundary", addr)
		}
		if !advisedHuge(t, b) {
			t.Errorf("buffer of %d bytes: its mapping lacks hg (MADV_HUGEPAGE)", len(b))
		}
	}
	commtest.OnEach(t, comms, func(r int, _ *comm.Communicator) error {
		res, err := runs[r].Run(ctx, max)
		if err == nil && (res.Wrong != 0 || res.InPlaceWrong != 0) {
			err = fmt.Errorf("%d wrong out of place, %d in place", res.Wrong, res.InPlaceWrong)
		}
		return err
	})
	for _, run := range runs {
		if err := run.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if advisedHuge(t, sbuf[:1]) {
		t.Error("the send buffer is still mapped with hg after Close")
	}
	small, err := NewRunner(comms[0], Config{Op: AllReduce, DType: algo.Float32, Iters: 1, HugePages: true}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if advisedHuge(t, small.sbuf) {
		t.Error("a 1 MiB buffer is in an hg mapping")
	}
}
