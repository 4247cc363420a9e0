package comm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/topo"
)

// logRun runs a 1 MiB AllReduce and a 64 KiB AllToAll on 4 in-process
// ranks of two hosts of two, logging as level and subsys say, and returns the
// log.
func logRun(t *testing.T, level, subsys string) string {
	t.Helper()
	return logRunOn(t, "hosts=2x2,hbd=8GB/s,eps=1GB/s", level, subsys)
}

// logRunOn is logRun on the topology of spec.
func logRunOn(t *testing.T, spec, level, subsys string) string {
	t.Helper()
	cfg, err := logx.Parse(level, subsys)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := topo.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	errs := runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
		x := make([]float32, 1<<18)
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		return comm.AllToAll(ctx, c, x[:1<<14], x[:1<<14])
	}, comm.WithTopology(tp), comm.WithLogger(logx.New(&buf, cfg)))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return buf.String()
}

// TestLogSchedules checks that at DEBUG the TUNE subsystem logs every
// schedule choice with the candidates' predicted times, and nothing else
// when it is the only subsystem.
func TestLogSchedules(t *testing.T) {
	out := logRun(t, "DEBUG", "TUNE")
	var choices []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, "subsys=TUNE") {
			t.Errorf("a record outside TUNE: %s", line)
		}
		if strings.Contains(line, `msg="occl: schedule"`) && strings.Contains(line, "op=AllReduce") {
			choices = append(choices, line)
		}
	}
	if len(choices) != 4 {
		t.Fatalf("%d AllReduce choices logged, want one per rank:\n%s", len(choices), out)
	}
	for _, want := range []string{"bytes=1048576", "chosen=hier", `by="cost model"`, "rd=", "rhd=", "ring=", "hier=", "gateway=", "2d="} {
		if !strings.Contains(choices[0], want) {
			t.Errorf("choice lacks %q: %s", want, choices[0])
		}
	}
	if !strings.Contains(out, `op=AllToAll bytes=65536 chosen=pairwise by="no routed schedule applies"`) {
		t.Errorf("no all-to-all choice logged:\n%s", out)
	}
	// On a rail-only fabric the cost model chooses a route for the
	// all-to-all; the pairwise exchange has no path across rails.
	out = logRunOn(t, "hosts=2x2,hbd=8GB/s,eps=1GB/s,rail_only=1", "DEBUG", "TUNE")
	for _, want := range []string{`op=AllToAll bytes=65536 chosen=railfwd by="cost model" candidates="pairwise=no-path `, " delegated=n/a railfwd=", " xy="} {
		if !strings.Contains(out, want) {
			t.Errorf("rail-only all-to-all choice lacks %q:\n%s", want, out)
		}
	}
}

// TestLogSettings checks that at INFO rank 0 logs the settings in effect
// once, in subsystem INIT, and that the default configuration logs
// nothing.
func TestLogSettings(t *testing.T) {
	out := logRun(t, "INFO", "INIT")
	if n := strings.Count(out, `msg="occl: settings"`); n != 1 {
		t.Fatalf("settings logged %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"rank=0", "subsys=INIT", "algo=auto", "chunk=", "links=mem", `topology="hosts=2x2,hbd=8GB/s,eps=1GB/s"`, "env=\"OCCL_DEBUG="} {
		if !strings.Contains(out, want) {
			t.Errorf("settings lack %q: %s", want, out)
		}
	}
	if strings.Contains(out, "occl: schedule") {
		t.Errorf("schedule choices logged at INFO:\n%s", out)
	}
	if out := logRun(t, "", ""); out != "" {
		t.Errorf("the default configuration logged:\n%s", out)
	}
}

// TestStallReport: rank 3 is busy elsewhere (alive, answering its control
// plane) while the others have entered an AllReduce; after the stall
// timeout every rank logs one report naming rank 3 as the one that has not
// called it, with the last operation it completed, and the AllReduce then
// completes normally once rank 3 calls it.
func TestStallReport(t *testing.T) {
	cfg, err := logx.Parse("WARN", "")
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	errs := runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
		x := []float32{1}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if c.Rank() == 3 {
			time.Sleep(600 * time.Millisecond)
		}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if x[0] != 16 {
			return fmt.Errorf("rank %d: sum %v, want 16", c.Rank(), x[0])
		}
		return nil
	}, comm.WithStallTimeout(150*time.Millisecond), comm.WithLogger(logx.New(&buf, cfg)))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Rank 3's neighbours in the ring wait on it; who the others wait on
	// depends on the schedule.
	want := []string{"stall at AllReduce(count=1, float32, sum) seq 2: rank 3 has not called it (last completed: seq 1 AllReduce(count=1, float32, sum));",
		"wait on rank 3"}
	seen := map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(line, "stall at") {
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("report %s\nwant it to contain %q", line, w)
			}
		}
		for r := range 4 {
			if strings.Contains(line, fmt.Sprintf(" rank=%d ", r)) {
				seen[r]++
			}
		}
	}
	for r := range 4 {
		if seen[r] != 1 {
			t.Errorf("rank %d logged %d stall reports, want 1; log:\n%s", r, seen[r], buf.String())
		}
	}
}
