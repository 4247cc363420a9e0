package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
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

// TestHugePages: with Config.HugePages a runner's buffers from 2 MiB start
// on a huge-page boundary in a mapping the kernel has been advised to back
// with huge pages (smaps' "hg" flag), an AllToAll over them gives the right
// results, and Close unmaps them.
func TestHugePages(t *testing.T) {
	const n = 3
	const max = 6 << 20
	comms, err := comm.NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs := make([]*Runner, n)
	for r, c := range comms {
		if runs[r], err = NewRunner(c, Config{Op: AllToAll, DType: algo.Float32, Iters: 2, Warmup: 1, Check: true, HugePages: true}, max); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range [][]byte{runs[0].sbuf, runs[0].rbuf} {
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if addr%hugePage != 0 {
			t.Errorf("buffer at %#x: not on a huge-page boundary", addr)
		}
		if f := vmFlags(t, addr); !strings.Contains(" "+f+" ", " hg ") {
			t.Errorf("buffer at %#x: mapping's flags %q lack hg (MADV_HUGEPAGE)", addr, f)
		}
	}
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[r], errs[r] = runs[r].Run(ctx, max)
		}()
	}
	wg.Wait()
	for r := range runs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if results[r].Wrong != 0 || results[r].InPlaceWrong != 0 {
			t.Fatalf("rank %d: %d wrong out of place, %d in place", r, results[r].Wrong, results[r].InPlaceWrong)
		}
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(runs[0].sbuf)))
	for _, run := range runs {
		if err := run.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if f := vmFlags(t, addr); strings.Contains(" "+f+" ", " hg ") {
		t.Errorf("buffer at %#x still mapped with hg after Close", addr)
	}
	// Below a huge page the buffers are the heap's.
	small, err := NewRunner(comms[0], Config{Op: AllReduce, DType: algo.Float32, Iters: 1, HugePages: true}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f := vmFlags(t, uintptr(unsafe.Pointer(unsafe.SliceData(small.sbuf)))); strings.Contains(" "+f+" ", " hg ") {
		t.Errorf("a 1 MiB buffer is in an hg mapping (%q)", f)
	}
	small.Close()
}
