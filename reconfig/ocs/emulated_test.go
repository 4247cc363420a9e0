package ocs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

func TestEmulatedDelay(t *testing.T) {
	sw := newSwitch(t, 8, 30*time.Millisecond)
	start := time.Now()
	prog, err := sw.Apply(context.Background(), nil, mustParse(t, "0-1,2-3,4-5"))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("apply of 3 connects took %v, want at least the 30ms switching delay", el)
	}
	if len(prog.Added) != 3 || len(prog.Removed) != 0 {
		t.Fatalf("progress = %+v", prog)
	}
	if ocs.PiezoDelay != 25*time.Millisecond || ocs.TransceiverDelay != time.Millisecond {
		t.Fatal("named delays changed")
	}
}

func TestEmulatedCancelLeavesReportedProgress(t *testing.T) {
	sw := newSwitch(t, 16, 0)
	if _, err := sw.Apply(context.Background(), nil, mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	sw.SlowApply(time.Second) // 5 changes, one every 200ms
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		prog ocs.Progress
		err  error
	}
	done := make(chan result, 1)
	go func() {
		prog, err := sw.Apply(ctx, mustParse(t, "0-1"), mustParse(t, "2-3,4-5,6-7,8-9"))
		done <- result{prog, err}
	}()
	for !strings.HasPrefix(hwConnects(t, sw), "2-3") { // the first connect is made
		time.Sleep(time.Millisecond)
	}
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled apply: %v", r.err)
	}
	if len(r.prog.Removed) != 1 || len(r.prog.Added) == 0 || len(r.prog.Added) == 4 {
		t.Fatalf("progress after cancel = %+v, want partial", r.prog)
	}
	if got, want := hwConnects(t, sw), ocs.FormatConnects(r.prog.Added); got != want {
		t.Fatalf("switch holds %s, progress says %s", got, want)
	}
}

func TestEmulatedFailNextApply(t *testing.T) {
	sw := newSwitch(t, 16, 0)
	sw.FailNextApply(2)
	prog, err := sw.Apply(context.Background(), nil, mustParse(t, "0-1,2-3,4-5,6-7"))
	if !errors.Is(err, ocs.ErrInjected) || len(prog.Added) != 2 {
		t.Fatalf("FailNextApply(2): %+v, %v", prog, err)
	}
	// One shot: the next apply works (here: the rollback).
	if _, err := sw.Apply(context.Background(), prog.Added, nil); err != nil {
		t.Fatal(err)
	}
	sw.FailNextApply(5) // more than the apply makes: all made, then the error
	prog, err = sw.Apply(context.Background(), nil, mustParse(t, "0-1"))
	if !errors.Is(err, ocs.ErrInjected) || len(prog.Added) != 1 {
		t.Fatalf("FailNextApply(5) with one connect: %+v, %v", prog, err)
	}
	sw.FailNextApply(0)
	sw.FailNextApply(-1) // disarmed
	if _, err := sw.Apply(context.Background(), nil, mustParse(t, "2-3")); err != nil {
		t.Fatal(err)
	}
}

func TestEmulatedChecks(t *testing.T) {
	sw := newSwitch(t, 8, 0)
	ctx := context.Background()
	if _, err := sw.Apply(ctx, nil, mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string][2]string{
		"remove not installed": {"2-3", ""},
		"port in use":          {"", "1-2"},
		"port twice":           {"", "2-3,3-4"},
		"out of range":         {"", "2-8"},
		"self":                 {"", "2-2"},
	} {
		remove, add := mustParse(t, c[0]), mustParse(t, c[1])
		prog, err := sw.Apply(ctx, remove, add)
		if err == nil || len(prog.Added)+len(prog.Removed) != 0 {
			t.Errorf("%s: %+v, %v", name, prog, err)
		}
	}
	if err := sw.FailPort(5); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Apply(ctx, nil, mustParse(t, "4-5")); err == nil {
		t.Error("connect to a failed port accepted")
	}
	select {
	case <-sw.Changes():
	default:
		t.Error("FailPort did not signal Changes")
	}
	if err := sw.FailPort(8); err == nil {
		t.Error("FailPort(8) on an 8-port switch accepted")
	}
	if failed, _ := sw.FailedPorts(ctx); len(failed) != 1 || failed[0] != 5 {
		t.Errorf("FailedPorts = %v", failed)
	}
	// Re-pairing in one apply: remove frees the ports add uses.
	if _, err := sw.Apply(ctx, mustParse(t, "0-1"), mustParse(t, "0-2,1-3")); err != nil {
		t.Fatal(err)
	}
	if got := hwConnects(t, sw); got != "0-2,1-3" {
		t.Fatalf("switch holds %s", got)
	}
	if _, err := ocs.NewEmulated(1, 0); err == nil {
		t.Error("1-port switch accepted")
	}
	if _, err := ocs.NewEmulated(4, -time.Second); err == nil {
		t.Error("negative delay accepted")
	}
}

func TestEmulatedConcurrentUse(t *testing.T) {
	sw := newSwitch(t, 64, 0)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := topo.Circuit{A: 2 * g, B: 2*g + 1}
			for range 50 {
				if _, err := sw.Apply(ctx, nil, []topo.Circuit{c}); err != nil {
					t.Error(err)
					return
				}
				sw.Connections(ctx)
				sw.FailedPorts(ctx)
				if _, err := sw.Apply(ctx, []topo.Circuit{c}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			sw.FailPort(60 + i%4)
			sw.RepairPort(60 + i%4)
			sw.Stats()
		}
	}()
	wg.Wait()
	if st := sw.Stats(); st.Connects != 400 || st.Disconnects != 400 {
		t.Fatalf("stats = %+v", st)
	}
}
