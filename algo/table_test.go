package algo

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/occl/occl/algo/internal/fakepeers"
	"github.com/occl/occl/topo"
)

// TestTable checks the table's shape: every algorithm but AlgoAuto has
// exactly one schedule, with a unique name that parses back to it, and
// every implementation can run.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for a := AlgoAuto + 1; a < numAlgorithms; a++ {
		s := Lookup(a)
		if s == nil {
			t.Fatalf("%d has no schedule", a)
		}
		if s.Algorithm != a || seen[s.Name] || s.Summary == "" || len(s.Impls) == 0 {
			t.Errorf("schedule %+v", s)
		}
		seen[s.Name] = true
		if got, err := ParseAlgorithm(s.Name); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", s.Name, got, err)
		}
		for _, im := range s.Impls {
			if im.Run == nil || s.Impl(im.Op) == nil || !Supports(im.Op, a) {
				t.Errorf("%s: %v has no runner", s.Name, im.Op)
			}
		}
	}
	if len(Schedules()) != int(numAlgorithms)-1 || Lookup(AlgoAuto) != nil {
		t.Errorf("%d schedules for %d algorithms", len(Schedules()), numAlgorithms-1)
	}
}

// routedSpecs are fabrics of 4 ranks that the routed all-to-alls fit.
var routedSpecs = map[Algorithm]string{
	AlgoDelegated:   "hosts=2x2,ocs_ports=2,circuits=0-1",
	AlgoRailForward: "hosts=2x2,rail_only=1",
	AlgoXY:          "hosts=4x1,grid=2x2",
}

// TestRunSrcDst runs every implementation of every schedule (the routed
// ones with their route on a fabric they fit) through its Impl.Run, in place and out of place, on 4 ranks of two hosts,
// and checks the output against a serial computation and that an input
// that is not the output is left unchanged: every schedule takes its input
// and output the same way.
func TestRunSrcDst(t *testing.T) {
	const p, count, root = 4, 37, 2
	dt, op := Int32, Sum
	es := dt.Size()
	blk := count * es
	hosts := [][]int{{0, 1}, {2, 3}}
	for _, s := range Schedules() {
		for _, im := range s.Impls {
			var route *Route
			if im.Route != nil {
				tp, err := topo.FromSpec(routedSpecs[s.Algorithm])
				if err != nil {
					t.Fatal(err)
				}
				if route = im.Route(tp, UniformBytes(4, 37*4)); route == nil {
					t.Fatalf("%s: no route on %s", s.Name, routedSpecs[s.Algorithm])
				}
			}
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("%s/%v/inplace=%v", s.Name, im.Op, inPlace)
				t.Run(name, func(t *testing.T) {
					in, want, sizes := runSrcDstCase(im.Op, p, count, root, dt, op)
					src := make([][]byte, p)
					dst := make([][]byte, p)
					orig := make([][]byte, p)
					for r := range p {
						src[r] = slices.Clone(in[r])
						orig[r] = slices.Clone(in[r])
						dst[r] = make([]byte, sizes[r])
						if inPlace {
							src[r], dst[r] = inPlaceBuffers(im.Op, r, root, blk, src[r], dst[r])
						}
					}
					runRanks(t, p, fakepeers.Options{EagerLimit: 64}, func(ctx context.Context, rank int, peers Peers) error {
						args := Args{Peers: peers, WS: &Workspace{}, Src: src[rank], Dst: dst[rank], DType: dt, Op: op,
							Root: root, Chunk: 64, Hosts: hosts, Block: blk}
						if im.Op == OpAllToAll || im.Op == OpAllToAllV {
							args.SendOffs, args.SendLens = blocks(p, blk)
							args.RecvOffs, args.RecvLens = args.SendOffs, args.SendLens
							args.Route, args.Matrix = route, UniformBytes(p, blk)
						}
						return im.Run(ctx, &args)
					})
					for r := range p {
						if want[r] != nil && !bytes.Equal(dst[r], want[r]) {
							t.Errorf("rank %d: output differs at %s", r, firstDiff(dst[r], want[r], es))
						}
						if !inPlace && !bytes.Equal(src[r], orig[r]) {
							t.Errorf("rank %d: input overwritten", r)
						}
					}
				})
			}
		}
	}
}

// runSrcDstCase returns every rank's input, expected output (nil: not
// checked) and output size for collective c.
func runSrcDstCase(c Collective, p, count, root int, dt DType, op Op) (in, want [][]byte, sizes []int) {
	blk := count * dt.Size()
	want, sizes = make([][]byte, p), make([]int, p)
	if c == OpAllToAllV {
		c = OpAllToAll
	}
	switch c {
	case OpAllReduce, OpReduce, OpBroadcast:
		in = rankInputs(dt, op, p, count)
		sum := serialReduce(dt, op, in)
		for r := range p {
			sizes[r] = blk
			switch {
			case c == OpAllReduce:
				want[r] = sum
			case c == OpBroadcast:
				want[r] = in[root]
			case r == root:
				want[r] = sum
			}
		}
	case OpAllGather, OpGather:
		in = rankInputs(dt, op, p, count)
		all := bytes.Join(in, nil)
		for r := range p {
			sizes[r] = p * blk
			if c == OpAllGather || r == root {
				want[r] = all
			}
		}
	case OpReduceScatter, OpScatter, OpAllToAll:
		in = rankInputs(dt, op, p, p*count)
		sum := serialReduce(dt, op, in)
		for r := range p {
			sizes[r] = blk
			switch c {
			case OpReduceScatter:
				want[r] = sum[r*blk : (r+1)*blk]
			case OpScatter:
				want[r] = in[root][r*blk : (r+1)*blk]
			case OpAllToAll:
				sizes[r] = p * blk
				for j := range p {
					want[r] = append(want[r], in[j][r*blk:(r+1)*blk]...)
				}
			}
		}
	case OpBarrier:
		in = make([][]byte, p)
	}
	return in, want, sizes
}

// inPlaceBuffers returns the input and output of an in-place c on rank r.
func inPlaceBuffers(c Collective, r, root, blk int, src, dst []byte) ([]byte, []byte) {
	switch c {
	case OpAllGather, OpGather:
		if c == OpGather && r != root {
			return src, dst
		}
		copy(dst[r*blk:], src)
		return dst[r*blk : (r+1)*blk], dst
	case OpReduceScatter:
		return src, src[r*blk : (r+1)*blk]
	case OpScatter:
		if r != root {
			return src, dst
		}
		return src, src[r*blk : (r+1)*blk]
	}
	return src, src
}

// TestChooseAllocatesNothing checks that choosing a schedule without a cost
// model, the path of every operation on one host, allocates nothing.
func TestChooseAllocatesNothing(t *testing.T) {
	for _, c := range []Collective{OpAllReduce, OpReduce, OpAllGather, OpBarrier} {
		if n := testing.AllocsPerRun(100, func() { Choose(c, 1<<20, 8, nil, nil, AlgoAuto) }); n != 0 {
			t.Errorf("Choose(%v) allocates %v times", c, n)
		}
	}
}

// TestParseAlgorithmDoc checks that ParseAlgorithm's doc comment lists
// every name it accepts, as "name  constant".
func TestParseAlgorithmDoc(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "collective.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "ParseAlgorithm" {
			doc = fn.Doc.Text()
		}
	}
	if doc == "" {
		t.Fatal("ParseAlgorithm has no doc comment")
	}
	for a := AlgoAuto; a < numAlgorithms; a++ {
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(a.String()) + `\s+Algo`).MatchString(doc) {
			t.Errorf("ParseAlgorithm's doc does not list %q", a)
		}
	}
}

// TestDocIndex checks that the package documentation's index of schedules
// has an entry for every schedule of the table.
func TestDocIndex(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	for _, s := range Schedules() {
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(s.Name) + ` \(Algo`).MatchString(doc) {
			t.Errorf("the package documentation's index has no entry for %q", s.Name)
		}
	}
}

// TestRunFallback checks that Run runs the size rules' schedule for
// AlgoAuto or a schedule that does not implement the collective, and
// fails for a collective no schedule implements.
func TestRunFallback(t *testing.T) {
	p := fakepeers.New(1, fakepeers.Options{}).Peer(0)
	src, dst := []byte{1, 2, 3, 4}, make([]byte, 4)
	if err := Run(t.Context(), OpAllReduce, AlgoLinear, &Args{Peers: p, WS: &Workspace{}, Src: src, Dst: dst, DType: Uint8, Op: Sum}); err != nil || !bytes.Equal(dst, src) {
		t.Errorf("AllReduce with linear: %v, %v", dst, err)
	}
	err := Run(t.Context(), OpSendRecv, AlgoAuto, &Args{Peers: p})
	if err == nil || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "SendRecv") {
		t.Errorf("SendRecv: %v", err)
	}
}

// blocks returns per-rank byte offsets and lengths for n equal blocks of
// blockBytes.
func blocks(n, blockBytes int) (offs, lens []int) {
	offs, lens = make([]int, n), make([]int, n)
	for i := range offs {
		offs[i], lens[i] = i*blockBytes, blockBytes
	}
	return offs, lens
}
