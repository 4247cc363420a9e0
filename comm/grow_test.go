package comm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport/tcp"
)

// tcpGroup makes size communicators over TCP on the loopback, one per
// goroutine of this process.
func tcpGroup(t *testing.T, ctx context.Context, size int, opts ...comm.Option) []*comm.Communicator {
	t.Helper()
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*comm.Communicator, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = comm.Init(ctx, id, r, size, append([]comm.Option{comm.WithTransport(comm.TransportTCP)}, opts...)...)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		t.Cleanup(func() { comms[r].Close() })
	}
	return comms
}

// grownChecks runs every kind of collective on one rank of a grown
// communicator and checks the results against the reference.
func grownChecks(ctx context.Context, c *comm.Communicator) error {
	k := checker{ctx: ctx, c: c}
	for _, n := range []int{1, 13, 1031} {
		for _, dt := range []comm.DType{comm.Float32, comm.Int64} {
			if err := k.allReduce(dt, comm.Sum, n, false); err != nil {
				return err
			}
			if err := k.allReduce(dt, comm.Max, n, true); err != nil {
				return err
			}
			if err := k.allGather(dt, n, false); err != nil {
				return err
			}
			if err := k.reduceScatter(dt, comm.Sum, n, false); err != nil {
				return err
			}
			if err := k.allToAll(dt, n, false); err != nil {
				return err
			}
			for root := range c.Size() {
				if err := k.broadcast(dt, n, root, false); err != nil {
					return err
				}
			}
		}
	}
	return c.Barrier(ctx)
}

// grow runs Grow on every member and Join on each of joiners goroutines,
// and returns the grown communicators, members first, then joiners in the
// order of their ranks.
func grow(t *testing.T, ctx context.Context, members []*comm.Communicator, joiners int) []*comm.Communicator {
	t.Helper()
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := len(members)
	grown := make([]*comm.Communicator, n+joiners)
	joined := make([]*comm.Communicator, joiners)
	errs := make([]error, n+joiners)
	var wg sync.WaitGroup
	for j := range joiners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			joined[j], errs[n+j] = comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP))
		}()
	}
	for r, c := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grown[r], errs[r] = c.Grow(ctx, id, joiners)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("grow: %d: %v", i, err)
		}
	}
	for r, g := range grown[:n] {
		if g.Rank() != r || g.Size() != n+joiners {
			t.Fatalf("member %d: rank %d of %d in the grown communicator", r, g.Rank(), g.Size())
		}
		t.Cleanup(func() { g.Close() })
	}
	seen := map[int]bool{}
	for _, g := range joined {
		if g.Rank() < n || g.Rank() >= n+joiners || seen[g.Rank()] || g.Size() != n+joiners {
			t.Fatalf("joiner: rank %d of %d", g.Rank(), g.Size())
		}
		seen[g.Rank()] = true
		grown[g.Rank()] = g
		t.Cleanup(func() { g.Close() })
	}
	return grown
}

// TestGrowTCP grows communicators of 4 ranks by one and by two joiners
// (in goroutines of this process, over TCP): every collective gives the
// reference's results on the grown communicator, and the old one still
// works.
func TestGrowTCP(t *testing.T) {
	for _, joiners := range []int{1, 2} {
		t.Run(fmt.Sprintf("joiners=%d", joiners), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			old := tcpGroup(t, ctx, 4)
			grown := grow(t, ctx, old, joiners)
			checkGrown(t, ctx, grown, "grown communicator")
			checkGrown(t, ctx, old, "old communicator")
		})
	}
}

// TestGrowNoJoiner: a Grow whose joiner never comes fails on every member
// when the deadline nears, saying how many joiners arrived, and the old
// communicator keeps working.
func TestGrowNoJoiner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := tcpGroup(t, ctx, 3)
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs := commtest.Each(old, func(_ int, c *comm.Communicator) error {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		g, err := c.Grow(gctx, id, 1)
		if err == nil {
			g.Close()
			return errors.New("grew without a joiner")
		}
		return err
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Grow took %v with a 2 s deadline", d)
	}
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if !errors.Is(err, comm.ErrGrow) || !strings.Contains(err.Error(), "0 of 1 joiners arrived") {
			t.Errorf("rank %d: %v, want ErrGrow saying 0 of 1 joiners arrived", r, err)
		}
	}
	checkGrown(t, ctx, old, "old communicator after the failed grow")
}

// TestGrowOneOfTwo: with room for two joiners and one coming, the grow
// fails at the deadline on every member and on the joiner that came, each
// saying that 1 of 2 joiners arrived.
func TestGrowOneOfTwo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := tcpGroup(t, ctx, 2)
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var joinErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A longer deadline than the members': it hears rank 0 give up.
		g, err := comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP))
		if g != nil {
			g.Close()
		}
		joinErr = err
	}()
	errs := commtest.Each(old, func(_ int, c *comm.Communicator) error {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		g, err := c.Grow(gctx, id, 2)
		if g != nil {
			g.Close()
		}
		return err
	})
	<-done
	for r, err := range errs {
		if !errors.Is(err, comm.ErrGrow) || !strings.Contains(err.Error(), "1 of 2 joiners arrived") {
			t.Errorf("member %d: %v, want ErrGrow saying 1 of 2 joiners arrived", r, err)
		}
	}
	if joinErr == nil || !strings.Contains(joinErr.Error(), "1 of 2 joiners arrived") {
		t.Errorf("joiner: %v, want an error saying 1 of 2 joiners arrived", joinErr)
	}
}

// TestJoinInit: a joiner at the rendezvous of Init (which takes none) is
// refused, and the communicator is made without it.
func TestJoinInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*comm.Communicator, 2)
	errs := make([]error, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		comms[0], errs[0] = comm.Init(ctx, id, 0, 2, comm.WithTransport(comm.TransportTCP))
	}()
	// Rank 1 comes after the joiner's answer: the rendezvous is open.
	g, err := comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP))
	if err == nil || !strings.Contains(err.Error(), "takes no joiners") {
		if g != nil {
			g.Close()
		}
		t.Errorf("Join at Init's rendezvous: %v", err)
	}
	comms[1], errs[1] = comm.Init(ctx, id, 1, 2, comm.WithTransport(comm.TransportTCP))
	<-done
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer comms[r].Close()
	}
	if comms[0].Size() != 2 {
		t.Fatalf("size %d", comms[0].Size())
	}
}

// TestGrowRefusesExtraJoiner: with room for one joiner and two waiting,
// one joins and the other is refused, told that the place is taken.
func TestGrowRefusesExtraJoiner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := tcpGroup(t, ctx, 2)
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Every rank of the grown communicator sums rank+1: 1+2+3.
	sum := func(g *comm.Communicator) error {
		defer g.Close()
		x := []int32{int32(g.Rank() + 1)}
		if err := comm.AllReduce(ctx, g, x, x, comm.Sum); err != nil {
			return err
		}
		if x[0] != 6 || g.Size() != 3 {
			return fmt.Errorf("rank %d of %d: AllReduce of 1, 2, 3 = %d", g.Rank(), g.Size(), x[0])
		}
		return nil
	}
	ranks := make([]int, 2)
	jerrs := make([]error, 2)
	var wg sync.WaitGroup
	for j := range jerrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP))
			if err != nil {
				jerrs[j] = err
				return
			}
			ranks[j] = g.Rank()
			jerrs[j] = sum(g)
		}()
	}
	errs := commtest.Each(old, func(r int, c *comm.Communicator) error {
		if r == 1 {
			// Rank 0 serves the rendezvous from its call of Grow, and
			// accepts the joiners' connections (they retry every 200 ms
			// at most) while it waits for rank 1: both joiners are
			// there when the rendezvous starts, so that the second is
			// refused rather than finding no one listening. The wait
			// orders the events; nothing is timed.
			time.Sleep(1500 * time.Millisecond)
		}
		g, err := c.Grow(ctx, id, 1)
		if err != nil {
			return err
		}
		return sum(g)
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", r, err)
		}
	}
	var in, out int
	for j, err := range jerrs {
		switch {
		case err == nil && ranks[j] == 2:
			in++
		case err != nil && strings.Contains(err.Error(), "already has all 1 of its joiners"):
			out++
		default:
			t.Errorf("joiner %d: rank %d, %v", j, ranks[j], err)
		}
	}
	if in != 1 || out != 1 {
		t.Errorf("%d joined and %d were refused, want 1 and 1", in, out)
	}
}

// TestGrowWrongSecret: a joiner with the wrong secret is refused at the
// handshake, and the grow completes with the right one.
func TestGrowWrongSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := tcpGroup(t, ctx, 2)
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad := id
	bad.Secret[3] ^= 1
	grown := make([]*comm.Communicator, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grown[r], errs[r] = c.Grow(ctx, id, 1)
		}()
	}
	// The intruder retries until rank 0 serves the rendezvous, then fails
	// its handshake; only then does the right joiner come.
	if c, err := comm.Join(ctx, bad); !errors.Is(err, tcp.ErrAuth) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("joiner with the wrong secret: %v, want tcp.ErrAuth", err)
	}
	grown[2], errs[2] = comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP))
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer grown[r].Close()
	}
	if grown[2].Rank() != 2 || grown[2].Size() != 3 {
		t.Fatalf("joiner: rank %d of %d", grown[2].Rank(), grown[2].Size())
	}
	checkGrown(t, ctx, grown, "grown communicator")
}

// TestGrowTopology: a communicator with a topology grows only with a
// topology of the grown size; the joiners are placed on the hosts it
// gives their ranks, and the members keep theirs.
func TestGrowTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := tcpGroup(t, ctx, 4, comm.WithTopology(topo.Uniform(2, 2)))
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old[0].Grow(ctx, id, 2); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "topology describes 4 ranks") {
		t.Fatalf("Grow without the grown topology: %v", err)
	}
	if _, err := old[0].Grow(ctx, id, 2, comm.WithTopology(topo.Uniform(5, 1))); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("Grow with a topology of 5 ranks for 6: %v", err)
	}
	grownTopo := topo.Uniform(3, 2)
	grown := make([]*comm.Communicator, 6)
	errs := make([]error, 6)
	var wg sync.WaitGroup
	for r, c := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grown[r], errs[r] = c.Grow(ctx, id, 2, comm.WithTopology(grownTopo))
		}()
	}
	for j := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := comm.Join(ctx, id, comm.WithTransport(comm.TransportTCP), comm.WithTopology(grownTopo))
			if err != nil {
				errs[4+j] = err
				return
			}
			grown[g.Rank()] = g
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%d: %v", r, err)
		}
	}
	for r, g := range grown {
		defer g.Close()
		if g.NumHosts() != 3 {
			t.Errorf("rank %d: %d hosts, want 3", r, g.NumHosts())
		}
		for q := range 6 {
			if g.Host(q) != q/2 {
				t.Errorf("rank %d: rank %d on host %d, want %d", r, q, g.Host(q), q/2)
			}
		}
	}
	checkGrown(t, ctx, grown, "grown communicator")
}

// TestGrowMismatch: members that pass different numbers of joiners, or
// different ids, fail with a mismatch instead of waiting for each other.
func TestGrowMismatch(t *testing.T) {
	ids := make([]comm.UniqueID, 2)
	for i := range ids {
		var err error
		if ids[i], err = comm.NewUniqueIDAt("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		id   func(r int) comm.UniqueID
		n    func(r int) int
	}{
		{"joiners", func(int) comm.UniqueID { return ids[0] }, func(r int) int { return 1 + r }},
		{"id", func(r int) comm.UniqueID { return ids[r] }, func(int) int { return 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			old := tcpGroup(t, ctx, 2)
			errs := commtest.Each(old, func(r int, c *comm.Communicator) error {
				g, err := c.Grow(ctx, tc.id(r), tc.n(r))
				if g != nil {
					g.Close()
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, comm.ErrMismatch) {
					t.Errorf("rank %d: %v, want ErrMismatch", r, err)
				}
			}
		})
	}
}

// TestGrowLocal: in-process communicators grow with GrowLocal (rank 0
// gets the joiners' communicators), not Grow; communicators over TCP with
// Grow, not GrowLocal. Every collective on the grown communicator matches
// the reference and the old one still works; under a topology the ranks
// are on the hosts it gives them.
func TestGrowLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, _ := comm.NewUniqueIDAt("127.0.0.1:0")
	tcpComms := tcpGroup(t, ctx, 1)
	if _, _, err := tcpComms[0].GrowLocal(ctx, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("GrowLocal over TCP: %v, want errors.ErrUnsupported", err)
	}
	for _, withTopo := range []bool{false, true} {
		t.Run(fmt.Sprintf("topology=%v", withTopo), func(t *testing.T) {
			var opts, growOpts []comm.Option
			if withTopo {
				opts = []comm.Option{comm.WithTopology(topo.Uniform(2, 2))}
				growOpts = []comm.Option{comm.WithTopology(topo.Uniform(3, 2))}
			}
			old, err := comm.NewLocal(4, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll(old)
			if _, err := old[0].Grow(ctx, id, 1); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("Grow of NewLocal: %v, want errors.ErrUnsupported", err)
			}
			grown := make([]*comm.Communicator, 6)
			errs := commtest.Each(old, func(r int, c *comm.Communicator) error {
				g, joiners, err := c.GrowLocal(ctx, 2, growOpts...)
				if err != nil {
					return err
				}
				if (r == 0) != (len(joiners) == 2) {
					return fmt.Errorf("rank %d got %d joiners", r, len(joiners))
				}
				grown[r] = g
				for _, j := range joiners {
					grown[j.Rank()] = j
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, g := range grown {
				if g == nil || g.Rank() != r || g.Size() != 6 {
					t.Fatalf("grown communicator %d: %v", r, g)
				}
				defer g.Close()
				if withTopo {
					for q := range 6 {
						if g.Host(q) != q/2 {
							t.Errorf("rank %d: rank %d on host %d, want %d", r, q, g.Host(q), q/2)
						}
					}
				}
			}
			checkGrown(t, ctx, grown, "grown communicator")
			checkGrown(t, ctx, old, "old communicator")
		})
	}
}

// Scenarios of the worker processes (see TestMain) for Grow: members
// (OCCL_TEST_WORKER=grow, grow-none) made by InitFromEnv, and spares
// (grow-spare, grow-intruder) that Join the id in OCCL_TEST_GROW_ID.

// growSpare joins the grown communicator and runs the checks on it; a
// grow-intruder holds the wrong secret and must be refused.
func growSpare(ctx context.Context, name string, opts []comm.Option) error {
	id, err := comm.ParseUniqueID(os.Getenv("OCCL_TEST_GROW_ID"))
	if err != nil {
		return err
	}
	g, err := comm.Join(ctx, id, opts...)
	if name == "grow-intruder" {
		if errors.Is(err, tcp.ErrAuth) {
			fmt.Println("REFUSED", err)
			return nil
		}
		if g != nil {
			g.Close()
		}
		return fmt.Errorf("intruder joined or failed otherwise: %v", err)
	}
	if err != nil {
		return err
	}
	defer g.Close()
	fmt.Printf("JOINED rank %d of %d\n", g.Rank(), g.Size())
	return grownChecks(ctx, g)
}

// growMember grows c by OCCL_TEST_GROW_N joiners, runs the checks on the
// grown communicator, then on c again.
func growMember(ctx context.Context, c *comm.Communicator) error {
	id, err := comm.ParseUniqueID(os.Getenv("OCCL_TEST_GROW_ID"))
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(os.Getenv("OCCL_TEST_GROW_N"))
	g, err := c.Grow(ctx, id, n)
	if err != nil {
		return err
	}
	defer g.Close()
	if g.Rank() != c.Rank() || g.Size() != c.Size()+n {
		return fmt.Errorf("rank %d of %d in the grown communicator, was %d of %d", g.Rank(), g.Size(), c.Rank(), c.Size())
	}
	if err := grownChecks(ctx, g); err != nil {
		return fmt.Errorf("grown communicator: %w", err)
	}
	if err := grownChecks(ctx, c); err != nil {
		return fmt.Errorf("old communicator after the grow: %w", err)
	}
	fmt.Printf("GREW rank %d of %d\n", g.Rank(), g.Size())
	return nil
}

// growNone grows c by a joiner that never comes, with a deadline of 3 s:
// Grow must fail saying no joiner arrived, and c must still work.
func growNone(ctx context.Context, c *comm.Communicator) error {
	id, err := comm.ParseUniqueID(os.Getenv("OCCL_TEST_GROW_ID"))
	if err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	g, err := c.Grow(gctx, id, 1)
	if err == nil {
		g.Close()
		return errors.New("grew without a joiner")
	}
	if !errors.Is(err, comm.ErrGrow) || !strings.Contains(err.Error(), "0 of 1 joiners arrived") {
		return fmt.Errorf("Grow without a joiner: %v, want ErrGrow saying 0 of 1 joiners arrived", err)
	}
	fmt.Println("NOJOINER", err)
	return grownChecks(ctx, c)
}

// growJob starts 4 member processes running scenario and the spares
// (each one process running its scenario, one after the other, each
// started when the one before it has ended or, for the last, with the
// members still running), and returns the members' and the spares'
// output.
func growJob(t *testing.T, scenario string, n int, spares ...string) (string, []string) {
	t.Helper()
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := []string{"OCCL_TEST_GROW_ID=" + id.String(), fmt.Sprintf("OCCL_TEST_GROW_N=%d", n)}
	var out syncBuffer
	j, err := launch.Start(ctx, launch.Spec{
		NP: 4, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    append([]string{"OCCL_TEST_WORKER=" + scenario}, env...),
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	spareOut := make([]string, len(spares))
	var wg sync.WaitGroup
	run := func(i int) {
		defer wg.Done()
		s := spares[i]
		growID := id.String()
		if s == "grow-intruder" {
			bad := id
			bad.Secret[0] ^= 0xff
			growID = bad.String()
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OCCL_TEST_WORKER="+s, "OCCL_TEST_GROW_ID="+growID)
		b, err := cmd.CombinedOutput()
		spareOut[i] = string(b)
		if err != nil {
			t.Errorf("%s: %v\n%s", s, err, b)
		}
	}
	for i, s := range spares {
		wg.Add(1)
		if s == "grow-intruder" {
			// Refused before any spare comes.
			run(i)
			continue
		}
		go run(i)
	}
	wg.Wait()
	if _, err := j.Wait(); err != nil {
		t.Fatalf("members: %v\n%s", err, out.String())
	}
	return out.String(), spareOut
}

// TestProcessGrow: 4 member processes grow by a spare process; a process
// with the wrong secret comes first and is refused. Every collective on
// the 5 ranks matches the reference, and the members' old communicator
// works afterwards.
func TestProcessGrow(t *testing.T) {
	skipUnderRace(t, "TestGrowTCP (one and two joiners over TCP, in one process)")
	out, spares := growJob(t, "grow", 1, "grow-intruder", "grow-spare")
	t.Logf("members:\n%s\nintruder:\n%s\nspare:\n%s", out, spares[0], spares[1])
	if !strings.Contains(spares[0], "REFUSED") {
		t.Errorf("intruder was not refused:\n%s", spares[0])
	}
	if !strings.Contains(spares[1], "JOINED rank 4 of 5") {
		t.Errorf("spare:\n%s", spares[1])
	}
	if got := strings.Count(out, "GREW rank "); got != 4 {
		t.Errorf("%d members grew, want 4:\n%s", got, out)
	}
}

// TestProcessGrowTwo: 4 member processes grow by two spare processes at
// once; the spares take ranks 4 and 5 in some order.
func TestProcessGrowTwo(t *testing.T) {
	skipUnderRace(t, "TestGrowTCP (one and two joiners over TCP, in one process)")
	out, spares := growJob(t, "grow", 2, "grow-spare", "grow-spare")
	got := spares[0] + spares[1]
	if !strings.Contains(got, "JOINED rank 4 of 6") || !strings.Contains(got, "JOINED rank 5 of 6") {
		t.Errorf("spares:\n%s", got)
	}
	if n := strings.Count(out, "GREW rank "); n != 4 {
		t.Errorf("%d members grew, want 4:\n%s", n, out)
	}
}

// TestProcessGrowNoJoiner: 4 member processes grow by a spare that never
// comes: every member fails at the deadline saying no joiner arrived, and
// their communicator still works.
func TestProcessGrowNoJoiner(t *testing.T) {
	skipUnderRace(t, "TestGrowNoJoiner (in one process)")
	out, _ := growJob(t, "grow-none", 1)
	if n := strings.Count(out, "NOJOINER "); n != 4 {
		t.Errorf("%d members failed as expected, want 4:\n%s", n, out)
	}
}

// TestGrowAfterShrink: a communicator made by Shrink, whose ranks are
// ranks of the fabric it came from, grows with the grown topology (a spare
// taking the dropped rank's place); the grown communicator spans that
// topology. One made by Split still cannot grow.
func TestGrowAfterShrink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fabric := topo.Uniform(2, 2)
	old, err := comm.NewLocal(4, comm.WithTopology(fabric))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(old)
	survivors := []*comm.Communicator{old[0], old[2], old[3]}
	shrunk := make([]*comm.Communicator, 3)
	for i, err := range commtest.Each(survivors, func(i int, c *comm.Communicator) error {
		var err error
		shrunk[i], err = c.Shrink(ctx, []int{1})
		return err
	}) {
		if err != nil {
			t.Fatalf("shrink, old rank %d: %v", []int{0, 2, 3}[i], err)
		}
	}
	defer closeAll(shrunk)
	if got := fmt.Sprint(shrunk[0].FabricRanks()); got != "[0 2 3]" {
		t.Fatalf("shrunk fabric ranks %s, want [0 2 3]", got)
	}
	grown := make([]*comm.Communicator, 4)
	for r, err := range commtest.Each(shrunk, func(r int, c *comm.Communicator) error {
		g, joiners, err := c.GrowLocal(ctx, 1, comm.WithTopology(fabric))
		if err != nil {
			return err
		}
		grown[r] = g
		for _, j := range joiners {
			grown[j.Rank()] = j
		}
		return nil
	}) {
		if err != nil {
			t.Fatalf("grow, rank %d: %v", r, err)
		}
	}
	defer closeAll(grown)
	for r, g := range grown {
		if g == nil || g.Size() != 4 || g.Rank() != r {
			t.Fatalf("grown rank %d: %v", r, g)
		}
		if got := fmt.Sprint(g.FabricRanks()); got != "[0 1 2 3]" {
			t.Errorf("grown rank %d: fabric ranks %s, want [0 1 2 3]", r, got)
		}
	}
	checkGrown(t, ctx, grown, "grown communicator")
	// A Split of the shrunk communicator is part of a fabric again.
	split := make([]*comm.Communicator, 3)
	for i, err := range commtest.Each(shrunk, func(i int, c *comm.Communicator) error {
		var err error
		split[i], err = c.Split(ctx, 0, i)
		return err
	}) {
		if err != nil {
			t.Fatalf("split, rank %d: %v", i, err)
		}
	}
	defer closeAll(split)
	if _, _, err := split[0].GrowLocal(ctx, 1, comm.WithTopology(fabric)); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("GrowLocal of a Split: %v, want ErrInvalidArgument", err)
	}
}

// checkGrown runs grownChecks on every communicator of comms (what names
// them in a failure) and fails the test if any rank fails.
func checkGrown(t *testing.T, ctx context.Context, comms []*comm.Communicator, what string) {
	t.Helper()
	for i, err := range commtest.Each(comms, func(_ int, c *comm.Communicator) error { return grownChecks(ctx, c) }) {
		if err != nil {
			t.Fatalf("rank %d of the %s: %v", i, what, err)
		}
	}
}

// TestGrowStallReport: while the members of a Grow wait for a joiner that
// does not come, the stall report says they are bootstrapping the grown
// communicator, not that they wait on one of them (the peer of their
// agreement, which they are past).
func TestGrowStallReport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := logx.Parse("WARN", "")
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	old := tcpGroup(t, ctx, 3, comm.WithStallTimeout(150*time.Millisecond), comm.WithLogger(logx.New(&buf, cfg)))
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	commtest.Each(old, func(_ int, c *comm.Communicator) error {
		gctx, gcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer gcancel()
		if g, err := c.Grow(gctx, id, 2); err == nil {
			g.Close()
		}
		return nil
	})
	var reports []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "stall at") {
			reports = append(reports, line)
		}
	}
	if len(reports) == 0 {
		t.Fatalf("no stall report; log:\n%s", buf.String())
	}
	for _, line := range reports {
		if strings.Contains(line, "on rank") || !strings.Contains(line, "stall at Grow") || !strings.Contains(line, "ranks 0-2 are in it, bootstrapping the grown communicator with its 2 joiners") {
			t.Errorf("report %s\nwant the members in the Grow, bootstrapping with its 2 joiners, and no peer waited on", line)
		}
	}
}
