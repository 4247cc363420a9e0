package comm

import (
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm/internal/wire"
)

func TestDescribeStall(t *testing.T) {
	ar := wire.Fingerprint{Op: uint8(algo.OpAllReduce), DType: uint8(algo.Float32), RedOp: uint8(algo.Sum), Count: 1 << 19}
	in := func(waiting int) wire.Msg {
		return wire.Msg{Type: wire.ProbeAnswer, Seq: 204, State: reached, Op: ar, Current: 204, Done: 203, DoneOp: ar, Waiting: waiting}
	}
	notYet := func(done uint64, op wire.Fingerprint) wire.Msg {
		return wire.Msg{Type: wire.ProbeAnswer, Seq: 204, State: notReached, Done: done, DoneOp: op, Waiting: -1}
	}
	grow := func(waiting int) wire.Msg {
		return wire.Msg{Type: wire.ProbeAnswer, Seq: 204, State: reached, Op: wire.Fingerprint{Op: uint8(algo.OpGrow), Count: 1}, Current: 204, Done: 203, DoneOp: ar, Waiting: waiting}
	}
	past := wire.Msg{Type: wire.ProbeAnswer, Seq: 204, State: reached, Op: ar, Current: 0, Done: 204, DoneOp: ar, Waiting: -1}
	const arText = "AllReduce(count=524288, float32, sum)"
	for _, tc := range []struct {
		name    string
		answers []wire.Msg
		want    string
	}{
		{"one rank has not called it", []wire.Msg{in(3), in(3), in(3), notYet(203, ar)},
			"stall at " + arText + " seq 204: rank 3 has not called it (last completed: seq 203 " + arText + "); ranks 0-2 wait on rank 3"},
		{"two late ranks, different histories", []wire.Msg{notYet(0, wire.Fingerprint{}), in(0), notYet(201, wire.Fingerprint{}), in(2)},
			"stall at " + arText + " seq 204: rank 0 has not called it (last completed: none); rank 2 has not called it (last completed: seq 201); rank 1 waits on rank 0; rank 3 waits on rank 2"},
		{"silent and finished ranks", []wire.Msg{in(2), past, {}, in(-1)},
			"stall at " + arText + " seq 204: rank 0 waits on rank 2; rank 3 is in it; rank 1 has completed it; rank 2 did not answer"},
		{"forgotten", []wire.Msg{in(1), {Type: wire.ProbeAnswer, Seq: 204, State: forgotten, Waiting: -1}},
			"stall at " + arText + " seq 204: rank 0 waits on rank 1; rank 1 is too far ahead to say"},
		{"nobody answered", []wire.Msg{{}, {}}, ""},
		{"a grow waiting for its joiner", []wire.Msg{grow(-1), grow(-1), notYet(203, ar)},
			"stall at Grow seq 204: rank 2 has not called it (last completed: seq 203 " + arText + "); ranks 0,1 are in it, bootstrapping the grown communicator with its joiner"},
		{"nobody reached it", []wire.Msg{notYet(7, wire.Fingerprint{}), notYet(7, wire.Fingerprint{}), {}},
			"stall at the operation seq 204: ranks 0,1 have not called it (last completed: seq 7); rank 2 did not answer"},
	} {
		if got := describeStall(204, tc.answers); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestRankList(t *testing.T) {
	for _, tc := range []struct {
		rs   []int
		want string
	}{
		{[]int{3}, "3"},
		{[]int{0, 1}, "0,1"},
		{[]int{0, 1, 2}, "0-2"},
		{[]int{0, 1, 2, 5, 7, 8, 10, 11, 12, 13}, "0-2,5,7,8,10-13"},
	} {
		if got := rankList(tc.rs); got != tc.want {
			t.Errorf("rankList(%v) = %q, want %q", tc.rs, got, tc.want)
		}
	}
}
