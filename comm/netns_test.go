package comm_test

// Tests across real network stacks: hosts made of Linux network
// namespaces (package internal/netns), two ranks per host, launched through
// the environment torchrun and Open MPI set. The test binary re-executes
// itself inside the namespaces as the ranks, running the scenario named in
// OCCL_TEST_NETNS. They need root and skip without it.

import (
	"bufio"
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

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/netns"
)

func init() {
	// The ranks of these tests run this scenario instead of the tests (a
	// variable of their own, so that TestMain's scenarios stay apart).
	if name := os.Getenv("OCCL_TEST_NETNS"); name != "" {
		os.Exit(netnsWorker(name))
	}
}

// netnsWorker runs one scenario in a rank and returns its exit code.
func netnsWorker(name string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL "+format+"\n", args...)
		return 1
	}
	l, err := comm.DetectLaunch()
	if err != nil {
		return fail("%v", err)
	}
	if want := os.Getenv("OCCL_TEST_LAUNCHER"); l.Launcher != want {
		return fail("launcher %q detected, want %q", l.Launcher, want)
	}
	c, err := comm.InitFromEnv(ctx, comm.WithTimeout(time.Minute))
	if err != nil {
		return fail("init: %v", err)
	}
	defer c.Close()
	hosts, _ := strconv.Atoi(os.Getenv("OCCL_TEST_HOSTS"))
	if c.NumHosts() != hosts || c.LocalRank() != l.LocalRank || c.LocalSize() != l.LocalSize {
		return fail("%d hosts, local rank %d of %d; want %d hosts, local rank %d of %d",
			c.NumHosts(), c.LocalRank(), c.LocalSize(), hosts, l.LocalRank, l.LocalSize)
	}
	for r := 0; r < c.Size(); r++ {
		fmt.Printf("ADDR %d %s\n", r, c.ListenAddr(r))
	}
	switch name {
	case "conformance":
		if c.TransportName() != "shm+tcp" {
			return fail("transport %s, want shm+tcp", c.TransportName())
		}
		m := matrix{sizes: []int{0, 13, 1031}, dtypes: allDTypes(), ops: allOps(), async: true}
		if err := conformance(ctx, c, m); err != nil {
			return fail("%v", err)
		}
		k := checker{ctx: ctx, c: c}
		if err := k.allReduce(comm.Float32, comm.Sum, 1<<20+3, false); err != nil {
			return fail("%v", err)
		}
		if err := k.allToAll(comm.BFloat16, 64<<10+1, false); err != nil {
			return fail("%v", err)
		}
	case "volume":
		// 4 AllReduces of 4 MiB, verified.
		k := checker{ctx: ctx, c: c}
		for range 4 {
			if err := k.allReduce(comm.Float32, comm.Sum, 1<<20, false); err != nil {
				return fail("%v", err)
			}
		}
	case "partition":
		// AllReduce 4 MiB until something fails; report who is blamed.
		x := make([]float32, 1<<20)
		for i := 0; ; i++ {
			err := comm.AllReduce(ctx, c, x, x, comm.Sum)
			if err != nil {
				var pe *comm.PeerError
				peer := -1
				if errors.As(err, &pe) {
					peer = pe.Peer
				}
				fmt.Printf("FAILED peer=%d err=%v\n", peer, err)
				return 0
			}
			if i == 0 {
				fmt.Println("READY")
			}
		}
	default:
		return fail("unknown scenario %q", name)
	}
	fmt.Println("DONE")
	return 0
}

// nsLine is one line a rank printed, with when the test read it.
type nsLine struct {
	rank int
	at   time.Time
	text string
}

// nsJob is a set of ranks running in namespace hosts.
type nsJob struct {
	t    *testing.T
	cmds []*exec.Cmd
	read sync.WaitGroup

	mu    sync.Mutex
	lines []nsLine
	seen  chan struct{} // signalled on every line
}

// startNS starts np ranks of scenario, rank r on hosts[r/perHost], with
// the environment env(r) added to the test's.
func startNS(t *testing.T, scenario string, hosts []*netns.Host, np, perHost int, env func(r int) []string) *nsJob {
	t.Helper()
	j := &nsJob{t: t, seen: make(chan struct{}, 1)}
	for r := range np {
		h := hosts[r/perHost]
		cmd := h.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OCCL_TEST_NETNS="+scenario, "OCCL_HOSTID="+h.Name,
			fmt.Sprintf("OCCL_TEST_HOSTS=%d", len(hosts)))
		cmd.Env = append(cmd.Env, env(r)...)
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		j.cmds = append(j.cmds, cmd)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		j.read.Add(1)
		go func() {
			defer j.read.Done()
			defer pr.Close()
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				j.mu.Lock()
				j.lines = append(j.lines, nsLine{rank: r, at: time.Now(), text: sc.Text()})
				j.mu.Unlock()
				select {
				case j.seen <- struct{}{}:
				default:
				}
			}
		}()
	}
	return j
}

// output returns everything the ranks printed, each line prefixed by its
// rank.
func (j *nsJob) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var b strings.Builder
	for _, l := range j.lines {
		fmt.Fprintf(&b, "[%d] %s\n", l.rank, l.text)
	}
	return b.String()
}

// find returns the lines whose text starts with prefix.
func (j *nsJob) find(prefix string) []nsLine {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []nsLine
	for _, l := range j.lines {
		if strings.HasPrefix(l.text, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// waitLines waits until n lines start with prefix, failing the test after
// d.
func (j *nsJob) waitLines(prefix string, n int, d time.Duration) {
	j.t.Helper()
	deadline := time.After(d)
	for len(j.find(prefix)) < n {
		select {
		case <-j.seen:
		case <-deadline:
			j.t.Fatalf("%d of %d ranks printed %q after %v:\n%s", len(j.find(prefix)), n, prefix, d, j.output())
		}
	}
}

// wait waits for the ranks in ranks (all if nil) to exit, failing the test
// if they are not all gone after d or if want0 and one failed.
func (j *nsJob) wait(d time.Duration, want0 bool, ranks ...int) {
	j.t.Helper()
	if ranks == nil {
		for r := range j.cmds {
			ranks = append(ranks, r)
		}
	}
	errs := make(chan error, len(ranks))
	for _, r := range ranks {
		go func() {
			err := j.cmds[r].Wait()
			if err != nil {
				err = fmt.Errorf("rank %d: %w", r, err)
			}
			errs <- err
		}()
	}
	timeout := time.After(d)
	for range ranks {
		select {
		case err := <-errs:
			if err != nil && want0 {
				j.t.Errorf("%v", err)
			}
		case <-timeout:
			for _, c := range j.cmds {
				c.Process.Kill()
			}
			j.t.Fatalf("ranks still running after %v (hang):\n%s", d, j.output())
		}
	}
	if len(ranks) == len(j.cmds) {
		j.read.Wait()
	}
	if j.t.Failed() {
		j.t.Fatalf("output:\n%s", j.output())
	}
}

// nsHosts makes a lab of n hosts on one network (and on a second if two).
func nsHosts(t *testing.T, n int, two bool) (*netns.Lab, []*netns.Host, []*netns.Network) {
	lab := netns.New(t)
	nets := []*netns.Network{lab.Network()}
	if two {
		nets = append(nets, lab.Network())
	}
	hosts := make([]*netns.Host, n)
	for i := range hosts {
		hosts[i] = lab.Host(nets...)
	}
	return lab, hosts, nets
}

const nsSecret = "OCCL_SECRET=0123456789abcdef0123456789abcdef"

// TestNetnsLaunchers runs every collective (the conformance matrix,
// blocking and async, with Split) across 4 namespace hosts of 2 ranks,
// started once with torchrun's variables and once with Open MPI's, and
// checks that every rank listens on its own host's address.
func TestNetnsLaunchers(t *testing.T) {
	const hostsN, per = 4, 2
	_, hosts, nets := nsHosts(t, hostsN, false)
	a := nets[0]
	checkAddrs := func(t *testing.T, j *nsJob) {
		for _, l := range j.find("ADDR ") {
			var r int
			var addr string
			fmt.Sscanf(l.text, "ADDR %d %s", &r, &addr)
			if want := hosts[r/per].Addr(a) + ":"; !strings.HasPrefix(addr, want) {
				t.Errorf("rank %d sees rank %d listening on %q, want %s*", l.rank, r, addr, want)
			}
		}
	}
	t.Run("torchrun", func(t *testing.T) {
		j := startNS(t, "conformance", hosts, hostsN*per, per, func(r int) []string {
			return []string{"OCCL_TEST_LAUNCHER=torchrun", nsSecret,
				"MASTER_ADDR=" + hosts[0].Addr(a), "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=netns",
				fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", hostsN*per),
				fmt.Sprintf("LOCAL_RANK=%d", r%per), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", per),
				fmt.Sprintf("GROUP_RANK=%d", r/per)}
		})
		j.wait(90*time.Second, true)
		checkAddrs(t, j)
		if n := len(j.find("DONE")); n != hostsN*per {
			t.Fatalf("%d ranks done:\n%s", n, j.output())
		}
	})
	t.Run("openmpi", func(t *testing.T) {
		j := startNS(t, "conformance", hosts, hostsN*per, per, func(r int) []string {
			return []string{"OCCL_TEST_LAUNCHER=openmpi", nsSecret,
				"OCCL_RENDEZVOUS=" + hosts[0].Addr(a) + ":29600", "OMPI_MCA_ess_base_jobid=4242",
				fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r), fmt.Sprintf("OMPI_COMM_WORLD_SIZE=%d", hostsN*per),
				fmt.Sprintf("OMPI_COMM_WORLD_LOCAL_RANK=%d", r%per), fmt.Sprintf("OMPI_COMM_WORLD_LOCAL_SIZE=%d", per)}
		})
		j.wait(90*time.Second, true)
		checkAddrs(t, j)
		if n := len(j.find("DONE")); n != hostsN*per {
			t.Fatalf("%d ranks done:\n%s", n, j.output())
		}
	})
}

// TestNetnsSocketIfname gives every host two interfaces on two networks,
// with the rendezvous on the first and OCCL_SOCKET_IFNAME naming the
// second: every rank listens on its second address, and the data crosses
// the second network (its byte counters carry the collectives, the first
// only the control plane).
func TestNetnsSocketIfname(t *testing.T) {
	const hostsN, per = 4, 2
	_, hosts, nets := nsHosts(t, hostsN, true)
	a, b := nets[0], nets[1]
	type counts struct{ a, b uint64 }
	tx := func() []counts {
		out := make([]counts, hostsN)
		for i, h := range hosts {
			_, ta, err := h.Counters(a)
			if err != nil {
				t.Fatal(err)
			}
			_, tb, err := h.Counters(b)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = counts{ta, tb}
		}
		return out
	}
	before := tx()
	j := startNS(t, "volume", hosts, hostsN*per, per, func(r int) []string {
		return []string{"OCCL_TEST_LAUNCHER=torchrun", nsSecret, "OCCL_SOCKET_IFNAME=" + hosts[r/per].IfName(b),
			"MASTER_ADDR=" + hosts[0].Addr(a), "MASTER_PORT=29500",
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", hostsN*per),
			fmt.Sprintf("LOCAL_RANK=%d", r%per), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", per)}
	})
	j.wait(60*time.Second, true)
	after := tx()
	for _, l := range j.find("ADDR ") {
		var r int
		var addr string
		fmt.Sscanf(l.text, "ADDR %d %s", &r, &addr)
		if want := hosts[r/per].Addr(b) + ":"; !strings.HasPrefix(addr, want) {
			t.Errorf("rank %d sees rank %d listening on %q, want %s* (network %d)", l.rank, r, addr, want, b.Index())
		}
	}
	// Each host sends at least its share of 4 AllReduces of 4 MiB across
	// hosts: far more than 8 MiB on the chosen network, and the other
	// network carries only the rendezvous and heartbeats.
	for i := range hosts {
		da, db := after[i].a-before[i].a, after[i].b-before[i].b
		t.Logf("host %d sent %d bytes on network %d, %d on network %d", i, da, a.Index(), db, b.Index())
		if db < 8<<20 || da > 1<<20 {
			t.Errorf("host %d sent %d bytes on the chosen network and %d on the other", i, db, da)
		}
	}
}

// TestNetnsPartition cuts one host off its network in the middle of an
// AllReduce: every rank on the other hosts fails naming a rank of the lost
// host within the heartbeat timeout plus a margin, and exits.
func TestNetnsPartition(t *testing.T) {
	const hostsN, per, lost = 4, 2, 2
	const heartbeatTimeout, margin = 3 * time.Second, 5 * time.Second
	_, hosts, nets := nsHosts(t, hostsN, false)
	a := nets[0]
	j := startNS(t, "partition", hosts, hostsN*per, per, func(r int) []string {
		return []string{"OCCL_TEST_LAUNCHER=torchrun", nsSecret,
			"OCCL_HEARTBEAT_TIMEOUT=" + heartbeatTimeout.String(), "OCCL_TRANSPORT=tcp",
			"MASTER_ADDR=" + hosts[0].Addr(a), "MASTER_PORT=29500",
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", hostsN*per),
			fmt.Sprintf("LOCAL_RANK=%d", r%per), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", per)}
	})
	j.waitLines("READY", hostsN*per, time.Minute)
	time.Sleep(100 * time.Millisecond) // inside the next AllReduces
	cut := time.Now()
	if err := hosts[lost].SetLink(a, false); err != nil {
		t.Fatal(err)
	}
	var survivors []int
	for r := range hostsN * per {
		if r/per != lost {
			survivors = append(survivors, r)
		}
	}
	j.wait(heartbeatTimeout+margin+10*time.Second, true, survivors...)
	failed := map[int]nsLine{}
	for _, l := range j.find("FAILED ") {
		failed[l.rank] = l
	}
	for _, r := range survivors {
		l, ok := failed[r]
		if !ok {
			t.Errorf("rank %d did not report a failure", r)
			continue
		}
		var peer int
		fmt.Sscanf(l.text, "FAILED peer=%d", &peer)
		t.Logf("rank %d, %v after the cut: %s", r, l.at.Sub(cut).Round(time.Millisecond), l.text)
		if peer/per != lost {
			t.Errorf("rank %d blames rank %d, not a rank of host %d (ranks %d-%d): %s", r, peer, lost, lost*per, lost*per+per-1, l.text)
		}
		if d := l.at.Sub(cut); d > heartbeatTimeout+margin {
			t.Errorf("rank %d reported the failure %v after the cut (heartbeat timeout %v)", r, d, heartbeatTimeout)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", j.output())
	}
}
