package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
)

// Recover is occl-bench's -op recover: how long the survivors of a job
// take to notice that a rank died and to run again on a communicator
// without it (Communicator.Shrink).
const Recover Op = "recover"

// Faults a recovery trial can inject.
const (
	// FaultKill kills the victim with SIGKILL: its sockets close, and the
	// survivors hear of it at once.
	FaultKill = "kill"
	// FaultStop stops the victim with SIGSTOP: it holds its sockets open
	// and falls silent, so only the heartbeat timeout finds it.
	FaultStop = "stop"
)

// Environment through which RunRecover configures the processes it
// starts; RecoverChild reads it.
const (
	recoverHeartbeatEnv = "OCCL_BENCH_RECOVER_HEARTBEAT_TIMEOUT"
	recoverDeadlineEnv  = "OCCL_BENCH_RECOVER_DEADLINE"
)

// The lines a recovery child prints on standard output.
const (
	recoverTag       = "occl-recover"
	recoverReady     = "ready"
	recoverFailed    = "failed"
	recoverRecovered = "recovered"
)

// recoverWarmup is how many checked AllReduces every rank runs before a
// rank may be hit; recoverCount is their number of elements.
const (
	recoverWarmup = 3
	recoverCount  = 64 << 10
)

// RecoverConfig is what a recovery benchmark runs.
type RecoverConfig struct {
	// NP is the number of processes of each trial (at least 3: Shrink
	// needs a majority of survivors).
	NP int
	// Trials is the number of trials; each starts a fresh job.
	Trials int
	// Fault is FaultKill or FaultStop.
	Fault string
	// HeartbeatTimeout is the silence after which a rank is declared
	// failed (the heartbeat interval is a fifth of it). 0 means 1 s.
	HeartbeatTimeout time.Duration
	// Deadline bounds each trial, from the start of its processes to the
	// end of the last; whatever still runs then is killed. 0 means 60 s.
	Deadline time.Duration
	// Path and Args are the program each process runs; it must call
	// RecoverChild (occl-bench does with -op recover).
	Path string
	Args []string
	// Env is added to the processes' environment. Their TMPDIR is a
	// directory of the run's, removed at its end, where their flight
	// records go unless OCCL_TRACE names a directory.
	Env []string
	// Transport is reported with the result (the processes choose it
	// from Args or Env); the result's Links says what the shrunk
	// communicators used.
	Transport string
	// Stderr receives the processes' standard error, each line prefixed
	// with its rank; nil keeps only the last of it for error messages.
	Stderr io.Writer
	// Progress, if not nil, runs after every trial.
	Progress func(t RecoverTrial)
}

// RecoverSurvivor is what one survivor of a trial measured. Times are in
// microseconds.
type RecoverSurvivor struct {
	// Rank and NewRank are its ranks before and after the shrink, and
	// NewSize the size of the new communicator.
	Rank    int `json:"rank"`
	NewRank int `json:"new_rank"`
	NewSize int `json:"new_size"`
	// DetectUS runs from the fault to the return of the survivor's
	// failed AllReduce; RecoverUS from there to the return of its first
	// AllReduce on the shrunk communicator.
	DetectUS  float64 `json:"detect_us"`
	RecoverUS float64 `json:"recover_us"`
	// Wrong counts the wrong elements of that AllReduce.
	Wrong int64 `json:"wrong"`
	// Links is the shrunk communicator's TransportName.
	Links string `json:"links"`
}

// RecoverTrial is one trial: a job of NP processes, one of which (the
// victim) was hit. Its times are those of its slowest survivor, each
// taken apart (so DetectUS+RecoverUS may exceed TotalUS).
type RecoverTrial struct {
	Trial     int               `json:"trial"`
	Victim    int               `json:"victim"`
	DetectUS  float64           `json:"detect_us"`
	RecoverUS float64           `json:"recover_us"`
	TotalUS   float64           `json:"total_us"`
	Survivors []RecoverSurvivor `json:"survivors,omitempty"`
	// Err says why the trial failed; empty if every survivor recovered.
	Err string `json:"error,omitempty"`
}

// RecoverResult summarises a recovery benchmark: p50 and p99 over the
// trials that succeeded, in microseconds.
type RecoverResult struct {
	Impl               string         `json:"impl"`
	Op                 Op             `json:"op"`
	NP                 int            `json:"np"`
	Fault              string         `json:"fault"`
	Transport          string         `json:"transport"`
	Links              string         `json:"links"`
	HeartbeatTimeoutMS float64        `json:"heartbeat_timeout_ms"`
	Trials             int            `json:"trials"`
	Failed             int            `json:"failed"`
	DetectP50US        float64        `json:"detect_p50_us"`
	DetectP99US        float64        `json:"detect_p99_us"`
	RecoverP50US       float64        `json:"recover_p50_us"`
	RecoverP99US       float64        `json:"recover_p99_us"`
	TotalP50US         float64        `json:"total_p50_us"`
	TotalP99US         float64        `json:"total_p99_us"`
	Wrong              int64          `json:"wrong"`
	Records            []RecoverTrial `json:"records"`
}

func (cfg *RecoverConfig) defaults() error {
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = time.Second
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = time.Minute
	}
	if cfg.NP < 3 {
		return fmt.Errorf("bench: recover needs at least 3 processes, not %d", cfg.NP)
	}
	if cfg.Trials < 1 {
		return fmt.Errorf("bench: recover needs a trial")
	}
	if cfg.Fault != FaultKill && cfg.Fault != FaultStop {
		return fmt.Errorf("bench: unknown fault %q (kill, stop)", cfg.Fault)
	}
	if cfg.HeartbeatTimeout >= cfg.Deadline {
		return fmt.Errorf("bench: the heartbeat timeout %v is not below the trial deadline %v", cfg.HeartbeatTimeout, cfg.Deadline)
	}
	return nil
}

// victim is the rank hit in trial t: the ranks in turn, rank 0 (the
// control root and the agreement's first coordinator) first.
func (cfg *RecoverConfig) victim(t int) int { return t % cfg.NP }

// RunRecover runs the trials one after the other. A trial that fails (a
// survivor that does not recover, or a wrong result) is recorded with its
// error and the next one runs; the returned error is for a configuration
// that cannot run or a cancelled ctx.
func RunRecover(ctx context.Context, cfg RecoverConfig) (RecoverResult, error) {
	res := RecoverResult{Impl: "occl", Op: Recover, NP: cfg.NP, Fault: cfg.Fault, Transport: cfg.Transport, Trials: cfg.Trials}
	if err := cfg.defaults(); err != nil {
		return res, err
	}
	res.HeartbeatTimeoutMS = float64(cfg.HeartbeatTimeout) / 1e6
	// Every survivor writes its failed communicator's flight record, as
	// by default, into a directory of the run's (not the temporary
	// directory's top, trial after trial); OCCL_TRACE keeps them.
	tmp, err := os.MkdirTemp("", "occl-bench-recover-")
	if err != nil {
		return res, fmt.Errorf("bench: recover: %w", err)
	}
	defer os.RemoveAll(tmp)
	cfg.Env = append([]string{"TMPDIR=" + tmp}, cfg.Env...)
	var detect, recov, total []float64
	var links []string
	for t := range cfg.Trials {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		tr, err := runRecoverTrial(ctx, &cfg, t)
		if err != nil {
			tr.Err = err.Error()
			res.Failed++
		} else {
			detect, recov, total = append(detect, tr.DetectUS), append(recov, tr.RecoverUS), append(total, tr.TotalUS)
		}
		for _, s := range tr.Survivors {
			res.Wrong += s.Wrong
			if !slices.Contains(links, s.Links) {
				links = append(links, s.Links)
			}
		}
		res.Records = append(res.Records, tr)
		if cfg.Progress != nil {
			cfg.Progress(tr)
		}
	}
	for _, s := range [][]float64{detect, recov, total} {
		sort.Float64s(s)
	}
	res.Links = strings.Join(links, ",")
	res.DetectP50US, res.DetectP99US = quantile(detect, 0.5), quantile(detect, 0.99)
	res.RecoverP50US, res.RecoverP99US = quantile(recov, 0.5), quantile(recov, 0.99)
	res.TotalP50US, res.TotalP99US = quantile(total, 0.5), quantile(total, 0.99)
	return res, nil
}

// recoverEvent is a line a child printed.
type recoverEvent struct {
	rank int
	kind string
	at   int64 // wall clock, ns
	s    RecoverSurvivor
}

// runRecoverTrial runs trial t: starts the job, waits until every rank
// has run its checked AllReduces, hits the victim while the others reduce
// and collects the survivors' stamps.
func runRecoverTrial(ctx context.Context, cfg *RecoverConfig, t int) (RecoverTrial, error) {
	victim := cfg.victim(t)
	tr := RecoverTrial{Trial: t, Victim: victim}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()

	errTail := &tailBuffer{max: 16 << 10}
	var stderr io.Writer = errTail
	if cfg.Stderr != nil {
		stderr = io.MultiWriter(errTail, cfg.Stderr)
	}
	pr, pw := io.Pipe()
	events := make(chan recoverEvent, 16*cfg.NP) // a child prints three lines
	go scanRecoverEvents(pr, events)
	env := append([]string{
		recoverHeartbeatEnv + "=" + cfg.HeartbeatTimeout.String(),
		recoverDeadlineEnv + "=" + cfg.Deadline.String(),
	}, cfg.Env...)
	j, err := launch.Start(ctx, launch.Spec{
		NP: cfg.NP, Path: cfg.Path, Args: cfg.Args, Env: env,
		Stdout: pw, Stderr: stderr, KillGrace: -1,
	})
	if err != nil {
		pw.Close()
		return tr, err
	}
	exited := make(chan struct{})
	var results []launch.Result
	go func() {
		results, _ = j.Wait()
		pw.Close()
		close(exited)
	}()
	// Whatever happens, nothing outlives the trial: the victim is
	// continued (if stopped) and killed with the others.
	stopped := false
	defer func() {
		if stopped {
			syscall.Kill(j.Pid(victim), syscall.SIGCONT)
		}
		j.KillAll()
		<-exited
	}()
	fail := func(format string, a ...any) (RecoverTrial, error) {
		err := fmt.Errorf("trial %d (victim rank %d, %s): %s", t, victim, cfg.Fault, fmt.Sprintf(format, a...))
		if tail := errTail.String(); tail != "" {
			err = fmt.Errorf("%w; standard error:\n%s", err, tail)
		}
		return tr, err
	}
	next := func() (recoverEvent, error) {
		select {
		case ev := <-events:
			return ev, nil
		case <-exited:
			// Lines printed before the exit are still in the channel.
			select {
			case ev := <-events:
				return ev, nil
			case <-time.After(100 * time.Millisecond):
			}
			return recoverEvent{}, fmt.Errorf("the processes ended: %v", describeResults(results))
		case <-ctx.Done():
			return recoverEvent{}, fmt.Errorf("deadline %v passed", cfg.Deadline)
		}
	}

	for ready := 0; ready < cfg.NP; {
		ev, err := next()
		if err != nil {
			return fail("before every rank was ready: %v", err)
		}
		switch ev.kind {
		case recoverReady:
			ready++
		default:
			return fail("rank %d %s before the fault", ev.rank, ev.kind)
		}
	}
	// Every rank is in its loop of AllReduces; land the fault at a
	// different point of one in each trial.
	time.Sleep(time.Duration(rand.Int64N(int64(20 * time.Millisecond))))
	fault := time.Now()
	if cfg.Fault == FaultStop {
		err = syscall.Kill(j.Pid(victim), syscall.SIGSTOP)
		stopped = err == nil
	} else {
		err = j.Kill(victim)
	}
	if err != nil {
		return fail("signalling rank %d: %v", victim, err)
	}

	failed := map[int]int64{}
	recovered := map[int]RecoverSurvivor{}
	for len(recovered) < cfg.NP-1 {
		ev, err := next()
		if err != nil {
			return fail("%d of %d survivors recovered: %v", len(recovered), cfg.NP-1, err)
		}
		if ev.rank == victim {
			continue
		}
		switch ev.kind {
		case recoverFailed:
			failed[ev.rank] = ev.at
		case recoverRecovered:
			f, ok := failed[ev.rank]
			if !ok {
				return fail("rank %d recovered before it failed", ev.rank)
			}
			s := ev.s
			s.Rank = ev.rank
			s.DetectUS = float64(f-fault.UnixNano()) / 1e3
			s.RecoverUS = float64(ev.at-f) / 1e3
			recovered[ev.rank] = s
			tr.DetectUS = max(tr.DetectUS, s.DetectUS)
			tr.RecoverUS = max(tr.RecoverUS, s.RecoverUS)
			tr.TotalUS = max(tr.TotalUS, float64(ev.at-fault.UnixNano())/1e3)
		default:
			return fail("rank %d %s after the fault", ev.rank, ev.kind)
		}
	}
	for r := range cfg.NP {
		if s, ok := recovered[r]; ok {
			tr.Survivors = append(tr.Survivors, s)
		}
	}
	// The victim is done with; the survivors close their communicators
	// and exit on their own.
	if stopped {
		syscall.Kill(j.Pid(victim), syscall.SIGCONT)
		stopped = false
	}
	j.Kill(victim)
	select {
	case <-exited:
	case <-ctx.Done():
		return fail("the survivors did not exit before the deadline")
	}
	for _, r := range results {
		if r.Rank != victim && r.Err != nil {
			return fail("survivor %v", r.Err)
		}
	}
	for i, s := range tr.Survivors {
		want := i // the survivors keep their order
		if s.NewSize != cfg.NP-1 || s.NewRank != want || s.Wrong != 0 {
			return fail("rank %d became rank %d of %d with %d wrong elements, want rank %d of %d and none wrong",
				s.Rank, s.NewRank, s.NewSize, s.Wrong, want, cfg.NP-1)
		}
		if s.DetectUS <= 0 || s.RecoverUS <= 0 {
			return fail("rank %d: detection %.0f us, recovery %.0f us", s.Rank, s.DetectUS, s.RecoverUS)
		}
	}
	return tr, nil
}

// scanRecoverEvents parses the children's lines ("[rank] occl-recover
// kind stamp ...") from r until it ends; other lines are ignored.
func scanRecoverEvents(r io.Reader, events chan<- recoverEvent) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev recoverEvent
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != recoverTag {
			continue
		}
		rank, err := strconv.Atoi(strings.Trim(f[0], "[]"))
		if err != nil {
			continue
		}
		ev.rank, ev.kind = rank, f[2]
		if len(f) > 3 {
			ev.at, _ = strconv.ParseInt(f[3], 10, 64)
		}
		if ev.kind == recoverRecovered {
			if _, err := fmt.Sscanf(strings.Join(f[4:], " "), "new_rank=%d new_size=%d wrong=%d links=%s", &ev.s.NewRank, &ev.s.NewSize, &ev.s.Wrong, &ev.s.Links); err != nil {
				ev.kind = "printed a malformed line " + strconv.Quote(line)
			}
		}
		events <- ev
	}
	io.Copy(io.Discard, r)
}

func describeResults(res []launch.Result) string {
	var parts []string
	for _, r := range res {
		s := "ok"
		if r.Err != nil {
			s = r.Err.Error()
		}
		parts = append(parts, fmt.Sprintf("rank %d: %s", r.Rank, s))
	}
	return strings.Join(parts, "; ")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// RecoverChild is one process of a recovery trial, started by RunRecover:
// it joins the job through the environment (comm.InitFromEnv with opts),
// runs checked AllReduces until one fails, shrinks the communicator and
// runs one checked AllReduce on the new one, printing wall-clock stamps
// of each step on out.
func RecoverChild(ctx context.Context, out io.Writer, opts ...comm.Option) error {
	hb, err := time.ParseDuration(os.Getenv(recoverHeartbeatEnv))
	if err != nil {
		return fmt.Errorf("bench: recover child: %s: %w", recoverHeartbeatEnv, err)
	}
	deadline, err := time.ParseDuration(os.Getenv(recoverDeadlineEnv))
	if err != nil {
		return fmt.Errorf("bench: recover child: %s: %w", recoverDeadlineEnv, err)
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	opts = append(opts, comm.WithHeartbeat(max(hb/5, 10*time.Millisecond), hb), comm.WithTimeout(deadline))
	c, err := comm.InitFromEnv(ctx, opts...)
	if err != nil {
		return fmt.Errorf("bench: recover child: %w", err)
	}
	defer c.Close()
	me := c.Rank()
	x := make([]float32, recoverCount)
	var failed time.Time
	for i := 0; ; i++ {
		err := comm.AllReduce(ctx, c, fillRecover(x, me), x, comm.Sum)
		if err != nil {
			failed = time.Now()
			var pe *comm.PeerError
			if !errors.As(err, &pe) {
				return fmt.Errorf("bench: recover child: rank %d: AllReduce %d failed without a PeerError: %w", me, i, err)
			}
			break
		}
		if w := wrongRecover(x, c.Size()); w > 0 {
			return fmt.Errorf("bench: recover child: rank %d: AllReduce %d: %d wrong elements", me, i, w)
		}
		if i == recoverWarmup-1 {
			fmt.Fprintf(out, "%s %s %d\n", recoverTag, recoverReady, time.Now().UnixNano())
		}
	}
	fmt.Fprintf(out, "%s %s %d\n", recoverTag, recoverFailed, failed.UnixNano())
	nc, err := c.Shrink(ctx, nil)
	if err != nil {
		return fmt.Errorf("bench: recover child: rank %d: %w", me, err)
	}
	defer nc.Close()
	err = comm.AllReduce(ctx, nc, fillRecover(x, nc.Rank()), x, comm.Sum)
	done := time.Now()
	if err != nil {
		return fmt.Errorf("bench: recover child: rank %d (now %d of %d): AllReduce on the shrunk communicator: %w", me, nc.Rank(), nc.Size(), err)
	}
	fmt.Fprintf(out, "%s %s %d new_rank=%d new_size=%d wrong=%d links=%s\n", recoverTag, recoverRecovered, done.UnixNano(),
		nc.Rank(), nc.Size(), wrongRecover(x, nc.Size()), nc.TransportName())
	// Leave together, so that no rank closes while another still reduces.
	return nc.Barrier(ctx)
}

// fillRecover sets rank's contribution: element i is rank*3 + i%5.
func fillRecover(x []float32, rank int) []float32 {
	for i := range x {
		x[i] = float32(rank*3 + i%5)
	}
	return x
}

// wrongRecover counts the elements of the sum of n ranks' fillRecover
// that are wrong.
func wrongRecover(x []float32, n int) int64 {
	var wrong int64
	for i, v := range x {
		if v != float32(3*n*(n-1)/2+n*(i%5)) {
			wrong++
		}
	}
	return wrong
}

// WriteRecover prints a recovery result as a table row, or as JSON (one
// line, with every trial's record).
func WriteRecover(w io.Writer, r RecoverResult, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	fmt.Fprintf(w, "#  np  fault  trials failed   detect p50  detect p99  recover p50  recover p99   total p50   total p99  #wrong\n")
	fmt.Fprintf(w, "#                                   (ms)        (ms)         (ms)         (ms)        (ms)        (ms)\n")
	fmt.Fprintf(w, "%5d %6s %7d %6d %12.1f %11.1f %12.1f %12.1f %11.1f %11.1f %7d\n", r.NP, r.Fault, r.Trials, r.Failed,
		r.DetectP50US/1e3, r.DetectP99US/1e3, r.RecoverP50US/1e3, r.RecoverP99US/1e3, r.TotalP50US/1e3, r.TotalP99US/1e3, r.Wrong)
	fmt.Fprintf(w, "# detect: from the signal to the survivor's failed AllReduce (heartbeat timeout %v, transport %s: %s)\n",
		time.Duration(r.HeartbeatTimeoutMS*1e6), r.Transport, r.Links)
	fmt.Fprintf(w, "# recover: from there to the return of its first AllReduce on the shrunk communicator (Shrink included)\n")
	fmt.Fprintf(w, "# a trial's value is its slowest survivor's; p50 and p99 over the trials that succeeded\n")
	for _, tr := range r.Records {
		if tr.Err != "" {
			fmt.Fprintf(w, "# trial %d failed: %s\n", tr.Trial, tr.Err)
		}
	}
	return nil
}
