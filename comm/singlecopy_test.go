package comm_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestSingleCopy joins two ranks of one process over shared memory, with
// single copies on (a process can read its own memory) and off
// (WithSingleCopy(0)): SingleCopy counts them, and the INFO line that says
// the communicator is ready says it too, with why they are off.
func TestSingleCopy(t *testing.T) {
	for _, c := range []struct {
		opts []comm.Option
		on   int
		log  string
	}{
		{nil, 1, "single_copies=1/1"},
		{[]comm.Option{comm.WithSingleCopy(0)}, 0, "single_copies=0/1 single_copy_off=\"rank %d: single copies are turned off on this side\""},
	} {
		id, err := comm.NewUniqueIDAt("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		comms, logs := initTwoLogged(t, id, slog.LevelInfo, append([]comm.Option{comm.WithTransport(comm.TransportSHM)}, c.opts...)...)
		for r, cm := range comms {
			if on, of := cm.SingleCopy(); on != c.on || of != 1 {
				t.Errorf("rank %d: SingleCopy() = %d, %d; want %d, 1", r, on, of, c.on)
			}
			want := c.log
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, 1-r)
			}
			line := lineWith(logs[r].String(), "communicator ready")
			if !strings.Contains(line, want) || (c.on == 1 && strings.Contains(line, "single_copy_off")) {
				t.Errorf("rank %d: ready line %q, want %q in it", r, line, want)
			}
		}
		closeAll(comms)
	}
}

// initTwoLogged joins two ranks of id in this process, each logging at
// level into a buffer of its own, with opts; it fails t if either does
// not join.
func initTwoLogged(t *testing.T, id comm.UniqueID, level slog.Level, opts ...comm.Option) ([]*comm.Communicator, *[2]syncBuffer) {
	t.Helper()
	var logs [2]syncBuffer
	comms := make([]*comm.Communicator, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log := slog.New(slog.NewTextHandler(&logs[r], &slog.HandlerOptions{Level: level}))
			comms[r], errs[r] = comm.Init(ctx, id, r, 2, append([]comm.Option{comm.WithLogger(log)}, opts...)...)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			closeAll(comms)
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms, &logs
}

// lineWith returns the first line of logs that contains msg.
func lineWith(logs, msg string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}
