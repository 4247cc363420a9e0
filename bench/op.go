// Package bench measures occl's collectives the way nccl-tests measures
// NCCL's: a sweep of sizes, warmup then timed iterations, out-of-place and
// in-place, the maximum over ranks of the average time per operation,
// algorithm and bus bandwidth, and an optional check of every result
// against an independent reference.
package bench

import (
	"fmt"
	"strings"

	"github.com/occl/occl/algo"
)

// Op is a benchmarked operation.
type Op string

// Operations, named as occl-bench's -op flag takes them.
const (
	AllReduce     Op = "allreduce"
	Reduce        Op = "reduce"
	Broadcast     Op = "broadcast"
	AllGather     Op = "allgather"
	ReduceScatter Op = "reducescatter"
	AllToAll      Op = "alltoall"
	AllToAllV     Op = "alltoallv"
	Gather        Op = "gather"
	Scatter       Op = "scatter"
	SendRecv      Op = "sendrecv"
	Barrier       Op = "barrier"
)

// Ops lists every operation occl-bench can measure.
func Ops() []Op {
	return []Op{AllReduce, Reduce, Broadcast, AllGather, ReduceScatter, AllToAll, AllToAllV, Gather, Scatter, SendRecv, Barrier}
}

// ParseOp parses an operation name; nccl-tests' binary names
// (all_reduce_perf, ...) and underscores are accepted too.
func ParseOp(s string) (Op, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "_perf"))
	s = strings.ReplaceAll(s, "_", "")
	for _, op := range Ops() {
		if string(op) == s {
			return op, nil
		}
	}
	return "", fmt.Errorf("unknown op %q (want one of %v)", s, Ops())
}

// Collective returns the collective the operation runs.
func (op Op) Collective() algo.Collective {
	switch op {
	case AllReduce:
		return algo.OpAllReduce
	case Reduce:
		return algo.OpReduce
	case Broadcast:
		return algo.OpBroadcast
	case AllGather:
		return algo.OpAllGather
	case ReduceScatter:
		return algo.OpReduceScatter
	case AllToAll:
		return algo.OpAllToAll
	case AllToAllV:
		return algo.OpAllToAllV
	case Gather:
		return algo.OpGather
	case Scatter:
		return algo.OpScatter
	case SendRecv:
		return algo.OpSendRecv
	}
	return algo.OpBarrier
}

// Rooted reports whether the operation has a root.
func (op Op) Rooted() bool {
	return op == Reduce || op == Broadcast || op == Gather || op == Scatter
}

// Reduces reports whether the operation takes a reduction.
func (op Op) Reduces() bool {
	return op == AllReduce || op == Reduce || op == ReduceScatter
}

// BusFactor is the factor from algorithm to bus bandwidth for n ranks, as
// nccl-tests defines it (doc/PERFORMANCE.md): the fraction of the data each
// rank must move through its link for the operation at best.
func (op Op) BusFactor(n int) float64 {
	if n <= 1 {
		return 1
	}
	f := float64(n-1) / float64(n)
	switch op {
	case AllReduce:
		return 2 * f
	case AllGather, ReduceScatter, AllToAll, AllToAllV, Gather, Scatter:
		return f
	case Barrier:
		return 0
	}
	return 1 // Broadcast, Reduce, SendRecv
}

// Layout is how a size of the sweep maps to buffers, following nccl-tests:
// the size is the largest buffer a rank holds (the output of AllGather and
// Gather, the input of ReduceScatter and Scatter, either buffer otherwise),
// rounded down to what the operation can split evenly.
type Layout struct {
	SendCount int // elements in the send buffer
	RecvCount int // elements in the receive buffer
	Count     int // elements reported (the size's element count)
	Bytes     int // bytes reported (Count times the element size)
}

// Layout returns the buffers for a sweep size of size bytes of elements of
// elemSize bytes on n ranks.
func (op Op) Layout(size, elemSize, n int) Layout {
	count := size / elemSize
	var l Layout
	switch op {
	case AllGather, Gather:
		per := count / n
		l = Layout{SendCount: per, RecvCount: per * n, Count: per * n}
	case ReduceScatter, Scatter:
		per := count / n
		l = Layout{SendCount: per * n, RecvCount: per, Count: per * n}
	case AllToAll, AllToAllV:
		per := count / n
		l = Layout{SendCount: per * n, RecvCount: per * n, Count: per * n}
	case Barrier:
		l = Layout{}
	default:
		l = Layout{SendCount: count, RecvCount: count, Count: count}
	}
	l.Bytes = l.Count * elemSize
	return l
}

// Sizes returns the sweep from min to max bytes: each size is the previous
// times factor, or plus step when step > 0 (nccl-tests' -f and -i).
func Sizes(min, max, factor, step int) ([]int, error) {
	if min < 0 || max < min {
		return nil, fmt.Errorf("bad size range %d..%d", min, max)
	}
	if step <= 0 && factor < 2 {
		return nil, fmt.Errorf("step factor must be at least 2, or give a step increment")
	}
	var out []int
	for s := min; s <= max; {
		out = append(out, s)
		next := s * factor
		if step > 0 {
			next = s + step
		}
		if next <= s {
			if s == 0 && step <= 0 {
				next = 1
			} else {
				break
			}
		}
		s = next
	}
	return out, nil
}

// TypeName is the dtype name nccl-tests prints.
func TypeName(dt algo.DType) string {
	switch dt {
	case algo.Float32:
		return "float"
	case algo.Float64:
		return "double"
	case algo.Float16:
		return "half"
	}
	return dt.String()
}
