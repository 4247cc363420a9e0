package ocs_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/internal/nettest"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
	"google.golang.org/grpc/codes"
)

// TestClientRetriesUntilServerStarts: the first attempts find nothing
// listening (UNAVAILABLE); the retry interceptor keeps trying until the
// controller comes up.
func TestClientRetriesUntilServerStarts(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens on addr for now

	c := dial(t, addr, ocs.WithToken(testToken), ocs.WithRetry(20, 20*time.Millisecond))
	type result struct {
		res ocs.ApplyResult
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		res, err := c.Apply(ctxT(t), "early", mustParse(t, "0-1"))
		done <- result{res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("Apply returned before the controller started: %+v", r)
	default:
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	serveOn(t, lis, newSwitch(t, 4, 0), ocs.ServerConfig{Token: testToken})
	r := <-done
	if r.err != nil || r.res.Added != 1 {
		t.Fatalf("Apply after the controller started = %+v, %v", r.res, r.err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("Apply succeeded before the controller existed")
	}

	// Without retries the first attempt fails with UNAVAILABLE.
	dead := nettest.RefusedAddr(t)
	_, err = dial(t, dead, ocs.WithRetry(1, 0)).GetTopology(ctxT(t))
	wantCode(t, err, codes.Unavailable, "no controller, no retry")
}

// TestClientDeadlineOnSlowApply: a deadline that expires while the switch is
// moving fails the call with DEADLINE_EXCEEDED and the controller rolls the
// switch back: the installed set stays the previous one.
func TestClientDeadlineOnSlowApply(t *testing.T) {
	sw := newSwitch(t, 8, 20*time.Millisecond)
	addr, srv := startServer(t, sw, ocs.ServerConfig{Token: testToken})
	c := dial(t, addr, ocs.WithToken(testToken))
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "base", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	sw.SlowApply(2 * time.Second)
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Apply(short, "slow", mustParse(t, "2-3,4-5,6-7"))
	wantCode(t, err, codes.DeadlineExceeded, "slow apply")
	if el := time.Since(start); el > time.Second {
		t.Fatalf("the deadline took %v to fire", el)
	}
	sw.SlowApply(0)
	// The rollback runs on the controller after the client gave up: wait
	// for the switch to be back, then check the controller agrees.
	deadline := time.Now().Add(5 * time.Second)
	for hwConnects(t, sw) != "0-1" {
		if time.Now().After(deadline) {
			t.Fatalf("switch holds %s, want the previous 0-1", hwConnects(t, sw))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if top := srv.Topology(); top.Generation != 1 || ocs.FormatConnects(top.Connects) != "0-1" {
		t.Fatalf("controller after the deadline: %d %v", top.Generation, top.Connects)
	}
	// The next apply waits for the rollback (applies are serialized) and works.
	res, err := c.Apply(ctx, "slow", mustParse(t, "2-3,4-5,6-7"))
	if err != nil || res.Replayed || res.Generation != 2 {
		t.Fatalf("retry = %+v, %v", res, err)
	}

	// The client's default deadline applies when the context has none.
	sw.SlowApply(2 * time.Second)
	defer sw.SlowApply(0)
	cd := dial(t, addr, ocs.WithToken(testToken), ocs.WithTimeout(100*time.Millisecond))
	_, err = cd.Apply(context.Background(), "default-deadline", mustParse(t, "0-1"))
	wantCode(t, err, codes.DeadlineExceeded, "apply past the default deadline")
}

func TestClientRejectsBadInputLocally(t *testing.T) {
	c := dial(t, "127.0.0.1:1", ocs.WithRetry(1, 0)) // nothing there: errors must come from the client
	ctx := ctxT(t)
	_, err := c.Apply(ctx, "x", []topo.Circuit{{A: -1, B: 2}})
	wantCode(t, err, codes.InvalidArgument, "negative port")
	_, err = c.Apply(ctx, "x", mustParse(t, "1-2,2-3"))
	wantCode(t, err, codes.InvalidArgument, "port used twice")
	if !strings.Contains(err.Error(), "ocs: apply x") {
		t.Fatalf("error without context: %v", err)
	}
	_, err = c.Drain(ctx, -3, false)
	wantCode(t, err, codes.InvalidArgument, "negative drain port")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ocs.Dial(cancelled, "127.0.0.1:1"); err == nil {
		t.Fatal("Dial with a cancelled context succeeded")
	}
}

func TestApplyWithoutRequestID(t *testing.T) {
	_, _, c := setup(t, 4, 0)
	res, err := c.Apply(ctxT(t), "", mustParse(t, "0-3"))
	if err != nil || res.Added != 1 {
		t.Fatalf("Apply with a generated id = %+v, %v", res, err)
	}
}

// TestDialRefusesInvalidRetry: WithRetry with no attempt or a negative
// backoff is refused rather than changed into something else; one attempt
// (no retries) and a backoff of 0 (the default) are accepted.
func TestDialRefusesInvalidRetry(t *testing.T) {
	ctx := ctxT(t)
	for _, o := range []ocs.Option{ocs.WithRetry(0, time.Millisecond), ocs.WithRetry(3, -time.Millisecond)} {
		c, err := ocs.Dial(ctx, "127.0.0.1:1", o)
		if err == nil {
			c.Close()
			t.Fatal("Dial accepted an invalid WithRetry")
		}
		if !strings.Contains(err.Error(), "WithRetry") {
			t.Fatalf("Dial with an invalid WithRetry: %v, want an error naming it", err)
		}
	}
	for _, o := range []ocs.Option{ocs.WithRetry(1, 0), ocs.WithRetry(5, time.Millisecond)} {
		c, err := ocs.Dial(ctx, "127.0.0.1:1", o)
		if err != nil {
			t.Fatalf("Dial with a valid WithRetry: %v", err)
		}
		c.Close()
	}
}

// TestDialRefusesNegativeTimeout: a negative WithTimeout would leave calls
// without a deadline, so Dial refuses it; 0 still disables the default
// deadline.
func TestDialRefusesNegativeTimeout(t *testing.T) {
	ctx := ctxT(t)
	c, err := ocs.Dial(ctx, "127.0.0.1:1", ocs.WithTimeout(-time.Second))
	if err == nil {
		c.Close()
		t.Fatal("Dial accepted WithTimeout(-1s)")
	}
	if !strings.Contains(err.Error(), "WithTimeout") {
		t.Fatalf("Dial with a negative timeout: %v, want an error naming WithTimeout", err)
	}
	c, err = ocs.Dial(ctx, "127.0.0.1:1", ocs.WithTimeout(0))
	if err != nil {
		t.Fatalf("Dial with WithTimeout(0): %v", err)
	}
	c.Close()
}
