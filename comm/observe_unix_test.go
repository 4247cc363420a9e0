//go:build unix

package comm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestFlightRecordOnSignal: with OCCL_FLIGHT_RECORDER_SIGNAL=1, SIGUSR1
// makes every live communicator write its flight record.
func TestFlightRecordOnSignal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(comm.TraceEnv, dir)
	t.Setenv(comm.FlightRecorderSignalEnv, "1")
	comms, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx := context.Background()
	for range 2 {
		if err := runBoth(comms, func(c *comm.Communicator) error { return c.Barrier(ctx) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("flight-rank-%d.json", r))
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(path); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		d := readFlight(t, path)
		if d.Rank != r || d.Error != "" || len(d.Ops) != 2 || d.Ops[1].Op != "Barrier" || d.Ops[1].Seq != 2 || d.Ops[1].State != comm.OpDone {
			t.Errorf("rank %d: flight record %+v", r, d)
		}
	}
}
