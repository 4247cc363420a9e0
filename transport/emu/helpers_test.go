package emu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/mem"
)

var keySeq atomic.Int64

// newKey returns a job key no other test or test run uses.
func newKey() string {
	return fmt.Sprintf("test-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), keySeq.Add(1))
}

func mustSpec(t testing.TB, spec string) *topo.Topology {
	t.Helper()
	tp, err := topo.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func newFabric(t testing.TB, tp *topo.Topology, cfg emu.Config) *emu.Fabric {
	t.Helper()
	f, err := emu.New(tp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func localFabric(t testing.TB, spec string) *emu.Fabric {
	return newFabric(t, mustSpec(t, spec), emu.Config{Local: true})
}

// pipe joins rank a and rank b of f with a wrapped in-process pipe of the
// given ring capacity (0: mem.DefaultCapacity).
func pipe(t testing.TB, f *emu.Fabric, a, b, capacity int) (ca, cb *emu.Conn) {
	t.Helper()
	return pipe2(t, f, f, a, b, capacity)
}

// pipe2 is pipe with each end wrapped by its own Fabric.
func pipe2(t testing.TB, fa, fb *emu.Fabric, a, b, capacity int) (ca, cb *emu.Conn) {
	t.Helper()
	if capacity == 0 {
		capacity = mem.DefaultCapacity
	}
	x, y := mem.Pipe(capacity)
	ca, err := fa.Wrap(x, a, b)
	if err != nil {
		t.Fatal(err)
	}
	cb, err = fb.Wrap(y, b, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ca.Close()
		cb.Close()
	})
	return ca, cb
}

func hdr(seq uint64) transport.Header {
	return transport.Header{Kind: transport.KindP2P, Comm: 0xE, Seq: seq}
}

// stream sends total bytes from tx to rx in frames of chunk bytes while a
// goroutine receives them. It returns when the sender's last Send
// returned and when the receiver's last Recv returned, both measured from
// the first Send. It may be called from any goroutine: it reports failures
// with t.Error.
func stream(t testing.TB, tx, rx transport.Conn, total, chunk int) (sent, received time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	frames := (total + chunk - 1) / chunk
	got := make(chan error, 1)
	var recvDone atomic.Int64
	start := time.Now()
	go func() {
		buf := make([]byte, chunk)
		for i := range frames {
			n := min(chunk, total-i*chunk)
			if err := rx.Recv(ctx, hdr(uint64(i)), buf[:n]); err != nil {
				got <- fmt.Errorf("recv %d: %w", i, err)
				return
			}
		}
		recvDone.Store(int64(time.Since(start)))
		got <- nil
	}()
	buf := make([]byte, chunk)
	for i := range frames {
		n := min(chunk, total-i*chunk)
		if err := tx.Send(ctx, hdr(uint64(i)), buf[:n]); err != nil {
			t.Errorf("send %d: %v", i, err)
			cancel()
			<-got
			return 0, 0
		}
	}
	sent = time.Since(start)
	if err := <-got; err != nil {
		t.Error(err)
	}
	return sent, time.Duration(recvDone.Load())
}

// linkTime is the time frames of chunk bytes carrying total bytes take at
// bandwidth bytes per second, frame headers included.
func linkTime(total, chunk int, bandwidth float64) time.Duration {
	frames := (total + chunk - 1) / chunk
	bytes := float64(total + frames*transport.HeaderSize)
	return time.Duration(bytes / bandwidth * 1e9)
}

// atLeast fails unless got >= want, allowing for the microsecond-scale
// error of converting between the clocks of the emulator and the test.
func atLeast(t testing.TB, what string, got, want time.Duration) {
	t.Helper()
	if got < want-50*time.Microsecond {
		t.Errorf("%s took %v, faster than the emulated fabric allows (at least %v)", what, got, want)
	} else {
		t.Logf("%s took %v (lower bound %v)", what, got, want)
	}
}

// noTableFiles fails if dir holds table files.
func noTableFiles(t testing.TB, dir string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "occl-emu-*"))
	if len(m) > 0 {
		t.Errorf("table files left behind: %v", m)
	}
}
