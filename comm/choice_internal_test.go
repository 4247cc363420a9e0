package comm

import (
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/topo"
)

// TestChoiceCache: the remembered choice is the cost model's, for every
// operation and size asked twice, and the cache stays bounded.
func TestChoiceCache(t *testing.T) {
	tp, err := topo.FromSpec("hosts=2x2,hbd=8GB/s,eps=1GB/s")
	if err != nil {
		t.Fatal(err)
	}
	l := newLayout(tp)
	c := &Communicator{}
	c.size = 4
	ops := []algo.Collective{algo.OpAllReduce, algo.OpBroadcast, algo.OpReduce, algo.OpAllGather, algo.OpReduceScatter}
	for pass := range 2 {
		for _, op := range ops {
			for bytes := 8; bytes <= 64<<20; bytes *= 4 {
				want := algo.Choose(op, bytes, 4, tp, l.model, algo.AlgoAuto)
				if got := c.choose(l, op, bytes); got != want {
					t.Fatalf("pass %d: %v of %d bytes: chose %v, the model chooses %v", pass, op, bytes, got, want)
				}
			}
		}
	}
	for bytes := range 3 * maxChoices {
		c.choose(l, algo.OpAllReduce, 4*bytes+4)
	}
	if n := len(l.choices.m); n == 0 || n > maxChoices {
		t.Fatalf("%d choices remembered, want 1..%d", n, maxChoices)
	}
}
