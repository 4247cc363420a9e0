package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/transport/tcp"
)

// TestGoneWatch: which members of a shrink's bootstrap are gone. Of the
// old communicator's ranks 0 to 5, the shrunk one keeps 0, 2, 3, 4 and 5
// (new ranks 0 to 4); this is new rank 0. Old rank 2's process is gone
// (nothing listens at either of its listeners); old rank 3 is stopped (the
// kernel accepts, nobody answers); old rank 4 finished the bootstrap and
// left Shrink (its old listener is closed, its new one serves); old rank 5
// is alive before the rank table.
func TestGoneWatch(t *testing.T) {
	oldSecret, newSecret := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	const oldComm, newComm = 11, 22
	// An address nothing listens at, whose port stays taken (bound, not
	// listening: connections are refused) so that no other test's
	// listener can get it while this one runs.
	closed := func() string {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	}
	listen := func(secret []byte, comm uint64) string {
		ln, err := tcp.Listen("127.0.0.1:0", secret, listenFilter(tcp.PurposeData, comm), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln.Addr().String()
	}
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()

	w := &goneWatch{self: 0, members: []int{0, 2, 3, 4, 5}, oldRank: 0, oldComm: oldComm, oldSecret: oldSecret,
		oldAddrs: []string{listen(oldSecret, oldComm), "", closed(), stopped.Addr().String(), closed(), listen(oldSecret, oldComm)},
		timeout:  time.Hour, interval: 10 * time.Millisecond}
	ctx := context.Background()

	// Before the rank table: only the old listeners tell. Rank 4 looks
	// gone too (it cannot have finished a bootstrap that has no table).
	pe := w.check(ctx, time.Second)
	if pe == nil || pe.Peer != 2 || pe.Reporter != 0 || !errors.Is(pe, ErrPeerFailed) {
		t.Fatalf("check before the rank table: %v, want old rank 2 gone", pe)
	}
	expectGone(t, w, "before the rank table", []bool{false, true, false, true, false})

	// Once the table is known, a member whose new listener serves is not
	// gone, whatever its old one says; the stopped one is never gone.
	w.known(newComm, newSecret, []string{listen(newSecret, newComm), closed(), stopped.Addr().String(), listen(newSecret, newComm), listen(newSecret, newComm)})
	expectGone(t, w, "after the rank table", []bool{false, true, false, false, false})

	// The watch ends the bootstrap with the member gone.
	wctx, wcancel := context.WithCancelCause(ctx)
	defer wcancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(wctx, wcancel)
	}()
	select {
	case <-wctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the watch did not find old rank 2 gone within a minute")
	}
	if pe, ok := context.Cause(wctx).(*PeerError); !ok || pe.Peer != 2 {
		t.Fatalf("the watch ended with %v, want old rank 2 gone", context.Cause(wctx))
	}
	<-done
}

// expectGone checks which members (by new rank) w finds gone; the first is
// this rank and is not probed.
func expectGone(t *testing.T, w *goneWatch, when string, want []bool) {
	t.Helper()
	for r := 1; r < len(want); r++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if got := w.gone(ctx, r); got != want[r] {
			t.Errorf("%s: new rank %d (old %d) gone: %v, want %v", when, r, w.members[r], got, want[r])
		}
		cancel()
	}
}
