package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/internal/proctest"
)

// TestLaunchedSweep builds occl-bench and runs a small checked sweep of
// several operations across 3 processes, as a user would.
func TestLaunchedSweep(t *testing.T) {
	bin := proctest.Build(t, ".")
	for _, op := range []string{"allreduce", "alltoall", "broadcast", "sendrecv"} {
		lines := 0
		forJSON(t, bin, []string{"-np", "3", "-op", op, "-b", "8", "-e", "1M", "-f", "8", "-n", "3", "-w", "1", "-c", "1", "-json", "-quiet"},
			func(r *struct {
				Op    string  `json:"op"`
				NP    int     `json:"np"`
				Wrong int64   `json:"wrong"`
				Time  float64 `json:"time_us"`
			}) {
				if r.Op != op || r.NP != 3 || r.Wrong != 0 || r.Time <= 0 {
					t.Fatalf("%s: bad result %+v", op, r)
				}
				lines++
			})
		if lines != 6 {
			t.Fatalf("%s: %d results, want 6 (8 B to 256 KiB)", op, lines)
		}
	}
}

// TestLatency runs a sweep with -latency, blocking calls and Async calls
// each waited for, across 2 processes: every size reports a per-operation
// distribution consistent with itself and with the mean, both variants,
// and the table shows its columns.
func TestLatency(t *testing.T) {
	bin := proctest.Build(t, ".")
	for _, z := range []string{"1", "2"} {
		type dist struct {
			P50 float64 `json:"p50_us"`
			P99 float64 `json:"p99_us"`
			Max float64 `json:"max_us"`
		}
		lines := 0
		forJSON(t, bin, []string{"-np", "2", "-op", "allreduce", "-b", "8", "-e", "64K", "-f", "64", "-n", "200", "-w", "5", "-z", z, "-latency", "-json", "-quiet"},
			func(r *struct {
				Bytes       int     `json:"bytes"`
				Time        float64 `json:"time_us"`
				InPlaceTime float64 `json:"inplace_time_us"`
				Lat         *dist   `json:"latency"`
				InPlaceLat  *dist   `json:"inplace_latency"`
			}) {
				for _, v := range []struct {
					mean float64
					d    *dist
				}{{r.Time, r.Lat}, {r.InPlaceTime, r.InPlaceLat}} {
					// The mean of the slowest rank cannot exceed the
					// slowest operation any rank timed.
					if d := v.d; d == nil || d.P50 <= 0 || d.P50 > d.P99 || d.P99 > d.Max || v.mean > d.Max {
						t.Fatalf("-z %s, %d B: mean %v us, latency %+v", z, r.Bytes, v.mean, d)
					}
				}
				lines++
			})
		if lines != 3 {
			t.Fatalf("-z %s: %d results, want 3", z, lines)
		}
	}
	out, err := exec.Command(bin, "-np", "2", "-b", "8", "-e", "8", "-n", "20", "-w", "1", "-z", "1", "-latency", "-quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("table: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "p99") {
		t.Fatalf("table lacks the latency columns:\n%s", out)
	}
}

// forJSON runs bin with args as a user launches it (not as a rank of an
// outer launch) and calls check with every line of its output decoded
// into a new T.
func forJSON[T any](t *testing.T, bin string, args []string, check func(*T)) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "OCCL_RANK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		v := new(T)
		if err := json.Unmarshal(sc.Bytes(), v); err != nil {
			t.Fatalf("%v: not JSON: %q", args, sc.Text())
		}
		check(v)
	}
}

// TestSkewedSweep runs a skewed, checked alltoallv on an emulated fabric
// whose circuits occl-bench places itself, across 4 processes.
func TestSkewedSweep(t *testing.T) {
	bin := proctest.Build(t, ".")
	cmd := exec.Command(bin, "-np", "4", "-op", "alltoallv", "-b", "1K", "-e", "256K", "-f", "16", "-n", "2", "-w", "1",
		"-topo", "hosts=2x2,nics=host,ocs_ports=1,hbd=4GB/s,eps=1GB/s,ocs=1GB/s", "-emulate", "-skew", "zipf:1", "-circuits", "auto", "-explain", "-quiet")
	cmd.Env = append(os.Environ(), "OCCL_RANK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"circuits 0-1", "# demand zipf:1", "Out of bounds values : 0 OK", "meas/pred"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestReconfigOp runs -op reconfig across 4 processes with an emulated
// controller and checked all-to-alls after every reconfiguration.
func TestReconfigOp(t *testing.T) {
	bin := proctest.Build(t, ".")
	cmd := exec.Command(bin, "-np", "4", "-op", "reconfig", "-n", "6", "-w", "1", "-switch-delay", "1ms", "-json", "-quiet")
	cmd.Env = append(os.Environ(), "OCCL_RANK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r struct {
		Op       string  `json:"op"`
		NP       int     `json:"np"`
		Iters    int     `json:"iters"`
		Switch   float64 `json:"switch_us"`
		Overhead float64 `json:"overhead_p50_us"`
		Links    int     `json:"links"`
		Wrong    int64   `json:"wrong"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &r); err != nil {
		t.Fatalf("not one JSON line: %v\n%s", err, out)
	}
	if r.Op != "reconfig" || r.NP != 4 || r.Iters != 6 || r.Switch < 1000 || r.Overhead <= 0 || r.Links == 0 || r.Wrong != 0 {
		t.Fatalf("result %+v", r)
	}
}

// TestRecoverOp runs -op recover over TCP with 3 processes: each of 3
// trials hits another rank, and the 2 survivors recover every time.
func TestRecoverOp(t *testing.T) {
	bin := proctest.Build(t, ".")
	cmd := exec.Command(bin, "-np", "3", "-op", "recover", "-n", "3", "-transport", "tcp", "-json", "-quiet")
	cmd.Env = append(os.Environ(), "OCCL_RANK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r struct {
		Op        string  `json:"op"`
		NP        int     `json:"np"`
		Fault     string  `json:"fault"`
		Transport string  `json:"transport"`
		Links     string  `json:"links"`
		Trials    int     `json:"trials"`
		Failed    int     `json:"failed"`
		Heartbeat float64 `json:"heartbeat_timeout_ms"`
		Detect    float64 `json:"detect_p50_us"`
		Recover   float64 `json:"recover_p99_us"`
		Records   []struct {
			Victim    int `json:"victim"`
			Survivors []struct {
				Rank    int `json:"rank"`
				NewSize int `json:"new_size"`
			} `json:"survivors"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &r); err != nil {
		t.Fatalf("not one JSON line: %v\n%s", err, out)
	}
	if r.Op != "recover" || r.NP != 3 || r.Fault != "kill" || r.Transport != "tcp" || r.Links != "tcp" || r.Trials != 3 || r.Failed != 0 ||
		r.Heartbeat != 1000 || r.Detect <= 0 || r.Recover <= 0 || len(r.Records) != 3 {
		t.Fatalf("result %+v", r)
	}
	for i, tr := range r.Records {
		if tr.Victim != i || len(tr.Survivors) != 2 {
			t.Fatalf("trial %d: %+v", i, tr)
		}
		for _, s := range tr.Survivors {
			if s.Rank == i || s.NewSize != 2 {
				t.Fatalf("trial %d: survivor %+v", i, s)
			}
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-op", "nope"}, {"-d", "float128"}, {"-b", "1X"}, {"-transport", "carrier-pigeon"}, {"-b", "64", "-e", "8"},
		{"-np", "2", "-op", "alltoallv", "-skew", "zipf:x"}, {"-np", "2", "-circuits", "auto"},
		{"-topo", "hosts=2x1", "-circuits", "auto"}, {"-topo", "hosts=2x1,ocs_ports=1", "-circuits", "manual"},
		{"-op", "recover"}, {"-op", "recover", "-np", "4", "-fault", "nope"}, {"-op", "recover", "-np", "2"},
		{"-op", "recover", "-np", "4", "-heartbeat-timeout", "2m", "-trial-timeout", "1m"}, {"-np", "2", "-latency", "-z", "0"}} {
		if code := run(args, os.Stdout, os.Stderr); code == 0 {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestDescribeSharedPolicy checks the -hugepages header line for each kind
// of policy.
func TestDescribeSharedPolicy(t *testing.T) {
	for _, c := range []struct {
		policy string
		huge   bool
		want   []string
	}{
		{"advise", true, []string{"on huge pages", "shmem_enabled advise"}},
		{"never", false, []string{"on 4 KiB pages", "shmem_enabled never", "'advise' in /sys/kernel/mm/transparent_hugepage/shmem_enabled"}},
		{"", false, []string{"on base pages", "no shmem_enabled policy"}},
	} {
		got := describeSharedPolicy(c.policy, c.huge)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("describeSharedPolicy(%q, %v) = %q, want it to contain %q", c.policy, c.huge, got, w)
			}
		}
	}
}

// TestHeaderLines runs occl-bench as a user reads it, its table's header:
// on shared memory it says with how many peers single copies run (all of
// them here, none with OCCL_SHM_CMA=off), over TCP nothing of them, and
// with -hugepages whether the system lets shared buffers have huge pages.
func TestHeaderLines(t *testing.T) {
	bin := proctest.Build(t, ".")
	policy, huge := hugemem.SharedPolicy()
	for _, c := range []struct {
		env, args []string
		want      []string
		not       string
	}{
		{nil, []string{"-np", "2", "-hugepages"},
			[]string{"# single copies with 1 of 1 shared-memory peers\n", "# hugepages " + describeSharedPolicy(policy, huge) + "\n"}, ""},
		{[]string{"OCCL_SHM_CMA=off"}, []string{"-np", "3"}, []string{"# single copies with 0 of 2 shared-memory peers\n"}, "# hugepages"},
		{nil, []string{"-np", "2", "-transport", "tcp"}, []string{"# transport tcp "}, "# single copies"},
	} {
		cmd := exec.Command(bin, append(c.args, "-op", "alltoall", "-b", "1M", "-e", "1M", "-n", "2", "-w", "1", "-c", "1")...)
		cmd.Env = append(os.Environ(), c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v %v: %v\n%s", c.env, c.args, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v %v: no %q in\n%s", c.env, c.args, w, out)
			}
		}
		if c.not != "" && strings.Contains(string(out), c.not) {
			t.Errorf("%v %v: %q in\n%s", c.env, c.args, c.not, out)
		}
	}
}
