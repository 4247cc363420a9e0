package comm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
)

// shrinkWorker: every rank reduces until an operation fails (the test
// kills or stops the ranks in OCCL_TEST_VICTIMS meanwhile), then the
// survivors shrink and check every collective on the new communicator.
// Rank OCCL_TEST_DIE_IN_SHRINK exits as soon as it has proposed in the
// agreement, rank OCCL_TEST_DIE_AFTER_DECISION as soon as the agreement
// decided that it is a member; rank OCCL_TEST_STOP_AFTER_DECISION stops
// itself then (SIGSTOP), and once continued must be refused. With OCCL_TEST_SHRINK_DEADLINE, Shrink must
// return before that deadline. A stopped victim, once continued, must be
// refused. With OCCL_TEST_GROW_ID, the survivors then grow the shrunk
// communicator by OCCL_TEST_GROW_N spares (see growMember). With
// OCCL_TEST_EXCLUDE, the healthy communicator is shrunk on purpose without
// those ranks, which call nothing and find their communicator aborted.
func shrinkWorker(ctx context.Context, c *comm.Communicator) error {
	victims := ranksOf(os.Getenv("OCCL_TEST_VICTIMS"))
	exclude := ranksOf(os.Getenv("OCCL_TEST_EXCLUDE"))
	dier, lateDier := -1, -1
	if v := os.Getenv("OCCL_TEST_DIE_IN_SHRINK"); v != "" {
		dier, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("OCCL_TEST_DIE_AFTER_DECISION"); v != "" {
		lateDier, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("OCCL_TEST_STOP_AFTER_DECISION"); v != "" {
		lateDier, _ = strconv.Atoi(v)
	}
	x := make([]float32, 64<<10)
	failed := time.Now()
	for i := 0; exclude == nil; i++ {
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			failed = time.Now()
			var pe *comm.PeerError
			if !errors.As(err, &pe) {
				return fmt.Errorf("AllReduce failed without a PeerError: %v", err)
			}
			fmt.Printf("FAILED %v\n", err)
			break
		}
		if i == 0 {
			fmt.Println("READY")
		}
	}
	me, size := c.Rank(), c.Size()
	if exclude != nil {
		fmt.Println("READY")
		if slices.Contains(exclude, me) {
			// The survivors shrink at once: this rank's operations fail
			// (perhaps already this one).
			err := comm.AllReduce(ctx, c, x, x, comm.Sum)
			if err == nil {
				err = c.Barrier(ctx)
			}
			if !errors.Is(err, comm.ErrAborted) {
				return fmt.Errorf("the excluded rank's operations: %v, want ErrAborted", err)
			}
			fmt.Println("DROPPED")
			return nil
		}
		failed = time.Now()
	}
	if slices.Contains(victims, me) {
		// A stopped rank, continued after the others shrank.
		nc, err := c.Shrink(ctx, nil)
		if nc != nil {
			nc.Close()
			return fmt.Errorf("the stopped rank joined a communicator of %d ranks", nc.Size())
		}
		if !errors.Is(err, comm.ErrExcluded) {
			return fmt.Errorf("the stopped rank's Shrink: %v, want ErrExcluded", err)
		}
		fmt.Println("EXCLUDED", err)
		return nil
	}
	if me == dier {
		comm.AfterShrinkProposal(func() { os.Exit(3) })
	}
	lateStop := os.Getenv("OCCL_TEST_STOP_AFTER_DECISION") != ""
	if me == lateDier && lateStop {
		comm.AfterShrinkDecision(func() { syscall.Kill(os.Getpid(), syscall.SIGSTOP) })
	} else if me == lateDier {
		comm.AfterShrinkDecision(func() { os.Exit(3) })
	}
	sctx := ctx
	if d, err := time.ParseDuration(os.Getenv("OCCL_TEST_SHRINK_DEADLINE")); err == nil {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	nc, err := c.Shrink(sctx, exclude)
	if me == lateDier && lateStop {
		// Continued after the others shrank without it.
		if nc != nil {
			nc.Close()
			return fmt.Errorf("the rank stopped after the decision joined a communicator of %d ranks", nc.Size())
		}
		if !errors.Is(err, comm.ErrExcluded) {
			return fmt.Errorf("the rank stopped after the decision: Shrink: %v, want ErrExcluded", err)
		}
		fmt.Println("EXCLUDED", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("Shrink: %v", err)
	}
	defer nc.Close()
	fmt.Printf("SHRUNK ms=%d\n", time.Since(failed).Milliseconds())
	var members []int
	for r := range size {
		if !slices.Contains(victims, r) && !slices.Contains(exclude, r) && r != dier && r != lateDier {
			members = append(members, r)
		}
	}
	fmt.Printf("MEMBERS old=%d new=%d size=%d shrinks=%d\n", me, nc.Rank(), nc.Size(), nc.Shrinks())
	if nc.Size() != len(members) || members[nc.Rank()] != me || nc.Shrinks() != 1 {
		return fmt.Errorf("rank %d became rank %d of %d, want %d of %v", me, nc.Rank(), nc.Size(), slices.Index(members, me), members)
	}
	first := true
	if err := shrunkCollectives(ctx, nc, members, me, func() {
		if first {
			fmt.Printf("RECOVERED ms=%d\n", time.Since(failed).Milliseconds())
			first = false
		}
	}); err != nil {
		return err
	}
	if os.Getenv("OCCL_TEST_GROW_ID") != "" {
		// The survivors grow the shrunk communicator by a spare process
		// (see growMember); a spare that never comes fails them in 30 s.
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := growMember(gctx, nc); err != nil {
			return fmt.Errorf("grow of the shrunk communicator: %w", err)
		}
	}
	fmt.Println("DONE")
	return nil
}

func ranksOf(s string) []int {
	var rs []int
	for _, f := range strings.Split(s, ",") {
		if r, err := strconv.Atoi(f); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// shrunkCollectives runs every collective on nc, whose ranks are the old
// ranks members (old rank me is this one), and checks each result against
// values computed from the old ranks. ok runs after the first success.
func shrunkCollectives(ctx context.Context, nc *comm.Communicator, members []int, me int, ok func()) error {
	n, rank := nc.Size(), nc.Rank()
	const k = 1031
	check := func(op string, got []float64, want func(i int) float64) error {
		for i, g := range got {
			if w := want(i); g != w {
				return fmt.Errorf("%s: element %d is %v, want %v", op, i, g, w)
			}
		}
		return nil
	}
	// AllReduce: the sum of the old ranks, element by element.
	x := make([]float64, k)
	for i := range x {
		x[i] = float64(me*1000 + i)
	}
	if err := comm.AllReduce(ctx, nc, x, x, comm.Sum); err != nil {
		return err
	}
	ok()
	sum := 0
	for _, m := range members {
		sum += m
	}
	if err := check("AllReduce", x, func(i int) float64 { return float64(sum*1000 + n*i) }); err != nil {
		return err
	}
	// AllGather: block i is old rank members[i]'s.
	send := make([]float64, k)
	for i := range send {
		send[i] = float64(me*10000 + i)
	}
	all := make([]float64, n*k)
	if err := comm.AllGather(ctx, nc, send, all); err != nil {
		return err
	}
	if err := check("AllGather", all, func(i int) float64 { return float64(members[i/k]*10000 + i%k) }); err != nil {
		return err
	}
	// ReduceScatter: block rank of the sum.
	big := make([]float64, n*k)
	for i := range big {
		big[i] = float64(me + i)
	}
	part := make([]float64, k)
	if err := comm.ReduceScatter(ctx, nc, big, part, comm.Sum); err != nil {
		return err
	}
	if err := check("ReduceScatter", part, func(i int) float64 { return float64(sum + n*(rank*k+i)) }); err != nil {
		return err
	}
	// Broadcast from new rank n-1.
	b := make([]float64, k)
	if rank == n-1 {
		for i := range b {
			b[i] = float64(me*7 + i)
		}
	}
	if err := comm.Broadcast(ctx, nc, b, b, n-1); err != nil {
		return err
	}
	if err := check("Broadcast", b, func(i int) float64 { return float64(members[n-1]*7 + i) }); err != nil {
		return err
	}
	// AllToAll: block d goes to new rank d.
	const q = 5
	out := make([]float64, n*q)
	for i := range out {
		out[i] = float64(me*10000 + (i/q)*100 + i%q)
	}
	in := make([]float64, n*q)
	if err := comm.AllToAll(ctx, nc, out, in); err != nil {
		return err
	}
	if err := check("AllToAll", in, func(i int) float64 { return float64(members[i/q]*10000 + rank*100 + i%q) }); err != nil {
		return err
	}
	return nc.Barrier(ctx)
}

// shrinkJob runs the shrink scenario on np processes. After every rank
// has reduced once, it kills the victims (or stops them, and continues
// them once the survivors are done). It returns the output and how each
// process ended.
func shrinkJob(t *testing.T, np int, victims []int, stop bool, env ...string) (string, []launch.Result) {
	t.Helper()
	pr, pw := io.Pipe()
	var all syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var vs []string
	for _, v := range victims {
		vs = append(vs, strconv.Itoa(v))
	}
	j, err := launch.Start(ctx, launch.Spec{
		NP: np, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:       append([]string{"OCCL_TEST_WORKER=shrink", "OCCL_TRANSPORT=tcp", "OCCL_TEST_VICTIMS=" + strings.Join(vs, ",")}, env...),
		Stdout:    io.MultiWriter(pw, &all),
		Stderr:    &all,
		KillGrace: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	survivors := np - len(victims)
	var cont []int // ranks to continue once the survivors are done
	if stop {
		cont = victims
	}
	for _, e := range env {
		if strings.HasPrefix(e, "OCCL_TEST_DIE_IN_SHRINK=") || strings.HasPrefix(e, "OCCL_TEST_DIE_AFTER_DECISION=") {
			survivors--
		}
		if v, ok := strings.CutPrefix(e, "OCCL_TEST_STOP_AFTER_DECISION="); ok {
			survivors--
			cont = append(slices.Clone(cont), ranksOf(v)...)
		}
		if v, ok := strings.CutPrefix(e, "OCCL_TEST_EXCLUDE="); ok {
			survivors -= len(ranksOf(v))
		}
	}
	ready, done := make(chan bool, 2), make(chan bool, 2)
	go func() {
		sc := bufio.NewScanner(pr)
		nReady, nDone := 0, 0
		for sc.Scan() {
			switch {
			case strings.HasSuffix(sc.Text(), "] READY"):
				if nReady++; nReady == np {
					ready <- true
				}
			case strings.HasSuffix(sc.Text(), "] DONE"):
				if nDone++; nDone == survivors {
					done <- true
				}
			}
		}
		ready <- false
		done <- false
	}()
	var res []launch.Result
	exited := make(chan struct{})
	go func() {
		res, _ = j.Wait()
		pw.Close()
		close(exited)
	}()
	if !<-ready {
		<-exited
		t.Fatalf("workers ended before they were ready (%+v):\n%s", res, all.String())
	}
	time.Sleep(100 * time.Millisecond) // inside a later AllReduce
	for _, v := range victims {
		if stop {
			err = syscall.Kill(j.Pid(v), syscall.SIGSTOP)
		} else {
			err = j.Kill(v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// With OCCL_TEST_GROW_ID, a spare process joins the communicator the
	// survivors grow; its output goes to the rest with the prefix [spare].
	spareCtx, spareCancel := context.WithCancel(ctx)
	defer spareCancel()
	spareDone := make(chan struct{})
	go func() {
		defer close(spareDone)
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "OCCL_TEST_GROW_ID=") }) {
			return
		}
		cmd := exec.CommandContext(spareCtx, os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), "OCCL_TEST_WORKER=grow-spare", "OCCL_TRANSPORT=tcp"), env...)
		b, err := cmd.CombinedOutput()
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if l != "" {
				fmt.Fprintf(&all, "[spare] %s", strings.TrimSuffix(l, "\n")+"\n")
			}
		}
		if err != nil {
			fmt.Fprintf(&all, "[spare] ended: %v\n", err)
		}
	}()
	if len(cont) > 0 {
		ok := <-done
		for _, v := range cont {
			syscall.Kill(j.Pid(v), syscall.SIGCONT)
		}
		if !ok {
			j.KillAll()
			<-exited
			t.Fatalf("survivors did not finish (%+v):\n%s", res, all.String())
		}
	}
	<-exited
	select {
	case <-spareDone:
	case <-time.After(10 * time.Second):
		// The members are gone: a spare still waiting to join never will.
		spareCancel()
		<-spareDone
	}
	return all.String(), res
}

var (
	membersLine   = regexp.MustCompile(`(?m)^\[(\d+)\] MEMBERS old=(\d+) new=(\d+) size=(\d+) shrinks=1$`)
	recoveredLine = regexp.MustCompile(`(?m)^\[(\d+)\] RECOVERED ms=(\d+)$`)
)

// checkSurvivors checks that exactly the ranks in survivors exited
// cleanly, reported their place in a communicator of all of them and
// finished the collectives, and logs the time from the failure to the
// first collective on the new communicator.
func checkSurvivors(t *testing.T, out string, res []launch.Result, survivors []int) {
	t.Helper()
	for _, r := range survivors {
		if res[r].Err != nil {
			t.Fatalf("survivor %d: %v\n%s", r, res[r].Err, out)
		}
		if !strings.Contains(out, fmt.Sprintf("[%d] DONE\n", r)) {
			t.Fatalf("survivor %d did not finish:\n%s", r, out)
		}
	}
	got := map[int]bool{}
	for _, m := range membersLine.FindAllStringSubmatch(out, -1) {
		old, _ := strconv.Atoi(m[2])
		nw, _ := strconv.Atoi(m[3])
		size, _ := strconv.Atoi(m[4])
		if m[1] != m[2] || size != len(survivors) || slices.Index(survivors, old) != nw {
			t.Fatalf("membership %q, want survivors %v:\n%s", m[0], survivors, out)
		}
		got[old] = true
	}
	if len(got) != len(survivors) {
		t.Fatalf("%d survivors reported their membership, want %d:\n%s", len(got), len(survivors), out)
	}
	var ms []string
	for _, m := range recoveredLine.FindAllStringSubmatch(out, -1) {
		ms = append(ms, "rank "+m[1]+": "+m[2]+" ms")
	}
	t.Logf("from the failure to the first collective on the shrunk communicator: %s", strings.Join(ms, ", "))
}

// Rank 5 of 8 is killed during an AllReduce: the 7 others shrink and run
// every collective on the new communicator.
func TestProcessShrinkKilled(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{5}, false)
	checkSurvivors(t, out, res, []int{0, 1, 2, 3, 4, 6, 7})
}

// Rank 5 is killed, and rank 3 dies in the agreement, right after it
// proposed: the 6 others agree without both.
func TestProcessShrinkDeathDuringAgreement(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{5}, false, "OCCL_TEST_DIE_IN_SHRINK=3")
	checkSurvivors(t, out, res, []int{0, 1, 2, 4, 6, 7})
	if res[3].ExitCode != 3 {
		t.Fatalf("rank 3 ended %+v, want exit code 3 after its proposal:\n%s", res[3], out)
	}
}

// Rank 5 is killed, and rank 3 dies right after the agreement decided
// that it is a member: the others find its process gone during the
// bootstrap and agree again without it, long before the bootstrap would
// give up on a silent member (twice the heartbeat timeout of 30 s here,
// longer than the 20 s Shrink may take).
func TestProcessShrinkDeathAfterDecision(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{5}, false, "OCCL_TEST_DIE_AFTER_DECISION=3",
		"OCCL_TEST_HEARTBEAT_TIMEOUT=30s", "OCCL_TEST_SHRINK_DEADLINE=20s")
	checkSurvivors(t, out, res, []int{0, 1, 2, 4, 6, 7})
	if res[3].ExitCode != 3 {
		t.Fatalf("rank 3 ended %+v, want exit code 3 after the decision:\n%s", res[3], out)
	}
	wantGone(t, out, 3)
	logShrunk(t, out)
}

// Rank 5 is killed, and rank 0, the coordinator serving the new
// communicator's rendezvous, dies right after it decided: the others
// find it gone and agree again under rank 1.
func TestProcessShrinkCoordinatorDeathAfterDecision(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{5}, false, "OCCL_TEST_DIE_AFTER_DECISION=0",
		"OCCL_TEST_HEARTBEAT_TIMEOUT=30s", "OCCL_TEST_SHRINK_DEADLINE=20s")
	checkSurvivors(t, out, res, []int{1, 2, 3, 4, 6, 7})
	if res[0].ExitCode != 3 {
		t.Fatalf("rank 0 ended %+v, want exit code 3 after the decision:\n%s", res[0], out)
	}
	wantGone(t, out, 0)
	logShrunk(t, out)
}

// Of 8 member processes, one is killed during an AllReduce (rank 5, and
// rank 0, the control root); the 7 survivors shrink, then grow the shrunk
// communicator by a spare process that joins it. The survivors keep their
// shrunk ranks, the spare takes rank 7, and every collective on the 8
// ranks matches the reference (see growMember and growSpare).
func TestProcessShrinkThenGrow(t *testing.T) {
	for _, victim := range []int{5, 0} {
		t.Run(fmt.Sprintf("killed=%d", victim), func(t *testing.T) {
			id, err := comm.NewUniqueIDAt("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			out, res := shrinkJob(t, 8, []int{victim}, false, "OCCL_TEST_GROW_ID="+id.String(), "OCCL_TEST_GROW_N=1")
			var survivors []int
			for r := range 8 {
				if r != victim {
					survivors = append(survivors, r)
				}
			}
			checkSurvivors(t, out, res, survivors)
			for i, r := range survivors {
				if !strings.Contains(out, fmt.Sprintf("[%d] GREW rank %d of 8\n", r, i)) {
					t.Fatalf("survivor %d did not grow as rank %d of 8:\n%s", r, i, out)
				}
			}
			if !strings.Contains(out, "[spare] JOINED rank 7 of 8\n") || strings.Contains(out, "[spare] ended: ") {
				t.Fatalf("the spare did not join as rank 7 of 8 and finish:\n%s", out)
			}
		})
	}
}

// wantGone checks that the bootstrap of a survivor failed with the error
// naming rank as gone (its log says so as it agrees again).
func wantGone(t *testing.T, out string, rank int) {
	t.Helper()
	if !strings.Contains(out, fmt.Sprintf("peer failed: rank %d: its process is gone during the bootstrap", rank)) {
		t.Fatalf("no survivor found rank %d gone in the bootstrap:\n%s", rank, out)
	}
}

// Rank 5 is killed, and rank 3 stops right after the agreement decided
// that it is a member: a stopped rank is not gone (its listeners still
// accept), so the others wait for it until the bootstrap gives up (twice
// the heartbeat timeout, at least 5 s), then agree again without it;
// continued, it gets ErrExcluded.
func TestProcessShrinkStoppedAfterDecision(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{5}, false, "OCCL_TEST_STOP_AFTER_DECISION=3")
	checkSurvivors(t, out, res, []int{0, 1, 2, 4, 6, 7})
	if res[3].Err != nil || !strings.Contains(out, "[3] EXCLUDED") {
		t.Fatalf("rank stopped after the decision: %+v:\n%s", res[3], out)
	}
	logLine(t, out, "[3] EXCLUDED")
	logShrunk(t, out)
	// The survivors' bootstrap gave up on rank 3 (it is not gone), and
	// they agreed again. (Rank 3, continued, finds them gone.)
	again := false
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "[3] ") || !strings.Contains(l, "agreeing again") {
			continue
		}
		again = true
		if strings.Contains(l, "its process is gone") {
			t.Fatalf("a survivor found a rank gone, want its bootstrap to time out on the stopped rank:\n%s", l)
		}
	}
	if !again {
		t.Fatalf("no survivor agreed again:\n%s", out)
	}
}

var shrunkLine = regexp.MustCompile(`(?m)^\[(\d+)\] SHRUNK ms=(\d+)$`)

// logShrunk logs how long each survivor's Shrink took, from the failure.
func logShrunk(t *testing.T, out string) {
	var ms []string
	for _, m := range shrunkLine.FindAllStringSubmatch(out, -1) {
		ms = append(ms, "rank "+m[1]+": "+m[2]+" ms")
	}
	t.Logf("from the failure to the end of Shrink: %s", strings.Join(ms, ", "))
}

// Ranks 0 (the control root and the first coordinator) and 6 are killed
// at once.
func TestProcessShrinkTwoKilled(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{0, 6}, false)
	checkSurvivors(t, out, res, []int{1, 2, 3, 4, 5, 7})
}

// A healthy communicator of 8 drops ranks 3 and 6 on purpose; they call
// nothing, and their next operation fails.
func TestProcessShrinkExclude(t *testing.T) {
	out, res := shrinkJob(t, 8, nil, false, "OCCL_TEST_EXCLUDE=3,6")
	checkSurvivors(t, out, res, []int{0, 1, 2, 4, 5, 7})
	for _, r := range []int{3, 6} {
		if res[r].Err != nil || !strings.Contains(out, fmt.Sprintf("[%d] DROPPED", r)) {
			t.Fatalf("excluded rank %d: %+v:\n%s", r, res[r], out)
		}
	}
}

// Rank 5 is stopped: the 7 others find it silent, exclude it alike and
// carry on; continued, it gets ErrExcluded and joins nothing.
func TestProcessShrinkStopped(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{5}, true)
	checkSurvivors(t, out, res, []int{0, 1, 2, 3, 4, 6, 7})
	if res[5].Err != nil || !strings.Contains(out, "[5] EXCLUDED") {
		t.Fatalf("stopped rank: %+v:\n%s", res[5], out)
	}
	logLine(t, out, "[5] EXCLUDED")
}

// Rank 0, the control root and the first coordinator, is stopped: the
// others blame it, agree under rank 1 and carry on; continued, it finds
// itself alone and gets ErrExcluded.
func TestProcessShrinkStoppedRoot(t *testing.T) {
	out, res := shrinkJob(t, 8, []int{0}, true)
	checkSurvivors(t, out, res, []int{1, 2, 3, 4, 5, 6, 7})
	if res[0].Err != nil || !strings.Contains(out, "[0] EXCLUDED") {
		t.Fatalf("stopped rank: %+v:\n%s", res[0], out)
	}
	logLine(t, out, "[0] EXCLUDED")
}

// logLine logs the line of out that starts with prefix.
func logLine(t *testing.T, out, prefix string) {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			t.Log(l)
		}
	}
}
