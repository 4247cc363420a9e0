package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/internal/smaps"
)

// advisedHuge reports whether b starts in a mapping advised for huge pages
// (smaps' "hg" flag); false where no mapping holds it.
func advisedHuge(b []byte) bool {
	m, err := smaps.Of(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	return err == nil && m.Advised()
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
		if addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))); addr%hugemem.PageSize != 0 {
			t.Errorf("buffer at %#x: not on a huge-page boundary", addr)
		}
		if !advisedHuge(b) {
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
	if advisedHuge(sbuf[:1]) {
		t.Error("the send buffer is still mapped with hg after Close")
	}
	small, err := NewRunner(comms[0], Config{Op: AllReduce, DType: algo.Float32, Iters: 1, HugePages: true}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if advisedHuge(small.sbuf) {
		t.Error("a 1 MiB buffer is in an hg mapping")
	}
}
