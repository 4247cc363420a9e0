package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
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

// TestGoneWatchPeriod: a member probes each other one every interval, or
// less often when that would exceed its rate of probes a second.
func TestGoneWatchPeriod(t *testing.T) {
	for _, c := range []struct {
		members, rate int
		want          time.Duration
	}{
		{2, goneProbeRate, goneProbeInterval},
		{8, goneProbeRate, goneProbeInterval},
		{101, goneProbeRate, goneProbeInterval},
		{201, goneProbeRate, 200 * time.Millisecond},
		{1025, goneProbeRate, 1024 * time.Millisecond},
		{1025, 0, goneProbeInterval}, // no bound
	} {
		w := &goneWatch{members: make([]int, c.members), interval: goneProbeInterval, rate: c.rate}
		if got := w.period(); got != c.want {
			t.Errorf("%d members at most %d probes a second: every %v, want %v", c.members, c.rate, got, c.want)
		}
	}
}

// TestGoneWatchSpread: the watch probes every other member once per
// period, spread over it rather than all at once, and finds nobody gone
// while every probe says so. 40 others at 200 probes a second: a period
// of 200 ms, a probe every 5 ms.
func TestGoneWatchSpread(t *testing.T) {
	const n = 41
	var mu sync.Mutex
	count := make([]int, n)
	var at []time.Duration
	start := time.Now()
	w := &goneWatch{self: 7, members: make([]int, n), interval: 10 * time.Millisecond, rate: 200,
		probe: func(_ context.Context, r int) bool {
			mu.Lock()
			defer mu.Unlock()
			count[r]++
			at = append(at, time.Since(start))
			return false
		}}
	period := w.period()
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(ctx, cancel)
	}()
	// Until every other member was probed twice: a full period passed.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		least := n
		for r, k := range count {
			if r != w.self {
				least = min(least, k)
			}
		}
		mu.Unlock()
		if least >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not every member was probed twice within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	cancel(nil)
	<-done
	elapsed := time.Since(start)
	if context.Cause(ctx) != context.Canceled {
		t.Fatalf("the watch ended the bootstrap with %v while nobody is gone", context.Cause(ctx))
	}
	if count[w.self] != 0 {
		t.Errorf("this rank probed itself %d times", count[w.self])
	}
	// No member more often than once a period (and once more at the
	// start), and not all at once at the start: of the first period's
	// probes, fewer than half in its first quarter.
	for r, k := range count {
		if limit := int(elapsed/period) + 2; k > limit {
			t.Errorf("member %d probed %d times in %v, want at most %d (every %v)", r, k, elapsed, limit, period)
		}
	}
	early := 0
	for _, d := range at {
		if d < period/4 {
			early++
		}
	}
	if early > (n-1)/2 {
		t.Errorf("%d of %d members probed in the first quarter of the period (%v): not spread", early, n-1, period/4)
	}
}
