package trace

import (
	"cmp"
	"slices"
)

// OpStats summarises the operations of one kind and size in a job's trace
// files: how long they ran, and how long each rank sat idle before them.
// Times are in microseconds.
type OpStats struct {
	// Op is the operation's name ("AllReduce"); Bytes its buffer size.
	Op    string
	Bytes int64
	// Count is the number of operations, Ranks the number of files
	// (communicator ranks) they were found in.
	Count, Ranks int
	// Median and P90 are of the operations' durations: from when occl
	// started running one to when it ended.
	Median, P90 float64
	// Gap is the median time between the end of a rank's previous
	// operation and the start of this one, over the operations that had
	// a previous one. When every call is waited for before the next is
	// issued (a blocking call, or torch.distributed without async_op), it
	// is what the caller spends per call outside occl: its own code and
	// the layers between it and occl (Python, a framework, the C ABI).
	// Operations issued ahead of time start as soon as the last ends, and
	// their gap is near 0.
	Gap float64
}

// Stats summarises the operations (events of category "op") of files, by
// operation and size, ordered by operation name and then size. Each file
// is one communicator rank's timeline, on its own clock: gaps are taken
// within a file.
func Stats(files []File) []OpStats {
	type key struct {
		op    string
		bytes int64
	}
	type acc struct {
		durs, gaps []float64
		ranks      int
	}
	accs := map[key]*acc{}
	for _, f := range files {
		var ops []Event
		for _, e := range f.TraceEvents {
			if e.Cat == "op" && e.Ph == "X" {
				ops = append(ops, e)
			}
		}
		slices.SortStableFunc(ops, func(a, b Event) int { return cmp.Compare(a.Ts, b.Ts) })
		seen := map[key]bool{}
		for i, e := range ops {
			name, _ := e.Args["op"].(string)
			if name == "" {
				name = e.Name
			}
			k := key{name, argInt(e.Args["bytes"])}
			a := accs[k]
			if a == nil {
				a = &acc{}
				accs[k] = a
			}
			if !seen[k] {
				seen[k] = true
				a.ranks++
			}
			a.durs = append(a.durs, e.Dur)
			if i > 0 {
				prev := ops[i-1]
				a.gaps = append(a.gaps, max(0, e.Ts-(prev.Ts+prev.Dur)))
			}
		}
	}
	out := make([]OpStats, 0, len(accs))
	for k, a := range accs {
		slices.Sort(a.durs)
		slices.Sort(a.gaps)
		out = append(out, OpStats{Op: k.op, Bytes: k.bytes, Count: len(a.durs), Ranks: a.ranks,
			Median: quantile(a.durs, 0.5), P90: quantile(a.durs, 0.9), Gap: quantile(a.gaps, 0.5)})
	}
	slices.SortFunc(out, func(a, b OpStats) int {
		return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(a.Bytes, b.Bytes))
	})
	return out
}

// quantile returns the q-quantile of sorted (the nearest rank; 0 for an
// empty slice).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// argInt reads an integer argument of an event: an int64 as a Recorder
// writes it, a float64 as JSON decoding gives it back.
func argInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}
