package comm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm/internal/wire"
)

// The stall report. When a collective has run for the stall interval
// (OCCL_STALL_TIMEOUT) on some rank, the control root asks every rank what
// it is doing (a probe, see probe.go). If the ranks called different
// collectives the communicator fails with a mismatch; otherwise the root
// writes one report from the answers and sends it to every rank, which
// logs it: which ranks have not called the operation (and the last one
// they completed), which have moved past it, and which peer each waiting
// rank is blocked on. A rank that is alive but busy elsewhere (computing,
// or stuck in the caller's code) still answers from its control thread,
// so it is named as well as one that is slow on the wire.

// describeStall writes the report on collective seq from the ranks'
// probe answers (a zero Msg where a rank did not answer). It returns ""
// when no rank answered about seq.
func describeStall(seq uint64, answers []wire.Msg) string {
	var (
		op string
		fp wire.Fingerprint
	)
	for _, a := range answers {
		if a.Type == wire.ProbeAnswer && a.State == reached {
			op, fp = describeFingerprint(a.Op), a.Op
			break
		}
	}
	if op == "" {
		op = "the operation"
	}
	var (
		silent, ahead, unknown []int
		missing                = map[string][]int{} // last completed -> ranks
		waiting                = map[int][]int{}    // peer -> ranks
		inside                 []int                // in it, peer unknown
	)
	for r, a := range answers {
		switch {
		case a.Type != wire.ProbeAnswer:
			silent = append(silent, r)
		case a.State == notReached:
			last := "none"
			if a.Done > 0 {
				last = fmt.Sprintf("seq %d", a.Done)
				if a.DoneOp != (wire.Fingerprint{}) {
					last += " " + describeFingerprint(a.DoneOp)
				}
			}
			missing[last] = append(missing[last], r)
		case a.State == forgotten:
			unknown = append(unknown, r)
		case a.Current != seq:
			ahead = append(ahead, r)
		case a.Waiting >= 0:
			waiting[a.Waiting] = append(waiting[a.Waiting], r)
		default:
			inside = append(inside, r)
		}
	}
	if len(silent) == len(answers) {
		return ""
	}
	var parts []string
	for _, last := range sortedKeys(missing) {
		rs := missing[last]
		parts = append(parts, fmt.Sprintf("%s not called it (last completed: %s)", ranksVerb(rs, "has", "have"), last))
	}
	peers := make([]int, 0, len(waiting))
	for p := range waiting {
		peers = append(peers, p)
	}
	sort.Ints(peers)
	for _, p := range peers {
		parts = append(parts, fmt.Sprintf("%s on rank %d", ranksVerb(waiting[p], "waits", "wait"), p))
	}
	if len(inside) > 0 {
		in := ranksVerb(inside, "is", "are") + " in it"
		if algo.Collective(fp.Op) == algo.OpGrow {
			// Past the members' agreement a Grow waits for its joiners,
			// no peer in particular.
			if fp.Count == 1 {
				in += ", bootstrapping the grown communicator with its joiner"
			} else {
				in += fmt.Sprintf(", bootstrapping the grown communicator with its %d joiners", fp.Count)
			}
		}
		parts = append(parts, in)
	}
	if len(ahead) > 0 {
		parts = append(parts, ranksVerb(ahead, "has", "have")+" completed it")
	}
	if len(unknown) > 0 {
		parts = append(parts, ranksVerb(unknown, "is", "are")+" too far ahead to say")
	}
	if len(silent) > 0 {
		parts = append(parts, ranksVerb(silent, "did", "did")+" not answer")
	}
	return fmt.Sprintf("stall at %s seq %d: %s", op, seq, strings.Join(parts, "; "))
}

// ranksVerb writes "rank 3 has" or "ranks 0-2,5 have".
func ranksVerb(rs []int, one, many string) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d %s", rs[0], one)
	}
	return fmt.Sprintf("ranks %s %s", rankList(rs), many)
}

// rankList writes ascending ranks with runs of three or more as ranges:
// 0-2,5,7,8.
func rankList(rs []int) string {
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		switch {
		case j-i >= 2:
			b.WriteString(strconv.Itoa(rs[i]) + "-" + strconv.Itoa(rs[j]))
		case j == i+1:
			b.WriteString(strconv.Itoa(rs[i]) + "," + strconv.Itoa(rs[j]))
		default:
			b.WriteString(strconv.Itoa(rs[i]))
		}
		i = j + 1
	}
	return b.String()
}

func sortedKeys(m map[string][]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// By the first rank of each group, so reports read in rank order.
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]][0] < m[keys[j]][0] })
	return keys
}
