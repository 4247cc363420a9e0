// Command moe runs the communication of a Mixture-of-Experts model's layers
// on an emulated optical fabric, twice: once with the circuits planned for
// the first layer and left in place, once reconfiguring the circuits for
// every layer while its experts compute.
//
// Each layer: the gate decides where tokens go (the demand matrix, with
// popular experts that change from layer to layer), the reconfiguration
// to circuits planned for that demand starts (ReconfigureAsync) and
// overlaps with emulated expert computation, then the dispatch
// all-to-all, the experts' computation, and the combine all-to-all.
//
//	go run ./examples/moe -np 8
//
// launches 8 local processes on 127.0.0.1 (virtual hosts of the -topo
// fabric, every link shaped by the emulated fabric) and an emulated optical
// switch with a gRPC controller in rank 0's process, and prints per layer
// the all-to-all time with and without reconfiguration and how much of the
// reconfiguration the computation hid.
//
// With -trace DIR (or OCCL_TRACE=DIR) every rank also writes its timeline
// to DIR: occl's operations and reconfiguration steps, and on their own
// row ("application") the example's passes (warm-up, static,
// reconfigured), each layer in them and the phases of the layer that the
// table times: attention, reconf wait, dispatch, experts and combine.
// "occl-trace merge DIR -o job.json" puts the ranks on one clock.
//
// With -kill-rank R -at-layer L the example runs the reconfigured pass
// only, and rank R kills itself (SIGKILL) in the middle of layer L's
// dispatch all-to-all. The survivors see the all-to-all fail with a
// *comm.PeerError naming R, shrink the communicator (Communicator.Shrink),
// narrow the fabric to the survivors (topo.Topology.Without), give R's
// experts to a survivor, and run layers L and on again, reconfiguring
// the circuits for the new membership before each. With -spare, one
// more process is started as a spare: it joins (comm.Join) when the
// survivors grow the shrunk communicator by one (Communicator.Grow),
// takes R's place on the fabric and R's experts, and the run finishes on
// as many ranks as it started with. The report gives the detection time
// (fault to error), the recovery time (error to the first successful
// collective on the new communicator) and the layers after it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/trace"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type config struct {
	layers  int
	bytes   int // per rank per all-to-all
	compute time.Duration
	delay   time.Duration
	skew    float64
	spec    string
	np      int
	// killRank, if not negative, kills itself in layer killLayer's
	// dispatch; spare starts a process that joins the survivors.
	killRank, killLayer int
	spare               bool
	dir                 string // where the ranks and the spare share files
}

// Environment of the launched processes in a run with -kill-rank.
const (
	dirEnv   = "MOE_DIR"   // the directory the launcher made
	spareEnv = "MOE_SPARE" // set for the spare
)

// Files in that directory.
const (
	faultFile  = "fault"   // Unix nanoseconds at which the killed rank died
	growIDFile = "grow-id" // the id the survivors grow with, for the spare
)

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 8, "launch this many local processes (0: join a launched job)")
	var cfg config
	fs.IntVar(&cfg.layers, "layers", 8, "MoE layers")
	fs.IntVar(&cfg.bytes, "bytes", 4<<20, "bytes each rank sends in each all-to-all")
	fs.DurationVar(&cfg.compute, "compute", 30*time.Millisecond, "emulated expert computation per layer (overlaps the reconfiguration)")
	fs.DurationVar(&cfg.delay, "switch-delay", 25*time.Millisecond, "switching time of the emulated optical switch")
	fs.Float64Var(&cfg.skew, "skew", 1.2, "Zipf exponent of expert popularity")
	fs.StringVar(&cfg.spec, "topo", "hosts=4x2,nics=host,ocs_ports=2,hbd=2GB/s,eps=100MB/s,ocs=100MB/s", "emulated fabric (OCCL_TOPO spec)")
	fs.IntVar(&cfg.killRank, "kill-rank", -1, "this rank kills itself in the dispatch all-to-all of -at-layer; the others recover (-1: none)")
	fs.IntVar(&cfg.killLayer, "at-layer", 0, "the layer in which -kill-rank dies")
	fs.BoolVar(&cfg.spare, "spare", false, "with -kill-rank: start a spare process that joins the survivors and takes the dead rank's place")
	traceDir := fs.String("trace", "", "write every rank's timeline, occl's operations and the layers' phases, to this directory (sets "+comm.TraceEnv+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *traceDir != "" {
		// The ranks launched below inherit it; a joining rank reads it
		// at InitFromEnv.
		if err := os.Setenv(comm.TraceEnv, *traceDir); err != nil {
			fmt.Fprintln(stderr, "moe:", err)
			return 1
		}
	}
	if cfg.layers < 1 || cfg.bytes < 0 || cfg.compute < 0 || cfg.skew < 0 {
		fmt.Fprintln(stderr, "moe: layers must be positive; bytes, compute and skew not negative")
		return 2
	}
	cfg.np = *np
	if cfg.killRank >= 0 && (*np < 2 || cfg.killRank >= *np || cfg.killLayer < 0 || cfg.killLayer >= cfg.layers) {
		fmt.Fprintln(stderr, "moe: -kill-rank needs -np of at least 2 and a rank below it, and -at-layer below -layers")
		return 2
	}
	if cfg.spare && cfg.killRank < 0 {
		fmt.Fprintln(stderr, "moe: -spare needs -kill-rank")
		return 2
	}
	if *np > 0 && os.Getenv("OCCL_RANK") == "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "moe:", err)
			return 1
		}
		if cfg.killRank >= 0 {
			if err := launchKill(ctx, cfg, self, args, stdout, stderr); err != nil {
				fmt.Fprintln(stderr, "moe:", err)
				return 1
			}
			return 0
		}
		if _, err := launch.Run(ctx, launch.Spec{NP: *np, Path: self, Args: args, Stdout: stdout, Stderr: stderr, RawStdout: true}); err != nil {
			fmt.Fprintln(stderr, "moe:", err)
			return 1
		}
		return 0
	}
	cfg.dir = os.Getenv(dirEnv)
	if cfg.killRank >= 0 && cfg.dir == "" {
		fmt.Fprintln(stderr, "moe: -kill-rank runs under the example's own launcher (-np)")
		return 2
	}
	if os.Getenv(spareEnv) != "" {
		if err := spareWorker(cfg); err != nil {
			fmt.Fprintln(stderr, "moe: spare:", err)
			return 1
		}
		return 0
	}
	if err := worker(cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "moe:", err)
		return 1
	}
	return 0
}

// layerStats is one layer of one pass, the longest over ranks.
type layerStats struct {
	a2a     time.Duration // dispatch + combine
	total   time.Duration // the reconfiguration, last rank's call to last rank's end
	switchT time.Duration // of which the switch
	exposed time.Duration // how much later the last rank started the next all-to-all
	wait    time.Duration // the longest any rank waited for it after its computation
}

// layerClock is one rank's wall-clock times (Unix nanoseconds) of a layer,
// all processes of a loopback run sharing the clock: the layer's
// statistics compare the last rank's times, because no collective starts
// before the last rank is ready for it, with or without reconfiguration.
type layerClock struct {
	call    int64 // called ReconfigureAsync
	end     int64 // its communicator finished the reconfiguration
	ready   int64 // finished the computation
	resumed int64 // the reconfiguration was done, the all-to-all could start
	// wait is resumed-ready by the monotonic clock, as the timeline's
	// "reconf wait" slice has it: the wall-clock stamps above are read
	// apart from the monotonic clock (time.Now reads the two one after
	// the other), which can move a wait of microseconds by tens of
	// nanoseconds.
	wait int64
}

func worker(cfg config, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base, err := topo.FromSpec(cfg.spec)
	if err != nil {
		return err
	}
	c, err := comm.InitFromEnv(ctx, comm.WithTopology(base), comm.WithEmulation(true))
	if err != nil {
		return err
	}
	defer c.Close()
	out := stdout // after a failure, the new rank 0 prints
	sw := &switcher{delay: cfg.delay}
	defer sw.close()
	if c.Rank() == 0 {
		if err := sw.start(ctx, base); err != nil {
			return err
		}
	} else {
		stdout = io.Discard
	}
	ctl := sw.controller()
	n := c.Size()
	demands := make([][][]int, cfg.layers)
	targets := make([]*topo.Topology, cfg.layers)
	for l := range demands {
		demands[l] = gate(n, l, cfg)
		if targets[l], err = plan(base, demands[l]); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "# moe: %d ranks, %s, %d layers, %d bytes per rank per all-to-all, compute %v, switch %v\n",
		n, cfg.spec, cfg.layers, cfg.bytes, cfg.compute, cfg.delay)
	// Static: the first layer's circuits for every layer.
	if _, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c}, targets[0], reconfig.WithController(ctl)); err != nil {
		return err
	}
	// Warm up connections and buffers, untimed.
	if _, err := pass(ctx, c, "warm-up", cfg, demands[:1], nil, ctl, 0, -1); err != nil {
		return err
	}
	if cfg.killRank >= 0 {
		return killRun(ctx, cfg, c, base, demands, targets, sw, out)
	}
	static, err := pass(ctx, c, "static", cfg, demands, nil, ctl, 0, -1)
	if err != nil {
		return err
	}
	dynamic, err := pass(ctx, c, "reconfigured", cfg, demands, targets, ctl, 0, -1)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# layer  hot  a2a static  a2a reconf  speedup  reconf total  switch   hidden  exposed  max wait\n")
	fmt.Fprintf(stdout, "#                    (ms)        (ms)                   (ms)    (ms)     (ms)     (ms)      (ms)\n")
	var sumS, sumD, sumExp time.Duration
	for l := range static {
		s, d := static[l], dynamic[l]
		hidden := max(d.total-d.exposed, 0)
		fmt.Fprintf(stdout, "%7d %4d %11.2f %11.2f %8.2f %13.2f %7.2f %8.2f %8.3f %9.3f\n", l, hot(l, n), ms(s.a2a), ms(d.a2a),
			float64(s.a2a)/float64(max(d.a2a, 1)), ms(d.total), ms(d.switchT), ms(hidden), ms(d.exposed), ms(d.wait))
		sumS += s.a2a
		sumD += d.a2a
		sumExp += d.exposed
	}
	fmt.Fprintf(stdout, "# all layers: all-to-all %.1f ms static, %.1f ms reconfigured (%.2fx); reconfiguration exposed %.3f ms in all\n",
		ms(sumS), ms(sumD), float64(sumS)/float64(max(sumD, 1)), ms(sumExp))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// hot is the most popular expert's rank in layer l.
func hot(l, n int) int { return (3 * l) % n }

// gate returns layer l's demand in bytes: every rank sends rank d a share
// of cfg.bytes proportional to 1/(k+1)^skew, k being d's popularity rank
// (the hot expert first).
func gate(n, l int, cfg config) [][]int { return gateOn(identity(n), n, l, cfg) }

// gateOn is gate for experts placed on ranks: expert e (one per rank the
// job started with) runs on rank owner[e] of a communicator of n ranks,
// which receives the tokens of every expert it holds.
func gateOn(owner []int, n, l int, cfg config) [][]int {
	e := len(owner)
	w := make([]float64, e)
	sum := 0.0
	for x := range e {
		k := (x - hot(l, e) + e) % e
		w[x] = 1 / math.Pow(float64(k+1), cfg.skew)
		sum += w[x]
	}
	out := make([][]int, n)
	for s := range out {
		out[s] = make([]int, n)
		for x, d := range owner {
			out[s][d] += int(w[x]/sum*float64(cfg.bytes)) / 4 * 4
		}
	}
	return out
}

// identity returns 0..n-1.
func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// plan places circuits for a demand on the base topology's ports.
func plan(base *topo.Topology, demand [][]int) (*topo.Topology, error) {
	d := make([][]float64, len(demand))
	for i, row := range demand {
		d[i] = make([]float64, len(row))
		for j, b := range row {
			d[i][j] = float64(b)
		}
	}
	t := *base
	t.Circuits = nil
	return &t, t.ConnectFor(d)
}

// pass runs every layer; with targets it reconfigures for each layer
// while the layer's experts compute. With a timeline (c.Timeline), it
// records the pass, each layer in it, and the layer's phases on the
// application thread; a layer's dispatch and combine slices are exactly
// what its all-to-all time adds up. demands[i] is layer from+i; if kill
// is such a layer, this rank dies in its dispatch all-to-all (see die). A
// layer's failure is a *layerError.
func pass(ctx context.Context, c *comm.Communicator, name string, cfg config, demands [][][]int, targets []*topo.Topology, ctl reconfig.Controller, from, kill int) ([]layerStats, error) {
	n, rank := c.Size(), c.Rank()
	stats := make([]layerStats, len(demands))
	clocks := make([]layerClock, len(demands))
	tl := c.Timeline()
	span := func(what string, l int, start, end time.Time) {
		tl.Span(trace.Span{Name: what, Cat: "moe", Start: start, End: end, Tid: trace.App,
			Args: map[string]any{"pass": name, "layer": l}})
	}
	passStart := time.Now()
	for i, dem := range demands {
		l := from + i
		var h *reconfig.Handle
		call := time.Now()
		if targets != nil {
			h = reconfig.ReconfigureAsync(ctx, []*comm.Communicator{c}, targets[i], reconfig.WithController(ctl))
		}
		time.Sleep(cfg.compute) // the previous layer's experts, or attention
		ready := time.Now()
		if h != nil {
			res, err := h.Wait(ctx)
			if err != nil {
				return nil, &layerError{l, "reconfiguration", err}
			}
			resumed := time.Now()
			clocks[i] = layerClock{call: call.UnixNano(), end: call.Add(res.Times[0].Total).UnixNano(),
				ready: ready.UnixNano(), resumed: resumed.UnixNano(), wait: int64(resumed.Sub(ready))}
			stats[i].switchT = res.Switch
			span("reconf wait", l, ready, resumed)
		}
		span("attention", l, call, ready)
		sc, sd, rc, rd := layout(dem, rank, n)
		send := make([]float32, sum(sc))
		for i := range send {
			send[i] = float32(rank)
		}
		recv := make([]float32, sum(rc))
		t0 := time.Now()
		if l == kill {
			// Dies once its all-to-all is under way, before the
			// others' tokens could all have arrived.
			go comm.AllToAllV(ctx, c, send, sc, sd, recv, rc, rd)
			time.Sleep(100 * time.Microsecond)
			die(cfg.dir)
		}
		if err := comm.AllToAllV(ctx, c, send, sc, sd, recv, rc, rd); err != nil {
			return nil, &layerError{l, "dispatch", err}
		}
		d1 := time.Since(t0)
		span("dispatch", l, t0, t0.Add(d1))
		for src := 0; src < n; src++ {
			for _, v := range recv[rd[src] : rd[src]+rc[src]] {
				if v != float32(src) {
					return nil, fmt.Errorf("layer %d (%s pass): token from rank %d carries %v", l, name, src, v)
				}
			}
		}
		for i := range send {
			send[i] = -1 // the combine brings every token back here
		}
		experts := time.Now()
		time.Sleep(cfg.compute) // this layer's experts
		t1 := time.Now()
		span("experts", l, experts, t1)
		// Combine: the tokens go back, the transposed exchange.
		if err := comm.AllToAllV(ctx, c, recv, rc, rd, send, sc, sd); err != nil {
			return nil, &layerError{l, "combine", err}
		}
		d2 := time.Since(t1)
		span("combine", l, t1, t1.Add(d2))
		for _, v := range send {
			if v != float32(rank) {
				return nil, fmt.Errorf("layer %d (%s pass): a token came back to rank %d carrying %v", l, name, rank, v)
			}
		}
		stats[i].a2a = d1 + d2
		span(fmt.Sprintf("layer %d (%s)", l, name), l, call, t1.Add(d2))
	}
	tl.Span(trace.Span{Name: name + " pass", Cat: "moe", Start: passStart, End: time.Now(), Tid: trace.App,
		Args: map[string]any{"pass": name, "layers": len(demands)}})
	// The longest (or latest) over ranks, per layer.
	const k = 7
	flat := make([]int64, k*len(stats))
	for l, s := range stats {
		t := clocks[l]
		copy(flat[k*l:], []int64{int64(s.a2a), int64(s.switchT), t.call, t.end, t.ready, t.resumed, t.wait})
	}
	if err := comm.AllReduce(ctx, c, flat, flat, comm.Max); err != nil {
		return nil, err
	}
	for l := range stats {
		f := flat[k*l : k*(l+1)]
		stats[l] = layerStats{a2a: time.Duration(f[0]), switchT: time.Duration(f[1]),
			total: time.Duration(max(f[3]-f[2], 0)), exposed: time.Duration(max(f[5]-f[4], 0)), wait: time.Duration(f[6])}
	}
	return stats, nil
}

// layout turns a byte matrix into this rank's AllToAllV counts and
// displacements in float32 elements.
func layout(dem [][]int, rank, n int) (sc, sd, rc, rd []int) {
	sc, sd, rc, rd = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	so, ro := 0, 0
	for j := 0; j < n; j++ {
		sc[j], sd[j] = dem[rank][j]/4, so
		so += sc[j]
		rc[j], rd[j] = dem[j][rank]/4, ro
		ro += rc[j]
	}
	return
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}
