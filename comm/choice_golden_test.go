package comm_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata golden files from the current code")

// choiceCase is one communicator configuration of the schedule-choice
// grid: a topology spec (empty: none) or a rank count without one, and
// optionally the fabric ranks the topology is narrowed to.
type choiceCase struct {
	spec   string
	ranks  int
	fabric []int
}

var choiceCases = []choiceCase{
	{ranks: 1}, {ranks: 2}, {ranks: 3}, {ranks: 4}, {ranks: 5}, {ranks: 8},
	{spec: "hosts=1x4"},
	{spec: "hosts=2x1,eps=1GB/s"},
	{spec: "hosts=2x2,hbd=8GB/s,eps=1GB/s"},
	{spec: "hosts=3x2,hbd=8GB/s,eps=1GB/s"},
	{spec: "hosts=4x2,hbd=8GB/s,eps=1GB/s"},
	{spec: "hosts=2x4,hbd=100GB/s,eps=1GB/s"},
	{spec: "hosts=2x4,hbd=2GB/s,eps=10GB/s,eps_lat=1us"},
	{spec: "hosts=4x2,hbd=8GB/s,eps=1GB/s,nics=host"},
	{spec: "hosts=8x1,eps=10GB/s,eps_lat=50us"},
	{spec: "hosts=4x2,hbd=8GB/s,eps=1GB/s,rail_only=1"},
	{spec: "hosts=4x2,hbd=8GB/s,eps=1GB/s,grid=2x2"},
	{spec: "hosts=4x2,hbd=8GB/s,eps=1GB/s,ocs=4GB/s,ocs_ports=2,circuits=0-1/2-3/0-2"},
	{spec: "hosts=2x2,hbd=8GB/s,eps=1GB/s", fabric: []int{0, 1, 2}},
	{spec: "hosts=4x2,hbd=8GB/s,eps=1GB/s", fabric: []int{0, 2, 4, 6, 7}},
}

var choiceSizes = []int{0, 8, 4 << 10, 16 << 10, 16<<10 + 8, 64 << 10, 256 << 10, 256<<10 + 8, 512 << 10, 512<<10 + 8, 1 << 20, 16 << 20, 256 << 20}

var choiceOps = []algo.Collective{
	algo.OpAllReduce, algo.OpBroadcast, algo.OpReduce, algo.OpAllGather, algo.OpReduceScatter,
	algo.OpAllToAll, algo.OpAllToAllV, algo.OpGather, algo.OpScatter, algo.OpBarrier, algo.OpSendRecv,
}

// TestScheduleChoiceGolden records, for a grid of collective, size,
// topology and forced schedule, the schedule the communicator runs, and
// compares it with testdata/schedule_choice.golden: a change in how
// schedules are described or dispatched must not change a choice. Run
// with -update to rewrite the file after a deliberate change.
func TestScheduleChoiceGolden(t *testing.T) {
	var b strings.Builder
	for _, cc := range choiceCases {
		for a := algo.AlgoAuto; a.Valid(); a++ {
			opts := []comm.Option{comm.WithAlgorithm(a)}
			size := cc.ranks
			name := fmt.Sprintf("ranks=%d", cc.ranks)
			if cc.spec != "" {
				tp, err := topo.FromSpec(cc.spec)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, comm.WithTopology(tp))
				size, name = len(tp.Ranks), cc.spec
				if cc.fabric != nil {
					opts = append(opts, comm.WithFabricRanks(cc.fabric))
					size = len(cc.fabric)
					name = fmt.Sprintf("%s fabric=%v", cc.spec, cc.fabric)
				}
			}
			comms, err := comm.NewLocal(size, opts...)
			if err != nil {
				t.Fatalf("%s forced %s: %v", name, a, err)
			}
			c := comms[0]
			for _, op := range choiceOps {
				fmt.Fprintf(&b, "%s forced=%s %s:", name, a, op)
				for _, n := range choiceSizes {
					fmt.Fprintf(&b, " %d=%s", n, c.Algorithm(op, n))
				}
				b.WriteByte('\n')
			}
			// A skewed all-to-all: rank 0 sends everything to the last rank.
			skew := algo.UniformBytes(size, 64)
			skew[0][size-1] = 1 << 20
			fmt.Fprintf(&b, "%s forced=%s AllToAllV skewed: %s\n", name, a, c.AllToAllAlgorithm(skew))
			for _, c := range comms {
				c.Close()
			}
		}
	}
	path := filepath.Join("testdata", "schedule_choice.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	got := strings.Split(b.String(), "\n")
	lines := strings.Split(string(want), "\n")
	if len(got) != len(lines) {
		t.Errorf("%d lines of choices, golden file has %d", len(got), len(lines))
	}
	bad := 0
	for i := range min(len(got), len(lines)) {
		if got[i] != lines[i] {
			t.Errorf("choice changed:\n got %s\nwant %s", got[i], lines[i])
			if bad++; bad == 10 {
				t.Fatal("too many changed choices")
			}
		}
	}
}
