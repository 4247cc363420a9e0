package ocs_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/occl/occl/reconfig/ocs"
	"google.golang.org/grpc/codes"
)

// TestRollbackFencesLateRequest: a request that arrives after its rollback
// was applied (delayed on its way, or retried by a client that gave up on
// it) is refused without switching, so that the previous cross-connects
// the rollback restored stay; a request that arrived first is undone by
// its rollback as any other apply, and its retry replays its result.
func TestRollbackFencesLateRequest(t *testing.T) {
	sw, _, c := setup(t, 8, 0)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "before", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, ocs.RollbackRequestID("late"), mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	st := sw.Stats()
	for range 2 {
		_, err := c.Apply(ctx, "late", mustParse(t, "2-3,4-5"))
		wantCode(t, err, codes.Aborted, "request after its rollback")
		if !strings.Contains(err.Error(), "after its rollback") {
			t.Fatalf("unclear error: %v", err)
		}
	}
	if sw.Stats() != st || hwConnects(t, sw) != "0-1" {
		t.Fatalf("a fenced request switched: the switch holds %s", hwConnects(t, sw))
	}
	if r, err := c.Apply(ctx, ocs.RollbackRequestID("late"), mustParse(t, "0-1")); err != nil || !r.Replayed {
		t.Fatalf("rollback retried: %+v, %v, want its recorded result", r, err)
	}

	if _, err := c.Apply(ctx, "early", mustParse(t, "2-3")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, ocs.RollbackRequestID("early"), mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	if got := hwConnects(t, sw); got != "0-1" {
		t.Fatalf("after the rollback of an applied request the switch holds %s, want 0-1", got)
	}
	st = sw.Stats()
	if r, err := c.Apply(ctx, "early", mustParse(t, "2-3")); err != nil || !r.Replayed || sw.Stats() != st {
		t.Fatalf("retry of a request applied before its rollback: %+v, %v, want its recorded result without switching", r, err)
	}
}

// TestRollbackFenceSurvivesRestart: the fence is part of the durable
// request-id log.
func TestRollbackFenceSurvivesRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "ocs.state")
	ctx := ctxT(t)
	cfg := ocs.ServerConfig{StatePath: state, Token: testToken}
	serveUntilStopped(t, newSwitch(t, 8, 0), cfg, func(c1 *ocs.Client) {
		if _, err := c1.Apply(ctx, ocs.RollbackRequestID("late"), mustParse(t, "0-1")); err != nil {
			t.Fatal(err)
		}
	})

	sw2 := newSwitch(t, 8, 0)
	addr, _ := startServer(t, sw2, cfg)
	c2 := dial(t, addr, ocs.WithToken(testToken))
	_, err := c2.Apply(ctx, "late", mustParse(t, "2-3"))
	wantCode(t, err, codes.Aborted, "request after its rollback, across a restart")
	if got := hwConnects(t, sw2); got != "0-1" {
		t.Fatalf("switch holds %s, want 0-1", got)
	}
}
