package hugemem

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/occl/occl/internal/smaps"
)

func requireLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("huge-page buffers need Linux")
	}
}

// TestAlloc: a buffer from PageSize up starts on a huge-page boundary in a
// mapping advised for huge pages, a smaller one is page-aligned and not
// advised, both are zeroed and writable, and Free unmaps them.
func TestAlloc(t *testing.T) {
	requireLinux(t)
	for _, n := range []int{1, 4096, 100_000, PageSize, 3*PageSize + 12345} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || cap(b) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		a := addr(b)
		align := uintptr(4096)
		if n >= PageSize {
			align = PageSize
		}
		if a%align != 0 {
			t.Errorf("Alloc(%d) at %#x: not aligned to %d", n, a, align)
		}
		m, err := smaps.Of(a)
		if err != nil {
			t.Fatal(err)
		}
		if m.Advised() != (n >= PageSize) {
			t.Errorf("Alloc(%d): advised for huge pages %v (flags %q)", n, m.Advised(), m.Flags)
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("Alloc(%d): byte %d is %d", n, i, b[i])
			}
			b[i] = byte(i)
		}
		if err := Free(b); err != nil {
			t.Fatalf("Free: %v", err)
		}
		if m, err := smaps.Of(a); err == nil && m.Advised() {
			t.Errorf("Alloc(%d): still mapped after Free (%#x-%#x)", n, m.Lo, m.Hi)
		}
	}
}

// TestFreeRefuses: Free refuses what Alloc did not hand out or has
// released: a second Free, a slice that starts inside a buffer, a heap
// slice, nil; and Alloc refuses sizes below 1.
func TestFreeRefuses(t *testing.T) {
	requireLinux(t)
	b, err := Alloc(PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := Free(b[1:]); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("Free of an inner slice: %v", err)
	}
	if err := Free(make([]byte, 10)); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("Free of a heap slice: %v", err)
	}
	if err := Free(nil); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("Free(nil): %v", err)
	}
	if err := Free(b[:0]); err != nil { // the start is what counts
		t.Fatalf("Free: %v", err)
	}
	if err := Free(b); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("second Free: %v", err)
	}
	for _, n := range []int{0, -1} {
		if _, err := Alloc(n); err == nil {
			t.Errorf("Alloc(%d) succeeded", n)
		}
	}
}

// TestConcurrent allocates and frees from many goroutines at once (run
// with -race): every buffer is its own, and all are freed exactly once.
func TestConcurrent(t *testing.T) {
	requireLinux(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				b, err := Alloc(PageSize/2 + i*4096)
				if err != nil {
					errs <- err
					return
				}
				b[0], b[len(b)-1] = byte(g), byte(i)
				if err := Free(b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	live.Lock()
	defer live.Unlock()
	if len(live.m) != 0 {
		t.Errorf("%d buffers left live", len(live.m))
	}
}
