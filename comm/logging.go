package comm

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
)

// logSettings logs the settings the communicator runs with, at INFO in
// subsystem INIT.
func (c *Communicator) logSettings() {
	l := logx.For(c.log, logx.Init)
	if !l.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	topology := "none"
	if t := c.lay().topo; t != nil {
		topology = t.Name
		if topology == "" {
			topology = fmt.Sprintf("%d ranks on %d hosts", len(t.Ranks), len(t.Hosts))
		}
	}
	// What OCCL_DEBUG and OCCL_DEBUG_SUBSYS say; WithLogger's logger may
	// filter otherwise.
	debug, err := logx.FromEnv()
	if err != nil {
		debug = logx.Default
	}
	l.Info("occl: settings",
		"algo", c.cfg.algo, "chunk", c.cfg.chunk, "streams", c.cfg.streams,
		"timeout", c.cfg.timeout, "heartbeat", c.cfg.heartbeat, "heartbeat_timeout", c.cfg.heartbeatTimeout,
		"transport", c.cfg.transport, "links", c.TransportName(), "single_copy", c.cfg.singleCopy(),
		"affinity", c.cfg.affinity, "hosts", c.NumHosts(), "topology", topology, "emulate", c.cfg.emulate,
		"trace", c.obs.dir, "flight_record", c.obs.flightLen, "flight_signal", c.obs.signal,
		"env", debug.String())
}

// logChoice logs the schedule chosen for op on bytes bytes and what it was
// chosen from, at DEBUG in subsystem TUNE: how (forced, cost model or
// size rules) and every candidate's predicted time (n/a: the schedule
// does not apply; no-path: it needs a link the fabric lacks). An
// all-to-all passes
// its byte matrix (nil when it is not routed). It costs a load when
// occl's own logger has the subsystem or level off, and one call to
// Enabled when another handler does.
func (c *Communicator) logChoice(ctx context.Context, op algo.Collective, bytes int, chosen algo.Algorithm, matrix [][]int) {
	if c.tuneNever || !c.tune.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l := c.lay()
	var cands []string
	add := func(a algo.Algorithm, t float64, ok bool) {
		switch {
		case !ok:
			cands = append(cands, a.String()+"=n/a")
		case math.IsInf(t, 1):
			cands = append(cands, a.String()+"=no-path")
		default:
			cands = append(cands, fmt.Sprintf("%s=%v", a, time.Duration(t*float64(time.Second))))
		}
	}
	how := "size rules"
	switch {
	case c.cfg.algo != algo.AlgoAuto && chosen == c.cfg.algo:
		how = "forced"
	case matrix == nil && (op == algo.OpAllToAll || op == algo.OpAllToAllV):
		how = "no routed schedule applies"
	case l.model != nil && matrix != nil:
		how = "cost model"
		for _, s := range algo.Schedules() {
			if s.Impl(algo.OpAllToAllV) != nil {
				t, ok := l.model.PredictAllToAll(s.Algorithm, matrix)
				add(s.Algorithm, t, ok)
			}
		}
	case l.model != nil:
		if ps := l.model.Candidates(op, bytes); len(ps) > 0 {
			how = "cost model"
			for _, p := range ps {
				add(p.Algorithm, p.Seconds, p.OK && algo.Applicable(op, p.Algorithm, l.topo))
			}
		}
	}
	c.tune.Debug("occl: schedule", "op", op, "bytes", bytes, "chosen", chosen, "by", how, "candidates", strings.Join(cands, " "))
}
