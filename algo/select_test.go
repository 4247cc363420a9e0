package algo

import (
	"testing"
)

func TestPartition(t *testing.T) {
	for parts := 1; parts <= 9; parts++ {
		for count := 0; count <= 40; count++ {
			next := 0
			for i := 0; i < parts; i++ {
				off, n := Partition(count, parts, i)
				if off != next {
					t.Fatalf("Partition(%d, %d, %d) offset %d, want %d", count, parts, i, off, next)
				}
				want := count / parts
				if i < count%parts {
					want++
				}
				if n != want {
					t.Fatalf("Partition(%d, %d, %d) length %d, want %d", count, parts, i, n, want)
				}
				next += n
			}
			if next != count {
				t.Fatalf("Partition(%d, %d) covers %d elements", count, parts, next)
			}
			segs := PartitionOffsets(nil, count, parts)
			for i := 0; i < parts; i++ {
				off, n := Partition(count, parts, i)
				if segs[i] != off || segs[i+1] != off+n {
					t.Fatalf("PartitionOffsets(%d, %d) = %v", count, parts, segs)
				}
			}
		}
	}
}

func TestChunks(t *testing.T) {
	for _, tc := range []struct{ chunkBytes, esize, want int }{
		{64, 4, 64}, {65, 4, 64}, {3, 4, 4}, {1, 8, 8}, {7, 1, 7},
	} {
		if got := chunkSize(tc.chunkBytes, tc.esize); got != tc.want {
			t.Errorf("chunkSize(%d, %d) = %d, want %d", tc.chunkBytes, tc.esize, got, tc.want)
		}
	}
	unbounded := chunkSize(0, 4)
	if numChunks(1<<40, unbounded) != 1 || numChunks(0, unbounded) != 0 {
		t.Error("unbounded chunk size does not give one chunk")
	}
	if lo, hi := chunkAt(100, 50, unbounded, 0); lo != 100 || hi != 150 {
		t.Errorf("chunkAt unbounded = [%d, %d)", lo, hi)
	}
	for _, n := range []int{1, 63, 64, 65, 1000} {
		next, nc := 10, numChunks(n, 64)
		for k := 0; k < nc; k++ {
			lo, hi := chunkAt(10, n, 64, k)
			if lo != next || hi <= lo || hi-lo > 64 {
				t.Fatalf("n=%d chunk %d = [%d, %d)", n, k, lo, hi)
			}
			next = hi
		}
		if next != 10+n {
			t.Fatalf("n=%d: chunks end at %d", n, next)
		}
	}
}

func TestCollectiveNames(t *testing.T) {
	want := map[Collective]string{
		OpAllReduce: "AllReduce", OpBroadcast: "Broadcast", OpReduce: "Reduce",
		OpAllGather: "AllGather", OpReduceScatter: "ReduceScatter", OpAllToAll: "AllToAll",
		OpAllToAllV: "AllToAllV", OpGather: "Gather", OpScatter: "Scatter",
		OpBarrier: "Barrier", OpSendRecv: "SendRecv", OpSplit: "Split", OpRewire: "Rewire",
		OpGrow: "Grow",
	}
	for c, n := range want {
		if c.String() != n || !c.Valid() {
			t.Errorf("%d: String() = %q, want %q", uint8(c), c.String(), n)
		}
	}
	if OpAllReduce != 1 || OpSplit != 12 || OpRewire != 13 || OpGrow != 14 {
		t.Error("collective wire values changed")
	}
	for _, c := range []Collective{0, 15, 255} {
		if c.Valid() {
			t.Errorf("collective %d is valid", uint8(c))
		}
		_ = c.String()
	}
}

func TestParseAlgorithm(t *testing.T) {
	for a := AlgoAuto; a < numAlgorithms; a++ {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	for s, want := range map[string]Algorithm{"": AlgoAuto, " Ring ": AlgoRing, "RHD": AlgoRHD, "rd": AlgoRD} {
		if got, err := ParseAlgorithm(s); err != nil || got != want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseAlgorithm("bruck2"); err == nil {
		t.Error("ParseAlgorithm accepted an unknown name")
	}
	if Algorithm(200).Valid() || Algorithm(200).String() == "" {
		t.Error("invalid algorithm")
	}
}

func TestSelect(t *testing.T) {
	for _, tc := range []struct {
		c      Collective
		bytes  int
		forced Algorithm
		want   Algorithm
	}{
		{OpAllReduce, 0, AlgoAuto, AlgoRD},
		{OpAllReduce, AllReduceRDMaxBytes, AlgoAuto, AlgoRD},
		{OpAllReduce, AllReduceRDMaxBytes + 1, AlgoAuto, AlgoRHD},
		{OpAllReduce, AllReduceRHDMaxBytes, AlgoAuto, AlgoRHD},
		{OpAllReduce, AllReduceRHDMaxBytes + 1, AlgoAuto, AlgoRing},
		{OpAllReduce, 1, AlgoRing, AlgoRing},
		{OpAllReduce, 1 << 30, AlgoRD, AlgoRD},
		{OpAllReduce, 1 << 30, AlgoTree, AlgoRing}, // not an allreduce: auto
		{OpBroadcast, 1 << 30, AlgoAuto, AlgoTree},
		{OpBroadcast, 1, AlgoRing, AlgoTree},
		{OpReduce, 100, AlgoAuto, AlgoTree},
		{OpReduce, ReduceTreeMaxBytes + 1, AlgoAuto, AlgoChain},
		{OpReduce, 100, AlgoRing, AlgoRing},
		{OpAllGather, 100, AlgoAuto, AlgoRing},
		{OpReduceScatter, 1 << 20, AlgoRHD, AlgoRing},
		{OpAllToAll, 100, AlgoAuto, AlgoPairwise},
		{OpAllToAllV, 100, AlgoLinear, AlgoPairwise},
		{OpGather, 100, AlgoAuto, AlgoLinear},
		{OpScatter, 100, AlgoAuto, AlgoLinear},
		{OpBarrier, 0, AlgoAuto, AlgoDissemination},
		{OpBarrier, 0, AlgoRing, AlgoDissemination},
		{OpSendRecv, 100, AlgoAuto, AlgoAuto},
		{OpSplit, 100, AlgoRing, AlgoAuto},
	} {
		if got := Select(tc.c, tc.bytes, 8, tc.forced); got != tc.want {
			t.Errorf("Select(%v, %d, 8, %v) = %v, want %v", tc.c, tc.bytes, tc.forced, got, tc.want)
		}
	}
	// Up to ReduceChainMaxRanks ranks a Reduce above ReduceChainMinBytes
	// takes the chain; beyond, the tree up to ReduceTreeMaxBytes.
	for _, tc := range []struct {
		bytes, ranks int
		want         Algorithm
	}{
		{1 << 30, 2, AlgoChain},
		{ReduceChainMinBytes, 2, AlgoTree},
		{ReduceChainMinBytes, 3, AlgoTree},
		{ReduceChainMinBytes + 1, 3, AlgoChain},
		{1 << 30, ReduceChainMaxRanks, AlgoChain},
		{ReduceTreeMaxBytes, ReduceChainMaxRanks + 1, AlgoTree},
		{ReduceTreeMaxBytes + 1, ReduceChainMaxRanks + 1, AlgoRing},
	} {
		if got := Select(OpReduce, tc.bytes, tc.ranks, AlgoAuto); got != tc.want {
			t.Errorf("Select(Reduce, %d, %d, auto) = %v, want %v", tc.bytes, tc.ranks, got, tc.want)
		}
	}
	// Whatever Select picks must implement the collective.
	for c := OpAllReduce; c <= OpBarrier; c++ {
		for a := AlgoAuto; a < numAlgorithms; a++ {
			for _, n := range []int{0, 1 << 10, 1 << 20, 1 << 30} {
				if got := Select(c, n, 5, a); got == AlgoAuto || !Supports(c, got) {
					t.Errorf("Select(%v, %d, 5, %v) = %v, which does not implement it", c, n, a, got)
				}
			}
		}
	}
}
