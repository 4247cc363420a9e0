package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
)

// layerError is a collective of a layer that failed.
type layerError struct {
	layer int
	phase string // reconfiguration, dispatch or combine
	err   error
}

func (e *layerError) Error() string { return fmt.Sprintf("layer %d %s: %v", e.layer, e.phase, e.err) }

func (e *layerError) Unwrap() error { return e.err }

// switcher is the emulated optical switch that rank 0 serves.
type switcher struct {
	delay time.Duration
	e     *reconfig.Emulated
}

// start serves a switch with the ports of t (by their numbers on the
// switch, which a survivors' fabric keeps), closing the previous one.
func (s *switcher) start(ctx context.Context, t *topo.Topology) error {
	s.close()
	e, err := reconfig.StartEmulated(ctx, t.SwitchSize(), s.delay, "")
	if err != nil {
		return fmt.Errorf("emulated switch: %w", err)
	}
	s.e = e
	return nil
}

// controller returns the switch, or nil on ranks that serve none.
func (s *switcher) controller() reconfig.Controller {
	if s.e == nil {
		return nil
	}
	return s.e
}

func (s *switcher) close() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// launchKill launches a run with -kill-rank: the ranks and, with -spare,
// the spare, sharing a temporary directory. The killed rank's death is
// expected; every other process must succeed.
func launchKill(ctx context.Context, cfg config, self string, args []string, stdout, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "occl-moe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := []string{dirEnv + "=" + dir}
	job, err := launch.Start(ctx, launch.Spec{NP: cfg.np, Path: self, Args: args, Env: env, Stdout: stdout, Stderr: stderr,
		RawStdout: true, KillGrace: -1})
	if err != nil {
		return err
	}
	var spare *launch.Job
	if cfg.spare {
		spare, err = launch.Start(ctx, launch.Spec{NP: 1, Path: self, Args: args, Env: append(env, spareEnv+"=1"), Stderr: stderr, KillGrace: -1})
		if err != nil {
			job.KillAll()
			job.Wait()
			return fmt.Errorf("spare: %w", err)
		}
	}
	res, _ := job.Wait()
	var errs []error
	for _, r := range res {
		switch {
		case r.Rank == cfg.killRank && r.ExitCode == 0:
			errs = append(errs, fmt.Errorf("rank %d was to die in layer %d but finished", r.Rank, cfg.killLayer))
		case r.Rank != cfg.killRank && r.Err != nil:
			errs = append(errs, r.Err)
		}
	}
	if spare != nil {
		if len(errs) > 0 {
			spare.KillAll() // the survivors may never call Grow
		}
		if _, err := spare.Wait(); err != nil && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("spare: %w", err))
		}
	}
	return errors.Join(errs...)
}

// die kills this process (SIGKILL, as a crash would), after writing the
// time of death for the survivors' report.
func die(dir string) {
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := writeFile(filepath.Join(dir, faultFile), now); err != nil {
		fmt.Fprintln(os.Stderr, "moe:", err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// writeFile writes a file whole or not at all (write, then rename).
func writeFile(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// spareTopology is the fabric of the survivors of the killed rank and the
// spare that takes its place: the survivors in their order, then the
// spare on the killed rank's host and NICs; no circuits yet.
func spareTopology(base *topo.Topology, killed int) *topo.Topology {
	order := slices.Delete(identity(len(base.Ranks)), killed, killed+1)
	t := base.Subset(append(order, killed))
	t.Circuits = nil
	return t
}

// recovery is what every rank of the new communicator agrees on once it
// runs: the layer to go on from and the times of the recovery.
type recovery struct {
	from             int
	firstErr, errAt  int64         // Unix nanoseconds: the first and the last survivor's error
	shrunk, grown    time.Duration // the longest from error to the first collective on each
	survivors, ranks int           // the shrunk and the final communicator's sizes
}

// agreeRecovery runs the new communicator's first collectives: a rank's
// from, err and done (zero on the spare) become the maxima over ranks.
func agreeRecovery(ctx context.Context, c *comm.Communicator, from int, errAt, shrunkAt, grownAt time.Time) (recovery, error) {
	v := []int64{int64(from), math.MinInt64, math.MinInt64, 0, 0}
	if !errAt.IsZero() {
		v[1], v[2] = errAt.UnixNano(), -errAt.UnixNano()
		v[3] = int64(shrunkAt.Sub(errAt))
		if !grownAt.IsZero() {
			v[4] = int64(grownAt.Sub(errAt))
		}
	}
	if err := comm.AllReduce(ctx, c, v, v, comm.Max); err != nil {
		return recovery{}, fmt.Errorf("recovery report on the new communicator: %w", err)
	}
	return recovery{from: int(v[0]), errAt: v[1], firstErr: -v[2], shrunk: time.Duration(v[3]), grown: time.Duration(v[4]), ranks: c.Size()}, nil
}

// killRun runs the reconfigured pass in which cfg.killRank dies. The
// survivors shrink, narrow the fabric and the expert placement to
// themselves (and the spare, if any), and finish the pass from the layer
// that failed on the new communicator. stdout is the process's: the rank
// 0 of the communicator the run ends on prints.
func killRun(ctx context.Context, cfg config, c *comm.Communicator, base *topo.Topology, demands [][][]int, targets []*topo.Topology,
	sw *switcher, stdout io.Writer) error {
	n, dead := c.Size(), cfg.killRank
	kill := -1
	if c.Rank() == dead {
		kill = cfg.killLayer
	}
	spare := ""
	if cfg.spare {
		spare = "; a spare waits to join"
	}
	if c.Rank() == 0 {
		fmt.Fprintf(stdout, "# fault: rank %d dies (SIGKILL) in the dispatch all-to-all of layer %d%s\n", dead, cfg.killLayer, spare)
	}
	_, err := pass(ctx, c, "reconfigured", cfg, demands, targets, sw.controller(), 0, kill)
	errAt := time.Now()
	var pe *comm.PeerError
	var le *layerError
	switch {
	case err == nil:
		return fmt.Errorf("every layer ran although rank %d was to die in layer %d", dead, cfg.killLayer)
	case !errors.As(err, &pe) || pe.Peer != dead || !errors.As(err, &le):
		return fmt.Errorf("rank %d: want a layer's collective to fail naming rank %d: %w", c.Rank(), dead, err)
	}
	failedIn := le.phase
	// Survivors: every rank but the dead one, which Shrink finds out.
	shrunk, err := c.Shrink(ctx, nil)
	if err != nil {
		return fmt.Errorf("rank %d: shrink after rank %d died: %w", c.Rank(), dead, err)
	}
	defer shrunk.Close()
	if shrunk.Size() != n-1 {
		return fmt.Errorf("rank %d: the shrunk communicator has %d ranks, want %d", c.Rank(), shrunk.Size(), n-1)
	}
	survivors, err := base.Without([]int{dead})
	if err != nil {
		return fmt.Errorf("survivors' fabric: %w", err)
	}
	if kept := slices.Delete(identity(n), dead, dead+1); !slices.Equal(survivors.Ranks, kept) || len(survivors.Idle) > 0 {
		return fmt.Errorf("the fabric without rank %d keeps ranks %v and idles %v; want every other rank", dead, survivors.Ranks, survivors.Idle)
	}
	if cfg.spare && shrunk.Rank() == 0 {
		// The grow id, made on the shrunk communicator's rank 0, for the
		// spare and, after the next collective, the survivors.
		id, err := comm.NewUniqueIDAt("127.0.0.1:0")
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(cfg.dir, growIDFile), id.String()); err != nil {
			return err
		}
	}
	// The first collective on the shrunk communicator.
	sync := []int64{int64(le.layer)}
	if err := comm.AllReduce(ctx, shrunk, sync, sync, comm.Max); err != nil {
		return fmt.Errorf("rank %d: first collective after the shrink: %w", shrunk.Rank(), err)
	}
	shrunkAt := time.Now()
	from := int(sync[0])
	cur, fabric := shrunk, survivors.Topology
	var grownAt time.Time
	if cfg.spare {
		b, err := os.ReadFile(filepath.Join(cfg.dir, growIDFile))
		if err != nil {
			return err
		}
		id, err := comm.ParseUniqueID(string(b))
		if err != nil {
			return err
		}
		fabric = spareTopology(base, dead)
		// A spare that does not come fails the run within a minute.
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		grown, err := shrunk.Grow(gctx, id, 1, comm.WithTopology(fabric))
		cancel()
		if err != nil {
			return fmt.Errorf("rank %d: grow by the spare: %w", shrunk.Rank(), err)
		}
		defer grown.Close()
		// The first collective on the grown communicator (the spare
		// learns the layer here).
		if err := comm.AllReduce(ctx, grown, sync, sync, comm.Max); err != nil {
			return fmt.Errorf("rank %d: first collective after the grow: %w", grown.Rank(), err)
		}
		grownAt = time.Now()
		cur = grown
		shrunk.Close() // the run goes on without it
	}
	rec, err := agreeRecovery(ctx, cur, from, errAt, shrunkAt, grownAt)
	if err != nil {
		return err
	}
	rec.survivors = n - 1
	if cur.Rank() != 0 {
		stdout = io.Discard
	}
	return resume(ctx, cfg, cur, fabric, rec, sw, failedIn, stdout)
}

// spareWorker is the spare process: it waits for the grow id, joins the
// survivors' communicator in the dead rank's place and runs the layers
// left with them.
func spareWorker(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base, err := topo.FromSpec(cfg.spec)
	if err != nil {
		return err
	}
	if cfg.killRank >= len(base.Ranks) {
		return fmt.Errorf("rank %d is not on the fabric of %d ranks", cfg.killRank, len(base.Ranks))
	}
	var b []byte
	for {
		if b, err = os.ReadFile(filepath.Join(cfg.dir, growIDFile)); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no grow id: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	id, err := comm.ParseUniqueID(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	fabric := spareTopology(base, cfg.killRank)
	jctx, jcancel := context.WithTimeout(ctx, time.Minute)
	c, err := comm.Join(jctx, id, comm.WithTopology(fabric), comm.WithEmulation(true))
	jcancel()
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	defer c.Close()
	sync := []int64{0}
	if err := comm.AllReduce(ctx, c, sync, sync, comm.Max); err != nil {
		return fmt.Errorf("rank %d: first collective after the grow: %w", c.Rank(), err)
	}
	rec, err := agreeRecovery(ctx, c, int(sync[0]), time.Time{}, time.Time{}, time.Time{})
	if err != nil {
		return err
	}
	return resume(ctx, cfg, c, fabric, rec, &switcher{delay: cfg.delay}, "", io.Discard)
}

// resume runs the layers from rec.from on c, whose fabric is fabric: the
// dead rank's experts go to the spare (the last rank) if c has as many
// ranks as the job started with, else to a survivor; rank 0 serves a
// switch for the new fabric; every layer's circuits are planned for its
// demand on the new membership, as before the failure.
func resume(ctx context.Context, cfg config, c *comm.Communicator, fabric *topo.Topology, rec recovery, sw *switcher, failedIn string, stdout io.Writer) error {
	n, dead := cfg.np, cfg.killRank
	m := c.Size()
	owner := make([]int, n)
	for e := range owner {
		owner[e] = e
		if e > dead {
			owner[e] = e - 1
		}
	}
	heir := dead % m // the survivor that took the dead rank's number
	if m == n {
		heir = n - 1 // the spare
	}
	owner[dead] = heir
	if c.Rank() == 0 {
		if err := sw.start(ctx, fabric); err != nil {
			return err
		}
	}
	layers := cfg.layers - rec.from
	demands := make([][][]int, layers)
	targets := make([]*topo.Topology, layers)
	for i := range demands {
		demands[i] = gateOn(owner, m, rec.from+i, cfg)
		var err error
		if targets[i], err = plan(fabric, demands[i]); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		fault := int64(0)
		if b, err := os.ReadFile(filepath.Join(cfg.dir, faultFile)); err == nil {
			fault, _ = strconv.ParseInt(string(b), 10, 64)
		}
		if fault == 0 {
			return fmt.Errorf("rank %d left no time of death", dead)
		}
		fmt.Fprintf(stdout, "# detected in %.2f ms (fault -> the %s all-to-all returned a *comm.PeerError naming rank %d; first survivor %.2f ms)\n",
			ms(time.Duration(rec.errAt-fault)), failedIn, dead, ms(time.Duration(rec.firstErr-fault)))
		fmt.Fprintf(stdout, "# recovered in %.2f ms (error -> first collective on the shrunk communicator of %d ranks)\n", ms(rec.shrunk), rec.survivors)
		if m == n {
			fmt.Fprintf(stdout, "# spare joined in %.2f ms (error -> first collective on the grown communicator of %d ranks)\n", ms(rec.grown), m)
		}
		who := fmt.Sprintf("rank %d (a survivor)", heir)
		if m == n {
			who = fmt.Sprintf("rank %d (the spare, on rank %d's place in the fabric)", heir, dead)
		}
		fmt.Fprintf(stdout, "# after recovery: %d ranks; expert %d now on %s; layers %d to %d again\n", m, dead, who, rec.from, cfg.layers-1)
	}
	stats, err := pass(ctx, c, "recovered", cfg, demands, targets, sw.controller(), rec.from, -1)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# layer  hot  on  ranks         a2a  reconf total  switch  exposed  max wait\n")
	fmt.Fprintf(stdout, "#                              (ms)          (ms)    (ms)     (ms)      (ms)\n")
	var sum, exposed time.Duration
	for i, s := range stats {
		l := rec.from + i
		fmt.Fprintf(stdout, "%7d %4d %3d %6d %11.2f %13.2f %7.2f %8.3f %9.3f\n", l, hot(l, n), owner[hot(l, n)], m, ms(s.a2a), ms(s.total),
			ms(s.switchT), ms(s.exposed), ms(s.wait))
		sum += s.a2a
		exposed += s.exposed
	}
	fmt.Fprintf(stdout, "# after recovery: %d layers on %d ranks, %d all-to-alls, every token verified; all-to-all %.1f ms, reconfiguration exposed %.3f ms in all\n",
		layers, m, 2*layers, ms(sum), ms(exposed))
	return nil
}
