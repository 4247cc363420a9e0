package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
)

// Reconfig is occl-bench's -op reconfig: repeated reconfigurations of the
// fabric under a live communicator.
const Reconfig Op = "reconfig"

// ReconfigConfig is what a reconfiguration benchmark runs.
type ReconfigConfig struct {
	// Targets are the topologies the fabric alternates between.
	Targets []*topo.Topology
	// Controller switches the circuits; only rank 0 uses it.
	Controller reconfig.Controller
	Iters      int
	Warmup     int
	// Check runs an AllToAll after every reconfiguration and checks it.
	Check bool
}

// ReconfigResult summarises a reconfiguration benchmark. Times are in
// microseconds, from the wall clock, which all processes of a loopback run
// share. A reconfiguration's total runs from the moment the last rank
// called it to the moment the last rank returned; it cannot end before
// every rank has called it. Its overhead is the time from when it could
// have ended at the earliest to when it did: from the later of the last
// rank's call and the end of the switch, counted from rank 0's call (which
// starts it) plus the switching time the controller reported, to the last
// rank's return. So a switch that starts before the last rank calls does
// not hide any of the runtime's time, and the controller's round trip
// counts as overhead. Skew is how far apart the ranks called it (they
// leave the barrier before it at different times).
type ReconfigResult struct {
	Impl          string  `json:"impl"`
	Op            Op      `json:"op"`
	NP            int     `json:"np"`
	Iters         int     `json:"iters"`
	SwitchUS      float64 `json:"switch_us"`
	TotalP50US    float64 `json:"total_p50_us"`
	TotalP99US    float64 `json:"total_p99_us"`
	OverheadP50US float64 `json:"overhead_p50_us"`
	OverheadP99US float64 `json:"overhead_p99_us"`
	SkewP50US     float64 `json:"skew_p50_us"`
	// Steps are the medians over iterations of each step's longest time
	// over ranks (pause, plan, apply, connect, verify, resume).
	Steps map[string]float64 `json:"steps_p50_us"`
	Links int                `json:"links"`
	Wrong int64              `json:"wrong"`
}

// RunReconfig runs the benchmark on c. Every rank calls it.
func RunReconfig(ctx context.Context, c *comm.Communicator, cfg ReconfigConfig) (ReconfigResult, error) {
	res := ReconfigResult{Impl: "occl", Op: Reconfig, NP: c.Size(), Iters: cfg.Iters, Wrong: -1}
	if len(cfg.Targets) < 2 || cfg.Iters < 1 {
		return res, fmt.Errorf("bench: reconfig needs two targets and an iteration")
	}
	var opts []reconfig.Option
	if cfg.Controller != nil {
		opts = append(opts, reconfig.WithController(cfg.Controller))
	}
	const nsteps = 7 // switch, pause, plan, apply, connect, verify, resume
	samples := make([]float64, nsteps*cfg.Iters)
	// Wall-clock call and return times: the latest of each over ranks,
	// minus the earliest call (kept negated, so one Max finds it), and
	// rank 0's call.
	const nclock = 4
	clock := make([]int64, nclock*cfg.Iters)
	var wrong int64
	for i := -cfg.Warmup; i < cfg.Iters; i++ {
		target := cfg.Targets[(i+cfg.Warmup)%len(cfg.Targets)]
		// Start together, so that a rank's total is the reconfiguration's
		// and not how long it waited for the others to arrive.
		if err := c.Barrier(ctx); err != nil {
			return res, err
		}
		called := time.Now()
		r, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c}, target, opts...)
		ended := time.Now()
		if err != nil {
			return res, fmt.Errorf("reconfiguration %d: %w", i, err)
		}
		if cfg.Check {
			// Check once every rank has returned: on a loopback run with
			// more processes than cores, the check of a rank that returned
			// early would take the CPU from the ranks still finishing.
			if err := c.Barrier(ctx); err != nil {
				return res, err
			}
			w, err := checkAllToAll(ctx, c)
			if err != nil {
				return res, err
			}
			wrong += w
		}
		if i < 0 {
			continue
		}
		clk := clock[nclock*i : nclock*(i+1)]
		clk[0], clk[1], clk[2], clk[3] = called.UnixNano(), ended.UnixNano(), -called.UnixNano(), math.MinInt64
		if c.Rank() == 0 {
			clk[3] = called.UnixNano()
		}
		t := r.Times[0]
		res.Links += t.Links
		row := samples[i*nsteps : (i+1)*nsteps]
		for j, d := range []time.Duration{r.Switch, t.Pause, t.Plan, t.Apply, t.Connect, t.Verify, t.Resume} {
			row[j] = float64(d) / 1e3
		}
	}
	if err := comm.AllReduce(ctx, c, samples, samples, comm.Max); err != nil {
		return res, err
	}
	if err := comm.AllReduce(ctx, c, clock, clock, comm.Max); err != nil {
		return res, err
	}
	col := func(j int) []float64 {
		out := make([]float64, cfg.Iters)
		for i := range out {
			out[i] = samples[i*nsteps+j]
		}
		sort.Float64s(out)
		return out
	}
	total, over, skew := make([]float64, cfg.Iters), make([]float64, cfg.Iters), make([]float64, cfg.Iters)
	for i := range total {
		row := clock[nclock*i : nclock*(i+1)]
		lastCall, lastEnd, firstCall, rootCall := row[0], row[1], -row[2], row[3]
		total[i] = float64(lastEnd-lastCall) / 1e3
		switched := rootCall + int64(samples[i*nsteps]*1e3)
		over[i] = float64(max(lastEnd-max(lastCall, switched), 0)) / 1e3
		skew[i] = float64(lastCall-firstCall) / 1e3
	}
	sort.Float64s(total)
	sort.Float64s(over)
	sort.Float64s(skew)
	res.SkewP50US = quantile(skew, 0.5)
	res.TotalP50US, res.TotalP99US = quantile(total, 0.5), quantile(total, 0.99)
	res.OverheadP50US, res.OverheadP99US = quantile(over, 0.5), quantile(over, 0.99)
	res.SwitchUS = quantile(col(0), 0.5)
	res.Steps = map[string]float64{}
	for j, name := range []string{"pause", "plan", "apply", "connect", "verify", "resume"} {
		res.Steps[name] = quantile(col(j+1), 0.5)
	}
	if cfg.Check {
		w := []int64{wrong}
		if err := comm.AllReduce(ctx, c, w, w, comm.Sum); err != nil {
			return res, err
		}
		res.Wrong = w[0]
	}
	return res, nil
}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// checkAllToAll runs a small AllToAll and counts wrong elements.
func checkAllToAll(ctx context.Context, c *comm.Communicator) (int64, error) {
	n, rank := c.Size(), c.Rank()
	const per = 257
	send, recv := make([]int32, n*per), make([]int32, n*per)
	for j := range send {
		send[j] = int32(rank<<20 | j)
	}
	if err := comm.AllToAll(ctx, c, send, recv); err != nil {
		return 0, err
	}
	var wrong int64
	for src := 0; src < n; src++ {
		for j := 0; j < per; j++ {
			if recv[src*per+j] != int32(src<<20|(rank*per+j)) {
				wrong++
			}
		}
	}
	return wrong, nil
}

// WriteReconfig prints a reconfiguration result as a table row, or as JSON.
func WriteReconfig(w io.Writer, r ReconfigResult, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	fmt.Fprintf(w, "#  np  iters    switch   total p50   total p99  overhead p50  overhead p99  #wrong\n")
	fmt.Fprintf(w, "#                 (ms)        (ms)        (ms)          (ms)          (ms)\n")
	fmt.Fprintf(w, "%5d %6d %9.2f %11.2f %11.2f %13.3f %13.3f %7d\n", r.NP, r.Iters, r.SwitchUS/1e3,
		r.TotalP50US/1e3, r.TotalP99US/1e3, r.OverheadP50US/1e3, r.OverheadP99US/1e3, r.Wrong)
	fmt.Fprintf(w, "# total: from the last rank's call to the last rank's return (the ranks called it %.3f ms apart, median)\n", r.SkewP50US/1e3)
	fmt.Fprintf(w, "# overhead: from the later of the last call and rank 0's call + switch, to the last return\n")
	fmt.Fprintf(w, "# step medians (ms): pause %.3f plan %.3f apply %.3f connect %.3f verify %.3f resume %.3f; links replaced per rank per reconfiguration %.1f\n",
		r.Steps["pause"]/1e3, r.Steps["plan"]/1e3, r.Steps["apply"]/1e3, r.Steps["connect"]/1e3, r.Steps["verify"]/1e3, r.Steps["resume"]/1e3,
		float64(r.Links)/float64(max(r.Iters, 1)))
	return nil
}
