// Command occl-bench measures occl's collectives the way nccl-tests
// measures NCCL's, with the same flags and the same table.
//
//	occl-bench -np 4 -op allreduce -b 8 -e 64M -f 2 -c 1
//
// With -np N it starts N local processes on 127.0.0.1 itself. Without it,
// it joins a job launched by torchrun, mpirun, srun or occl's launcher
// through their environment variables, so on a cluster:
//
//	mpirun -np 16 occl-bench -op alltoall -b 1K -e 1G
//
// Rank 0 prints the table (or, with -json, one JSON object per size) on
// standard output and a progress line per size on standard error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/bench"
	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport/rdma"
)

type sizeFlag int

func (s *sizeFlag) String() string { return strconv.Itoa(int(*s)) }
func (s *sizeFlag) Set(v string) error {
	n, err := comm.ParseSize(v)
	*s = sizeFlag(n)
	return err
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("occl-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		minBytes  = sizeFlag(32 << 20)
		maxBytes  = sizeFlag(32 << 20)
		stepBytes = sizeFlag(0)
	)
	fs.Var(&minBytes, "b", "minimum size in bytes (K, M, G suffixes)")
	fs.Var(&maxBytes, "e", "maximum size in bytes")
	fs.Var(&stepBytes, "i", "increment between sizes instead of a factor")
	var (
		opName    = fs.String("op", "allreduce", "operation: "+opList()+", reconfig, recover")
		factor    = fs.Int("f", 2, "multiplication factor between sizes")
		iters     = fs.Int("n", 20, "timed iterations per size (-op recover: trials, default 30)")
		warmup    = fs.Int("w", 5, "warmup iterations per size")
		warmTime  = fs.Duration("warmup-time", 20*time.Millisecond, "least time the warm-up of each size lasts (more warm-up iterations follow -w's if they take less; 0: -w alone)")
		check     = fs.Int("c", 1, "check results (1) or not (0)")
		issue     = fs.Int("z", 0, "0: issue a size's iterations with Async calls, then wait for the last; 1: run each operation with the blocking call before issuing the next; 2: issue each operation with its Async call and wait for it before issuing the next (as torch.distributed and the C ABI's callers do)")
		dtName    = fs.String("d", "float", "data type: float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64")
		redName   = fs.String("o", "sum", "reduction: sum, prod, min, max, avg")
		root      = fs.Int("r", 0, "root rank of rooted operations")
		algoName  = fs.String("algo", "auto", "force a schedule: ring, rhd, rd, tree, pairwise, linear")
		transp    = fs.String("transport", "auto", "transport between ranks: auto (shared memory on one host, TCP across hosts), tcp, shm or rdma (OCCL_IB_HCA selects the device; OCCL_IB_EMULATE=1 emulates verbs where there is none)")
		np        = fs.Int("np", 0, "launch this many local processes on 127.0.0.1 (0: join a launched job)")
		jsonOut   = fs.Bool("json", false, "print one JSON object per size instead of the table")
		cpuprof   = fs.String("cpuprofile", "", "write a CPU profile (rank r>0 appends .r)")
		timeout   = fs.Duration("timeout", 5*time.Minute, "deadline of each operation")
		streams   = fs.Int("streams", 0, "TCP sockets per pair of ranks (0: default)")
		chunk     = sizeFlag(0)
		noProgres = fs.Bool("quiet", false, "no progress lines on standard error")
		affinity  = fs.Bool("affinity", true, "bind each local rank to its share of the CPUs (and GOMAXPROCS)")
		hugePages = fs.Bool("hugepages", false, "put the send and receive buffers (from 64 KiB) in occl's allocator's memory (hugemem, the C ABI's occlMemAlloc), as tensors from occl.torch.empty are: shared with the peers on the host, advised for transparent huge pages from 2 MiB (Linux)")
		topoSpec  = fs.String("topo", "", "fabric description: a JSON topology file or a spec such as hosts=4x2,hbd=8GB/s,eps=1GB/s (OCCL_TOPO)")
		emulate   = fs.Bool("emulate", false, "shape every link to the -topo fabric's bandwidth and latency (OCCL_EMULATE=1)")
		latency   = fs.Bool("latency", false, "time every operation of a timed run (one clock reading after each) and report the median, 99th percentile and maximum per operation (the largest any rank measured); needs -z 1 or -z 2")
		explain   = fs.Bool("explain", false, "print the schedule run and the cost model's predicted time next to the measured one")
		skew      = fs.String("skew", "uniform", "alltoallv demand: uniform, zipf:S (every rank sends rank d a share in proportion to 1/(d+1)^S) or a JSON matrix file")
		swDelay   = fs.Duration("switch-delay", 25*time.Millisecond, "-op reconfig: switching time of the emulated optical switch (25ms: piezo OCS; 1ms: transceiver)")
		ocsAddr   = fs.String("ocs", "", "-op reconfig: address of an occl-ocsd controller to use instead of an emulated one (token from OCCL_OCS_TOKEN)")
		circuits  = fs.String("circuits", "", "with -topo: 'auto' installs optical circuits on the host pairs with the most -skew demand (the topology's free OCS ports)")
		fault     = fs.String("fault", bench.FaultKill, "-op recover: how a rank is hit, kill (SIGKILL) or stop (SIGSTOP, continued and killed after the trial)")
		hbTimeout = fs.Duration("heartbeat-timeout", time.Second, "-op recover: silence after which a rank is declared failed (the heartbeat interval is a fifth of it)")
		trialTO   = fs.Duration("trial-timeout", time.Minute, "-op recover: deadline of each trial; processes still running then are killed")
	)
	fs.Var(&chunk, "chunk", "pipelining chunk size (0: default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "occl-bench: "+format+"\n", a...)
		return 1
	}
	op := bench.Op(*opName)
	if op != bench.Reconfig && op != bench.Recover {
		var err error
		if op, err = bench.ParseOp(*opName); err != nil {
			return fail("%v", err)
		}
	}
	dt, err := algo.ParseDType(*dtName)
	if err != nil {
		return fail("%v", err)
	}
	red, err := algo.ParseOp(*redName)
	if err != nil {
		return fail("%v", err)
	}
	forced, err := algo.ParseAlgorithm(*algoName)
	if err != nil {
		return fail("%v", err)
	}
	if *issue < int(bench.Batch) || *issue > int(bench.AsyncWait) {
		return fail("-z %d: want 0 (batched Async calls), 1 (blocking calls) or 2 (Async calls each waited for)", *issue)
	}
	if *latency && *issue == int(bench.Batch) {
		return fail("-latency times each operation alone: use -z 1 (blocking calls) or -z 2 (Async calls each waited for), not -z 0")
	}
	switch *transp {
	case comm.TransportAuto, comm.TransportTCP, comm.TransportSHM, comm.TransportRDMA:
	default:
		return fail("unknown transport %q (auto, tcp, shm, rdma)", *transp)
	}
	sizes, err := bench.Sizes(int(minBytes), int(maxBytes), *factor, int(stepBytes))
	if err != nil {
		return fail("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := []comm.Option{comm.WithTimeout(*timeout), comm.WithAlgorithm(forced), comm.WithTransport(*transp), comm.WithAffinity(*affinity)}
	if *streams > 0 {
		opts = append(opts, comm.WithStreams(*streams))
	}
	if chunk > 0 {
		opts = append(opts, comm.WithChunkSize(int(chunk)))
	}
	var demand *bench.Demand
	if op == bench.AllToAllV || *circuits != "" {
		n, err := worldSize(*np, *topoSpec)
		if err != nil {
			return fail("%v", err)
		}
		if demand, err = bench.ParseDemand(*skew, n); err != nil {
			return fail("%v", err)
		}
	}
	if *circuits != "" && *topoSpec == "" {
		return fail("-circuits needs -topo")
	}
	if op == bench.Reconfig && *topoSpec == "" {
		n, err := worldSize(*np, "")
		if err != nil {
			return fail("%v", err)
		}
		*topoSpec = fmt.Sprintf("hosts=%dx1,nics=host,ocs_ports=2", n)
	}
	if *topoSpec != "" {
		t, err := topo.FromSpec(*topoSpec)
		if err != nil {
			return fail("%v", err)
		}
		switch *circuits {
		case "":
		case "auto":
			if err := t.ConnectFor(demand.Weights); err != nil {
				return fail("-circuits auto: %v", err)
			}
		default:
			return fail("-circuits %q: want auto", *circuits)
		}
		opts = append(opts, comm.WithTopology(t))
	}
	if *emulate {
		opts = append(opts, comm.WithEmulation(true))
	}
	// Everything above is checked before any process starts.
	if op == bench.Recover {
		if os.Getenv("OCCL_RANK") != "" {
			if err := bench.RecoverChild(ctx, stdout, opts...); err != nil {
				return fail("%v", err)
			}
			return 0
		}
		trials := 30
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "n" {
				trials = *iters
			}
		})
		return runRecover(ctx, bench.RecoverConfig{NP: *np, Trials: trials, Fault: *fault, HeartbeatTimeout: *hbTimeout,
			Deadline: *trialTO, Args: args, Transport: *transp}, *jsonOut, *noProgres, stdout, stderr, fail)
	}
	if *np > 0 && os.Getenv("OCCL_RANK") == "" {
		return launchLocal(*np, args, stdout, stderr)
	}
	initCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := comm.InitFromEnv(initCtx, opts...)
	cancel()
	if err != nil {
		return fail("%v", err)
	}
	defer c.Close()
	rank := c.Rank()

	if *cpuprof != "" {
		name := *cpuprof
		if rank > 0 {
			name += "." + strconv.Itoa(rank)
		}
		f, err := os.Create(name)
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail("%v", err)
		}
		defer pprof.StopCPUProfile()
	}

	if op == bench.Reconfig {
		return runReconfig(ctx, c, *iters, *warmup, *check != 0, *swDelay, *ocsAddr, *jsonOut, stdout, fail)
	}
	cfg := bench.Config{Op: op, DType: dt, RedOp: red, Root: *root, Iters: *iters, Warmup: *warmup, WarmupTime: *warmTime, Check: *check != 0, Issue: bench.Issue(*issue), Latency: *latency, HugePages: *hugePages}
	if op == bench.AllToAllV {
		cfg.Demand = demand
	}
	runner, err := bench.NewRunner(c, cfg, sizes[len(sizes)-1])
	if err != nil {
		return fail("%v", err)
	}
	defer runner.Close()
	if rank != 0 {
		stdout = io.Discard
	}
	table := bench.NewTable(stdout)
	if *explain {
		table.Explain()
	}
	if *latency {
		table.Latency()
	}
	if !*jsonOut {
		fmt.Fprintf(stdout, "# occl-bench op %s nranks %d minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d validation: %d\n",
			op, c.Size(), minBytes, maxBytes, stepDesc(*factor, int(stepBytes)), *warmup, *iters, *check)
		fmt.Fprintf(stdout, "# transport %s algorithm %s\n", c.TransportName(), *algoName)
		if on, of := c.SingleCopy(); of > 0 {
			fmt.Fprintf(stdout, "# single copies with %d of %d shared-memory peers\n", on, of)
		}
		for _, d := range rdma.OpenDevices() {
			note := ""
			if strings.Contains(d, "[emulated verbs]") {
				note = " -- NOT RDMA HARDWARE: verbs emulated over Unix sockets (OCCL_IB_EMULATE), numbers measure the emulation"
			}
			fmt.Fprintf(stdout, "# rdma device %s%s\n", d, note)
		}
		if t := c.Topology(); t != nil && t.Name != "" {
			fmt.Fprintf(stdout, "# topology %s%s\n", t.Name, describeCircuits(t))
		}
		if op == bench.AllToAllV {
			fmt.Fprintf(stdout, "# demand %s\n", demand.Name)
		}
		if *hugePages {
			fmt.Fprintf(stdout, "# hugepages %s\n", describeSharedPolicy(hugemem.SharedPolicy()))
		}
		fmt.Fprintf(stdout, "#\n# Using ranks\n")
		if err := describeRanks(ctx, c, stdout); err != nil {
			return fail("%v", err)
		}
		table.Header()
	}
	start := time.Now()
	for i, size := range sizes {
		res, err := runner.Run(ctx, size)
		if err != nil {
			return fail("rank %d: %s of %d bytes: %v", rank, op, size, err)
		}
		if *jsonOut {
			bench.WriteJSON(stdout, res)
		} else {
			table.Row(res, bench.TypeName(dt))
		}
		if rank == 0 && !*noProgres {
			fmt.Fprintf(stderr, "# progress: %s %d bytes done (%d/%d, %.1fs)\n", op, res.Bytes, i+1, len(sizes), time.Since(start).Seconds())
		}
	}
	if !*jsonOut {
		if wrong := table.Footer(); wrong > 0 {
			return 1
		}
	}
	return 0
}

// runReconfig runs -op reconfig: the fabric alternates between two circuit
// layouts of the topology's OCS ports, switched by an emulated controller
// in rank 0's process (or the one at ocsAddr).
func runReconfig(ctx context.Context, c *comm.Communicator, iters, warmup int, check bool, delay time.Duration, ocsAddr string, asJSON bool, stdout io.Writer, fail func(string, ...any) int) int {
	base := c.Topology()
	targets, err := reconfigTargets(base)
	if err != nil {
		return fail("%v", err)
	}
	cfg := bench.ReconfigConfig{Targets: targets, Iters: iters, Warmup: warmup, Check: check}
	if c.Rank() == 0 {
		switch {
		case ocsAddr != "":
			var opts []ocs.Option
			if tok := os.Getenv("OCCL_OCS_TOKEN"); tok != "" {
				opts = append(opts, ocs.WithToken(tok))
			}
			cl, err := ocs.Dial(ctx, ocsAddr, opts...)
			if err != nil {
				return fail("%v", err)
			}
			defer cl.Close()
			cfg.Controller = reconfig.OCS{Client: cl}
		default:
			e, err := reconfig.StartEmulated(ctx, base.SwitchSize(), delay, "")
			if err != nil {
				return fail("%v", err)
			}
			defer e.Close()
			cfg.Controller = e
		}
	}
	if rank := c.Rank(); rank != 0 {
		stdout = io.Discard
	}
	if !asJSON {
		fmt.Fprintf(stdout, "# occl-bench op reconfig nranks %d iters %d warmup %d validation %v\n# topology %s, alternating%s and%s\n",
			c.Size(), iters, warmup, check, base.Name, describeCircuits(targets[0]), describeCircuits(targets[1]))
	}
	res, err := bench.RunReconfig(ctx, c, cfg)
	if err != nil {
		return fail("rank %d: %v", c.Rank(), err)
	}
	bench.WriteReconfig(stdout, res, asJSON)
	if res.Wrong > 0 {
		return 1
	}
	return 0
}

// runRecover runs -op recover from the launching process: trials of np
// processes of this program, each hit once.
func runRecover(ctx context.Context, cfg bench.RecoverConfig, asJSON, quiet bool, stdout, stderr io.Writer, fail func(string, ...any) int) int {
	if cfg.NP == 0 {
		return fail("-op recover needs -np: it starts and hits its own processes")
	}
	self, err := os.Executable()
	if err != nil {
		return fail("%v", err)
	}
	cfg.Path = self
	if os.Getenv("OCCL_DEBUG") != "" {
		// The processes' logs, asked for; otherwise only a failed trial's
		// are shown, with its error.
		cfg.Stderr = stderr
	}
	start := time.Now()
	if !quiet {
		cfg.Progress = func(t bench.RecoverTrial) {
			status := fmt.Sprintf("detection %.1f ms, recovery %.1f ms", t.DetectUS/1e3, t.RecoverUS/1e3)
			if t.Err != "" {
				status = "FAILED: " + t.Err
			}
			fmt.Fprintf(stderr, "# progress: recover trial %d/%d, rank %d hit (%s): %s (%.1fs)\n", t.Trial+1, cfg.Trials, t.Victim, cfg.Fault,
				status, time.Since(start).Seconds())
		}
	}
	if !asJSON {
		fmt.Fprintf(stdout, "# occl-bench op recover nranks %d trials %d fault %s heartbeat timeout %v trial deadline %v transport %s\n",
			cfg.NP, cfg.Trials, cfg.Fault, cfg.HeartbeatTimeout, cfg.Deadline, cfg.Transport)
	}
	res, err := bench.RunRecover(ctx, cfg)
	if err != nil {
		return fail("%v", err)
	}
	bench.WriteRecover(stdout, res, asJSON)
	if res.Failed > 0 || res.Wrong > 0 {
		return 1
	}
	return 0
}

// reconfigTargets makes two circuit layouts on the free OCS ports of t:
// a ring of hosts and pairs of neighbours.
func reconfigTargets(t *topo.Topology) ([]*topo.Topology, error) {
	h := len(t.Hosts)
	if h < 2 || len(reconfig.Ports(t)) < 2*h {
		return nil, fmt.Errorf("-op reconfig needs at least 2 hosts with 2 OCS ports each (for example -topo hosts=4x2,nics=host,ocs_ports=2)")
	}
	var ring, pairs [][2]int
	for i := 0; i < h; i++ {
		if h > 2 || i == 0 {
			ring = append(ring, [2]int{i, (i + 1) % h})
		}
	}
	for i := 0; i+1 < h; i += 2 {
		pairs = append(pairs, [2]int{i, i + 1}, [2]int{i, i + 1})
	}
	var out []*topo.Topology
	for _, layout := range [][][2]int{ring, pairs} {
		next := *t
		next.Circuits = nil
		for _, p := range layout {
			if err := next.Connect(p[0], p[1], 0); err != nil {
				return nil, err
			}
		}
		out = append(out, &next)
	}
	return out, nil
}

// worldSize is the number of ranks of the job: -np, the topology's, or
// the launcher's.
func worldSize(np int, spec string) (int, error) {
	if np > 0 {
		return np, nil
	}
	if spec != "" {
		t, err := topo.FromSpec(spec)
		if err != nil {
			return 0, err
		}
		return len(t.Ranks), nil
	}
	for _, v := range []string{"OCCL_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"} {
		if n, err := strconv.Atoi(os.Getenv(v)); err == nil && n > 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("cannot tell the number of ranks: give -np or -topo")
}

// describeCircuits lists a topology's circuits by host pair.
func describeCircuits(t *topo.Topology) string {
	if len(t.Circuits) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" circuits")
	for _, c := range t.Circuits {
		fmt.Fprintf(&b, " %d-%d", t.NICs[c.A].Host, t.NICs[c.B].Host)
	}
	return b.String()
}

// describeRanks prints one line per rank, gathered at rank 0.
func describeRanks(ctx context.Context, c *comm.Communicator, w io.Writer) error {
	const width = 128
	line := fmt.Sprintf("#  Rank %3d Pid %7d on %s local rank %d/%d host %d", c.Rank(), os.Getpid(),
		topo.Hostname(c.HostID(c.Host(c.Rank()))), c.LocalRank(), c.LocalSize(), c.Host(c.Rank()))
	mine := make([]byte, width)
	copy(mine, line)
	all := make([]byte, width*c.Size())
	if err := c.AllGather(ctx, comm.Raw(mine, comm.Uint8), comm.Raw(all, comm.Uint8)); err != nil {
		return err
	}
	for r := 0; r < c.Size(); r++ {
		fmt.Fprintln(w, strings.TrimRight(string(all[r*width:(r+1)*width]), "\x00"))
	}
	return nil
}

func stepDesc(factor, step int) string {
	if step > 0 {
		return fmt.Sprintf("%d(bytes)", step)
	}
	return fmt.Sprintf("%d(factor)", factor)
}

func opList() string {
	var names []string
	for _, op := range bench.Ops() {
		names = append(names, string(op))
	}
	return strings.Join(names, ", ")
}

// launchLocal re-runs this command as np processes on 127.0.0.1.
func launchLocal(np int, args []string, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "occl-bench: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = launch.Run(ctx, launch.Spec{
		NP: np, Path: self, Args: args, Addr: "127.0.0.1",
		Stdout: stdout, Stderr: stderr, RawStdout: true,
	})
	if err != nil {
		fmt.Fprintf(stderr, "occl-bench: %v\n", err)
		return 1
	}
	return 0
}

// describeSharedPolicy says whether the shared buffers of -hugepages from
// 2 MiB can have huge pages under the system's policy (see
// hugemem.SharedPolicy), and how to let them where they cannot.
func describeSharedPolicy(policy string, huge bool) string {
	switch {
	case huge:
		return fmt.Sprintf("shared buffers from 2 MiB on huge pages (shmem_enabled %s)", policy)
	case policy == "":
		return "shared buffers on base pages (no shmem_enabled policy found)"
	}
	return fmt.Sprintf("shared buffers on 4 KiB pages (shmem_enabled %s; 'advise' in %s lets them have huge pages)", policy, hugemem.SharedPolicyFile)
}
