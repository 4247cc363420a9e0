// Package launch starts a job of local processes on 127.0.0.1, the way
// torchrun or mpirun would on one host: each process gets OCCL_RANK,
// OCCL_WORLD_SIZE, OCCL_LOCAL_RANK, OCCL_LOCAL_SIZE and a shared
// OCCL_UNIQUE_ID, so comm.InitFromEnv joins them. Output lines are
// prefixed with the rank. If any process fails, the others are killed after
// a grace period, so a broken job never hangs its launcher.
package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/occl/occl/comm"
)

// Spec describes a job.
type Spec struct {
	NP   int      // number of processes
	Path string   // program to run
	Args []string // its arguments
	// Env is added to the environment of every process.
	Env []string
	// RankEnv, if not nil, returns extra environment for one rank.
	RankEnv func(rank int) []string
	// Addr is the rendezvous host; default 127.0.0.1.
	Addr string
	// UniqueID, if set, is used instead of a fresh id on Addr (its String
	// form).
	UniqueID string
	// Stdout and Stderr receive the processes' output, each line prefixed
	// with "[rank] ". nil discards it.
	Stdout, Stderr io.Writer
	// RawStdout copies standard output without the rank prefix (for jobs
	// where only one rank prints).
	RawStdout bool
	// KillGrace is how long the other processes may run after one failed
	// before they are killed. 0 means 10 seconds; negative means never.
	KillGrace time.Duration
}

// Result is how one process ended.
type Result struct {
	Rank     int
	ExitCode int   // -1 if killed by a signal
	Err      error // non-nil if the process failed to start or exited non-zero
}

// Job is a running set of processes.
type Job struct {
	spec  Spec
	cmds  []*exec.Cmd
	res   []Result
	wg    sync.WaitGroup
	outWG sync.WaitGroup
	once  sync.Once
	fail  chan struct{}
	mu    sync.Mutex
	pipes [][]*io.PipeWriter // per rank, closed when the process exits
}

// Start launches the processes. They are killed when ctx ends.
func Start(ctx context.Context, spec Spec) (*Job, error) {
	if spec.NP < 1 {
		return nil, fmt.Errorf("launch: %d processes", spec.NP)
	}
	if spec.Addr == "" {
		spec.Addr = "127.0.0.1"
	}
	if spec.KillGrace == 0 {
		spec.KillGrace = 10 * time.Second
	}
	idStr := spec.UniqueID
	if idStr == "" {
		id, err := comm.NewUniqueIDAt(spec.Addr + ":0")
		if err != nil {
			return nil, err
		}
		idStr = id.String()
	}
	j := &Job{spec: spec, res: make([]Result, spec.NP), fail: make(chan struct{}), pipes: make([][]*io.PipeWriter, spec.NP)}
	base := append(os.Environ(), spec.Env...)
	for r := 0; r < spec.NP; r++ {
		cmd := exec.CommandContext(ctx, spec.Path, spec.Args...)
		env := append([]string(nil), base...)
		env = append(env,
			fmt.Sprintf("OCCL_RANK=%d", r),
			fmt.Sprintf("OCCL_WORLD_SIZE=%d", spec.NP),
			fmt.Sprintf("OCCL_LOCAL_RANK=%d", r),
			fmt.Sprintf("OCCL_LOCAL_SIZE=%d", spec.NP),
			"OCCL_UNIQUE_ID="+idStr,
		)
		if spec.RankEnv != nil {
			env = append(env, spec.RankEnv(r)...)
		}
		cmd.Env = env
		cmd.Stdout = j.prefixed(r, spec.Stdout, !spec.RawStdout)
		cmd.Stderr = j.prefixed(r, spec.Stderr, true)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			j.KillAll()
			return nil, fmt.Errorf("launch: start rank %d: %w", r, err)
		}
		j.cmds = append(j.cmds, cmd)
	}
	for r, cmd := range j.cmds {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			err := cmd.Wait()
			for _, pw := range j.pipes[r] {
				pw.Close()
			}
			res := Result{Rank: r}
			if err != nil {
				res.Err = fmt.Errorf("rank %d: %w", r, err)
				res.ExitCode = -1
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					res.ExitCode = ee.ExitCode()
				}
				j.once.Do(func() { close(j.fail) })
			}
			j.mu.Lock()
			j.res[r] = res
			j.mu.Unlock()
		}()
	}
	if spec.KillGrace > 0 {
		go func() {
			done := make(chan struct{})
			go func() { j.wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-j.fail:
				select {
				case <-done:
				case <-time.After(spec.KillGrace):
					j.KillAll()
				}
			}
		}()
	}
	return j, nil
}

// Pid returns the process id of rank r.
func (j *Job) Pid(r int) int { return j.cmds[r].Process.Pid }

// Kill sends SIGKILL to rank r.
func (j *Job) Kill(r int) error { return j.cmds[r].Process.Kill() }

// KillAll sends SIGKILL to every process still running.
func (j *Job) KillAll() {
	for _, c := range j.cmds {
		if c.Process != nil {
			c.Process.Kill()
		}
	}
}

// Wait waits for every process and returns how each ended, and an error
// if any failed.
func (j *Job) Wait() ([]Result, error) {
	j.wg.Wait()
	j.outWG.Wait()
	var errs []error
	for _, r := range j.res {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return j.res, errors.Join(errs...)
}

// Run starts a job and waits for it.
func Run(ctx context.Context, spec Spec) ([]Result, error) {
	j, err := Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return j.Wait()
}

// prefixed returns a writer that copies lines to w, with a rank prefix if
// prefix is set.
func (j *Job) prefixed(rank int, w io.Writer, prefix bool) io.Writer {
	if w == nil {
		return nil
	}
	pr, pw := io.Pipe()
	j.outWG.Add(1)
	go func() {
		defer j.outWG.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			j.mu.Lock()
			if prefix {
				fmt.Fprintf(w, "[%d] %s\n", rank, sc.Text())
			} else {
				fmt.Fprintf(w, "%s\n", sc.Text())
			}
			j.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	j.pipes[rank] = append(j.pipes[rank], pw)
	return pw
}
