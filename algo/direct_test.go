package algo

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/algo/internal/fakepeers"
	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/transport"
)

// blockByte is the content of byte j of the block rank from sends to rank
// to.
func blockByte(from, to, j int) byte { return byte(from*37 + to*11 + j) }

func TestAllToAllPairwise(t *testing.T) {
	i := 0
	for _, p := range testRanks {
		for _, per := range []int{0, 1, 5, 1031} {
			for _, variable := range []bool{false, true} {
				net, opts := netConfig(i)
				i++
				t.Run(fmt.Sprintf("p%d/per%d/v=%v/%s", p, per, variable, net), func(t *testing.T) {
					t.Parallel()
					// size[from][to] is the length of the block from sends to.
					rng := rand.New(rand.NewPCG(uint64(p), uint64(per)))
					size := make([][]int, p)
					for a := range size {
						size[a] = make([]int, p)
						for b := range size[a] {
							size[a][b] = per
							if variable {
								size[a][b] = rng.IntN(2*per + 1)
							}
						}
					}
					checkAllToAll(t, size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
						return AllToAllPairwise(ctx, peers, b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
					})
				})
			}
		}
	}
}

// TestAllToAllPairwisePieces: blocks larger than the piece size go in
// pieces, round robin over the peers, uneven blocks and empty ones
// included, with rendezvous sends (a send waits for its receiver) and
// small queues, where a wrong order would deadlock.
func TestAllToAllPairwisePieces(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 7
	for _, p := range []int{2, 3, 4, 5} {
		for _, opts := range []fakepeers.Options{{EagerLimit: -1, HideEager: true}, {QueueDepth: 2, HideEager: true, MaxDelay: time.Millisecond}} {
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			size := make([][]int, p)
			for a := range size {
				size[a] = make([]int, p)
				for b := range size[a] {
					size[a][b] = rng.IntN(40) // 0 to 5 pieces
				}
			}
			checkAllToAll(t, size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
				return AllToAllPairwise(ctx, peers, b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
			})
		}
	}
}

// TestAllToAllPairwisePaced: a rank sends piece c of its blocks only once
// it has received piece c-1 of every peer's (c-2 between two ranks), even
// where every send is buffered and nothing else would hold the sender
// back.
func TestAllToAllPairwisePaced(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 7
	for _, tc := range []struct{ p, lead int }{{2, 2}, {3, 1}, {4, 1}} {
		const per = 5 * 7 // 5 pieces a block
		size := make([][]int, tc.p)
		for a := range size {
			size[a] = slices.Repeat([]int{per}, tc.p)
		}
		opts := fakepeers.Options{EagerLimit: 1 << 20, MaxDelay: time.Millisecond}
		checkAllToAll(t, size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
			return AllToAllPairwise(ctx, &pacedPeers{Peers: peers, t: t, lead: int64(tc.lead)}, b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
		})
	}
}

// pacedPeers checks, at every send of a uniform pairwise all-to-all in
// pieces, that the rank has received every piece of the rounds up to lead
// before the one it sends. It hides every method but Peers', so the
// exchange takes its sender goroutine.
type pacedPeers struct {
	Peers
	t    *testing.T
	lead int64
	recv atomic.Int64 // receives done
}

func (q *pacedPeers) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	round := int64(step) / int64(q.Size())
	if want := max(0, round-q.lead+1) * int64(q.Size()-1); q.recv.Load() < want {
		q.t.Errorf("%d ranks: rank %d sends round %d after %d receives, want at least %d (rounds 0 to %d)", q.Size(), q.Rank(), round, q.recv.Load(), want, round-q.lead)
	}
	return q.Peers.Send(ctx, peer, step, buf)
}

func (q *pacedPeers) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	err := q.Peers.Recv(ctx, peer, step, buf)
	q.recv.Add(1)
	return err
}

// TestAllToAllPairwiseInlineMeetsPieces: a rank whose blocks are all
// eager exchanges them inline while a rank with a larger block sends in
// pieces; a block the inline rank sends must be one message exactly when
// the pieced rank expects one piece, so no block larger than a piece goes
// inline, whatever the eager limit (shared memory's is twice a piece).
func TestAllToAllPairwiseInlineMeetsPieces(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 7
	size := [][]int{
		{0, 15, 12}, // every block within the eager limit of 20
		{15, 0, 30}, // a block above it: pieces
		{12, 30, 0},
	}
	for _, opts := range []fakepeers.Options{{EagerLimit: 20}, {EagerLimit: 20, QueueDepth: 1, MaxDelay: time.Millisecond}} {
		checkAllToAll(t, size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
			return AllToAllPairwise(ctx, peers, b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
		})
	}
}

// TestAllToAllPairwiseLentMeetsPieces: ranks that lend some blocks
// (inline), ranks that send in pieces, and blocks between the eager limit
// and the smallest lent block meet in one AllToAllV: every block travels
// whole where its sender lends it or it is at most a piece, and in pieces
// otherwise, whichever path either rank takes, so a rank that lends
// receives in pieces, and a rank that sends in pieces, or inline without
// lending, receives lent blocks whole.
func TestAllToAllPairwiseLentMeetsPieces(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 5000
	const lendMin = 12000 // and lendFloor, 4 KiB
	size := [][]int{
		{0, 3000, 20000, 0, 14000},     // eager within a piece, and lent: inline
		{10000, 0, 2000, 15000, 16000}, // 10000: neither eager nor lent: pieces
		{6000, 25000, 0, 9000, 12000},  // above a piece: pieces; two blocks lent
		{13000, 4000, 30000, 0, 20000}, // lent, or eager within a piece: inline
		{1000, 2000, 500, 3000, 0},     // eager only: inline, lending nothing, and receiving lent blocks
	}
	for _, opts := range []fakepeers.Options{{EagerLimit: 8000}, {EagerLimit: 8000, QueueDepth: 1, MaxDelay: time.Millisecond}} {
		checkAllToAll(t, size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
			return AllToAllPairwise(ctx, newLenders(peers, lendMin), b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
		})
	}
}

// a2aBufs are one rank's buffers for an all-to-all test.
type a2aBufs struct {
	send, recv, sendCopy       []byte
	sOffs, sLens, rOffs, rLens []int
}

// checkAllToAll runs an all-to-all with block sizes size[from][to] on a fake
// network through run and checks every rank's output against blockByte,
// the gaps between output blocks and that inputs are left unchanged.
func checkAllToAll(t *testing.T, size [][]int, opts fakepeers.Options, run func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error) {
	t.Helper()
	p := len(size)
	rb := make([]a2aBufs, p)
	for r := range rb {
		b := &rb[r]
		b.sOffs, b.sLens = make([]int, p), make([]int, p)
		b.rOffs, b.rLens = make([]int, p), make([]int, p)
		so, ro := 0, 0
		for q := 0; q < p; q++ {
			b.sOffs[q], b.sLens[q] = so, size[r][q]
			so += size[r][q]
			b.rOffs[q], b.rLens[q] = ro, size[q][r]
			ro += size[q][r] + 1 // a gap byte after each block
		}
		b.send = make([]byte, so)
		for q := 0; q < p; q++ {
			for j := 0; j < b.sLens[q]; j++ {
				b.send[b.sOffs[q]+j] = blockByte(r, q, j)
			}
		}
		b.sendCopy = append([]byte(nil), b.send...)
		b.recv = bytes.Repeat([]byte{0xEE}, ro)
	}
	runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
		return run(ctx, rank, peers, &rb[rank])
	})
	for r := range rb {
		b := &rb[r]
		if !bytes.Equal(b.send, b.sendCopy) {
			t.Fatalf("rank %d: send buffer modified", r)
		}
		for q := 0; q < p; q++ {
			for j := 0; j < b.rLens[q]; j++ {
				if g, w := b.recv[b.rOffs[q]+j], blockByte(q, r, j); g != w {
					t.Fatalf("rank %d block from %d byte %d: got %#x, want %#x", r, q, j, g, w)
				}
			}
			if g := b.recv[b.rOffs[q]+b.rLens[q]]; g != 0xEE {
				t.Fatalf("rank %d: gap after block %d overwritten", r, q)
			}
		}
	}
}

// blockLayout returns offsets and lengths of p blocks of per bytes (or
// random lengths up to 2*per) laid out with one-byte gaps.
func blockLayout(rng *rand.Rand, p, per int, variable bool) (offs, lens []int, total int) {
	offs, lens = make([]int, p), make([]int, p)
	for i := range offs {
		lens[i] = per
		if variable {
			lens[i] = rng.IntN(2*per + 1)
		}
		offs[i] = total
		total += lens[i] + 1
	}
	return offs, lens, total
}

func TestGatherLinear(t *testing.T) {
	i := 0
	for _, p := range testRanks {
		for _, per := range []int{0, 1, 13, 1031} {
			for _, root := range []int{0, p - 1, p / 2} {
				net, opts := netConfig(i)
				variable := i%2 == 1
				i++
				t.Run(fmt.Sprintf("p%d/per%d/root%d/v=%v/%s", p, per, root, variable, net), func(t *testing.T) {
					t.Parallel()
					offs, lens, total := blockLayout(rand.New(rand.NewPCG(uint64(p), uint64(per))), p, per, variable)
					want := bytes.Repeat([]byte{0xEE}, total)
					for b := 0; b < p; b++ {
						for j := 0; j < lens[b]; j++ {
							want[offs[b]+j] = blockByte(b, root, j)
						}
					}
					bufs := make([][]byte, p)
					for r := range bufs {
						bufs[r] = bytes.Repeat([]byte{0xEE}, total)
						copy(bufs[r][offs[r]:offs[r]+lens[r]], want[offs[r]:])
					}
					runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
						return GatherLinear(ctx, peers, bufs[rank], offs, lens, root)
					})
					if d := firstDiff(bufs[root], want, 1); d != "" {
						t.Fatalf("root %d: %s", root, d)
					}
				})
			}
		}
	}
}

func TestScatterLinear(t *testing.T) {
	i := 0
	for _, p := range testRanks {
		for _, per := range []int{0, 1, 13, 1031} {
			for _, root := range []int{0, p - 1, p / 2} {
				net, opts := netConfig(i)
				variable := i%2 == 0
				i++
				t.Run(fmt.Sprintf("p%d/per%d/root%d/v=%v/%s", p, per, root, variable, net), func(t *testing.T) {
					t.Parallel()
					offs, lens, total := blockLayout(rand.New(rand.NewPCG(uint64(p), uint64(per))), p, per, variable)
					src := make([]byte, total)
					for b := 0; b < p; b++ {
						for j := 0; j < lens[b]; j++ {
							src[offs[b]+j] = blockByte(root, b, j)
						}
					}
					outs := make([][]byte, p)
					for r := range outs {
						outs[r] = make([]byte, lens[r])
					}
					runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
						var data []byte
						if rank == root {
							data = src
						}
						return ScatterLinear(ctx, peers, data, offs, lens, root, outs[rank])
					})
					for r := range outs {
						if d := firstDiff(outs[r], src[offs[r]:offs[r]+lens[r]], 1); d != "" {
							t.Fatalf("rank %d: %s", r, d)
						}
					}
				})
			}
		}
	}
}

func TestBarrierDissemination(t *testing.T) {
	for _, p := range testRanks {
		for j, c := range netConfigs {
			t.Run(fmt.Sprintf("p%d/%s", p, c.name), func(t *testing.T) {
				t.Parallel()
				const rounds = 5
				var entered [rounds]atomic.Int32
				runRanks(t, p, c.opts, func(ctx context.Context, rank int, peers Peers) error {
					for k := 0; k < rounds; k++ {
						// The last rank to arrive is late on purpose.
						if rank == (k+j)%p {
							time.Sleep(2 * time.Millisecond)
						}
						entered[k].Add(1)
						if err := BarrierDissemination(ctx, peers); err != nil {
							return err
						}
						if n := entered[k].Load(); int(n) != p {
							return fmt.Errorf("rank %d left barrier %d when only %d of %d ranks had entered", rank, k, n, p)
						}
					}
					return nil
				})
			})
		}
	}
}

func TestSendRecv(t *testing.T) {
	for _, c := range netConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Every rank sends a large message to the next and receives from
			// the previous at the same time: sequential blocking sends would
			// deadlock on the rendezvous network.
			for _, p := range []int{2, 3, 5} {
				for _, n := range []int{0, 1, 100, 1 << 16} {
					bufs := make([][]byte, p)
					runRanks(t, p, c.opts, func(ctx context.Context, rank int, peers Peers) error {
						send := bytes.Repeat([]byte{byte(rank + 1)}, n)
						recv := make([]byte, n)
						to, from := (rank+1)%p, (rank+p-1)%p
						if err := SendRecv(ctx, peers, to, 7, send, from, 7, recv); err != nil {
							return err
						}
						bufs[rank] = recv
						return nil
					})
					for r, b := range bufs {
						if want := bytes.Repeat([]byte{byte((r+p-1)%p + 1)}, n); !bytes.Equal(b, want) {
							t.Fatalf("p=%d n=%d rank %d: wrong data", p, n, r)
						}
					}
				}
			}
		})
	}
}

// TestSendRecvError checks that a failed receive does not leave the send
// hanging and that the receive error is the one reported.
func TestSendRecvError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	nw := fakepeers.New(2, fakepeers.Options{EagerLimit: -1})
	p0 := nw.Peer(0)
	errc := make(chan error, 1)
	go func() {
		// Rank 1 sends a message of the wrong length and never receives.
		errc <- nw.Peer(1).Send(ctx, 0, 1, make([]byte, 10))
	}()
	err := SendRecv(ctx, p0, 1, 1, make([]byte, 1<<10), 1, 1, make([]byte, 20))
	if err == nil {
		t.Fatal("SendRecv succeeded on a length mismatch")
	}
	t.Log(err)
	if err := <-errc; err != nil {
		t.Fatalf("peer send: %v", err)
	}
	if len(nw.Errors()) != 1 {
		t.Fatalf("network recorded %d errors, want 1", len(nw.Errors()))
	}
}

// sendsFirst records, for an all-to-all on one rank, how many sends had
// completed when its first receive started. A schedule may send from a
// goroutine of its own while it receives: the counts are guarded.
type sendsFirst struct {
	Peers
	mu                       sync.Mutex
	sent, atFirstRecv, recvs int
}

func (s *sendsFirst) EagerLimit(peer int) int { return s.Peers.(EagerPeers).EagerLimit(peer) }

func (s *sendsFirst) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	err := s.Peers.Send(ctx, peer, step, buf)
	s.count()
	return err
}

// count counts a completed send (or a lend).
func (s *sendsFirst) count() {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
}

func (s *sendsFirst) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	s.mu.Lock()
	if s.recvs == 0 {
		s.atFirstRecv = s.sent
	}
	s.recvs++
	s.mu.Unlock()
	return s.Peers.Recv(ctx, peer, step, buf)
}

// TestAllToAllOneProcessorInline: in a process with one processor, an
// all-to-all whose blocks are above 64 KiB but fit the connections' eager
// limit sends them all inline before it receives (no goroutine, which
// could not overlap the copies there); the result is checked as for every
// all-to-all.
func TestAllToAllOneProcessorInline(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	testAllToAllInline(t, func(p Peers) Peers { return p })
}

// TestAllToAllOneCPUInline: the same for a rank whose peers say it has one
// CPU's worth (algo.CPUPeers), whatever the process's GOMAXPROCS: a rank
// sharing its machine with others.
func TestAllToAllOneCPUInline(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	testAllToAllInline(t, func(p Peers) Peers { return cpuPeers{p.(*sendsFirst), 1} })
}

// cpuPeers reports n CPUs for the rank of the Peers it wraps.
type cpuPeers struct {
	*sendsFirst
	n int
}

func (c cpuPeers) CPUs() int { return c.n }

// testAllToAllInline checks that an all-to-all on the Peers wrap makes of
// each rank's sends all its sends before its first receive.
func testAllToAllInline(t *testing.T, wrap func(Peers) Peers) {
	const p, per = 4, 200 << 10
	size := make([][]int, p)
	for a := range size {
		size[a] = make([]int, p)
		for b := range size[a] {
			size[a][b] = per
		}
	}
	rec := make([]*sendsFirst, p)
	checkAllToAll(t, size, fakepeers.Options{EagerLimit: 1 << 20}, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
		rec[rank] = &sendsFirst{Peers: peers}
		return AllToAllPairwise(ctx, wrap(rec[rank]), b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
	})
	for r, s := range rec {
		if s.atFirstRecv != p-1 {
			t.Errorf("rank %d: %d of %d sends done when the first receive started, want all (inline)", r, s.atFirstRecv, p-1)
		}
	}
}

// TestAllToAllPairwiseInPlace: an in-place all-to-all whose blocks all go
// by the eager path runs on its buffer as it is, without a copy of its
// input in the workspace and without lending any block (the peers would
// copy them out of a buffer the receives overwrite), and gives every rank
// its blocks. The blocks are
// uneven and the output layout is the input's in reverse order, so the own
// block's destination covers blocks still to be sent: copied before the
// sends, it would overwrite them.
func TestAllToAllPairwiseInPlace(t *testing.T) {
	im := implOf(OpAllToAllV, AlgoPairwise)
	for _, p := range []int{2, 3, 4} {
		rng := rand.New(rand.NewPCG(uint64(p), 11))
		size := make([][]int, p)
		for a := range size {
			size[a] = make([]int, p)
			for b := range size[a] {
				size[a][b] = rng.IntN(6000)
			}
		}
		size[0][1] = 0 // an empty block
		bufs := make([][]byte, p)
		args := make([]Args, p)
		for r := range p {
			a := &args[r]
			a.SendOffs, a.SendLens = make([]int, p), make([]int, p)
			a.RecvOffs, a.RecvLens = make([]int, p), make([]int, p)
			so, ro := 0, 0
			for q := range p {
				a.SendOffs[q], a.SendLens[q] = so, size[r][q]
				so += size[r][q]
			}
			for q := p - 1; q >= 0; q-- {
				a.RecvOffs[q], a.RecvLens[q] = ro, size[q][r]
				ro += size[q][r]
			}
			bufs[r] = make([]byte, max(so, ro))
			for q := range p {
				for j := range a.SendLens[q] {
					bufs[r][a.SendOffs[q]+j] = blockByte(r, q, j)
				}
			}
			a.Src, a.Dst, a.WS = bufs[r], bufs[r], &Workspace{}
		}
		lent := make([]*lenders, p)
		runRanks(t, p, fakepeers.Options{EagerLimit: 8 << 10}, func(ctx context.Context, rank int, peers Peers) error {
			a := &args[rank]
			lent[rank] = newLenders(peers, lendFloor)
			a.Peers = lent[rank]
			return im.Run(ctx, a)
		})
		for r := range p {
			a := &args[r]
			checkReceived(t, fmt.Sprintf("p %d rank %d", p, r), bufs[r], a, r)
			if len(lent[r].lent) > 0 {
				t.Errorf("p %d rank %d: blocks lent out of a buffer the receives overwrite: %v", p, r, lent[r].lent)
			}
			if len(a.WS.slots) > SlotInput && a.WS.slots[SlotInput] != nil {
				t.Errorf("p %d rank %d: the input was copied to the workspace (%d bytes)", p, r, len(a.WS.slots[SlotInput]))
			}
		}
	}
}

// TestAllToAllPairwiseInPlacePieces: an in-place all-to-all whose blocks
// go in pieces runs on its buffer through two staging areas of a piece per
// peer, not a copy of its input, with rendezvous sends (a send waits for
// its receiver) and small queues, where staging too late would read
// received bytes and a wrong order would deadlock. It lends nothing, even
// through peers that lend (out of place, blocks of 4 KiB and more would
// be). With nothing lent, its messages are the out-of-place exchange's:
// ranks in place and out of place meet in one all-to-all (mixed). Blocks
// are uneven (symmetric: rank a sends rank b as much as b sends a) and
// some empty.
func TestAllToAllPairwiseInPlacePieces(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 500
	im := implOf(OpAllToAllV, AlgoPairwise)
	for _, p := range []int{2, 3, 4, 5} {
		// Rendezvous sends and hidden eager limits stage the pieces
		// (pairwiseInPlacePieces); an eager limit of a piece sends them
		// from the buffer (exchangePieces), the queue of one
		// message making every send wait for the piece before it to be
		// taken.
		for oi, opts := range []fakepeers.Options{{EagerLimit: -1}, {QueueDepth: 2, HideEager: true, MaxDelay: time.Millisecond}, {EagerLimit: 500, QueueDepth: 1, MaxDelay: time.Millisecond}} {
			for _, mode := range []string{"in place", "in place, lenders", "mixed"} {
				mixed := mode == "mixed"
				if mode == "in place, lenders" && opts.HideEager {
					continue // lenders need the eager limits
				}
				rng := rand.New(rand.NewPCG(uint64(p), uint64(oi)))
				size := make([][]int, p)
				for a := range size {
					size[a] = make([]int, p)
				}
				for a := range p {
					for b := a; b < p; b++ {
						n := rng.IntN(5500) // 0 to 11 pieces
						size[a][b], size[b][a] = n, n
					}
				}
				size[0][1], size[1][0] = 0, 0
				bufs, outs := make([][]byte, p), make([][]byte, p)
				args := make([]Args, p)
				for r := range p {
					a := &args[r]
					a.SendOffs, a.SendLens = make([]int, p), make([]int, p)
					off := 0
					for q := range p {
						a.SendOffs[q], a.SendLens[q] = off, size[r][q]
						off += size[r][q]
					}
					a.RecvOffs, a.RecvLens = a.SendOffs, a.SendLens
					bufs[r] = make([]byte, off)
					for q := range p {
						for j := range a.SendLens[q] {
							bufs[r][a.SendOffs[q]+j] = blockByte(r, q, j)
						}
					}
					outs[r] = bufs[r]
					if mixed && r%2 == 1 {
						outs[r] = make([]byte, off)
					}
					a.Src, a.Dst, a.WS = bufs[r], outs[r], &Workspace{}
				}
				lent := make([]*lenders, p)
				runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
					a := &args[rank]
					a.Peers = peers
					if mode == "in place, lenders" {
						lent[rank] = newLenders(peers, 1)
						a.Peers = lent[rank]
					}
					return im.Run(ctx, a)
				})
				for r := range p {
					a := &args[r]
					checkReceived(t, fmt.Sprintf("p %d options %d %s: rank %d", p, oi, mode, r), outs[r], a, r)
					if lent[r] != nil && len(lent[r].lent) > 0 {
						t.Errorf("p %d rank %d: blocks lent out of a buffer the receives overwrite: %v", p, r, lent[r].lent)
					}
					// The workspace rounds up (to 4 KiB, or by a quarter):
					// more is a copy of the input (up to 27.5 KB here), not
					// two staging areas of a piece per peer.
					if same(a.Src, a.Dst) && len(a.WS.slots) > SlotInput && cap(a.WS.slots[SlotInput]) > max(4096, 2*(p-1)*pairwiseChunk*5/4) {
						t.Errorf("p %d rank %d: %d bytes staged in the workspace for a %d-byte buffer, want at most two pieces per peer (%d)", p, r, cap(a.WS.slots[SlotInput]), len(a.Src), 2*(p-1)*pairwiseChunk)
					}
				}
			}
		}
	}
}

// checkReceived checks that out holds, at a's receive offsets, every
// rank's block for rank r (blockByte).
func checkReceived(t *testing.T, what string, out []byte, a *Args, r int) {
	t.Helper()
	for q := range a.RecvLens {
		for j := range a.RecvLens[q] {
			if g, w := out[a.RecvOffs[q]+j], blockByte(q, r, j); g != w {
				t.Fatalf("%s: block from %d byte %d: got %#x, want %#x", what, q, j, g, w)
			}
		}
	}
}

// lenders is LendPeers over a fake network: Lend sends from a goroutine of
// its own, so that it returns before the receiver takes the block, after
// the blocks lent before to the same peer (a connection keeps their
// order), and Settle waits for those sends. It records what the schedule did: how many
// blocks were posted (lent or sent) when the first receive started, which
// peers were lent to and which settled.
type lenders struct {
	sendsFirst
	min  int
	wg   map[int]*sync.WaitGroup
	last map[int]chan struct{} // closed once the last block lent to the peer is sent
	// ahead counts the lends since this rank's last receive; maxAhead is
	// its largest value. Both under mu: a schedule may lend from a
	// goroutine of its own while it receives.
	ahead, maxAhead int
	// whole: LendsWhole says yes to every message, and Lend lends
	// below min (a transport whose buffers the receiver maps, or that
	// lends whole payloads from a lower threshold).
	whole bool
	// wholeMin, if not 0, is the smallest message taken whole that
	// LendsWhole lends, above min (a transport whose rings beat lending
	// for whole blocks that a ring's chunks would still lend).
	wholeMin int
	// ringMin, if not 0, is the smallest message taken whole that
	// LendsWhole does not lend (a transport whose rings beat lending for
	// blocks that do not stay in the cache), unless whole is set.
	ringMin       int
	mu            sync.Mutex
	err           error
	lent, settled map[int]int
	// sends are the lengths of the messages sent to each peer (not
	// lent), under mu.
	sends map[int][]int
}

func newLenders(p Peers, min int) *lenders {
	return &lenders{sendsFirst: sendsFirst{Peers: p}, min: min, wg: map[int]*sync.WaitGroup{}, last: map[int]chan struct{}{}, lent: map[int]int{}, settled: map[int]int{}}
}

func (l *lenders) LendMin(int) int { return l.min }

// LentMin is every peer's LendMin: the ranks of a test lend alike.
func (l *lenders) LentMin(int) int { return l.min }

// LendsWhole implements WholeLendPeers: every message where whole is set,
// otherwise those of wholeMin bytes or more (min where wholeMin is 0).
func (l *lenders) LendsWhole(_ int, buf []byte) bool {
	if l.ringMin > 0 && len(buf) >= l.ringMin && !l.whole {
		return false
	}
	if l.wholeMin > 0 {
		return l.whole || len(buf) >= l.wholeMin
	}
	return l.whole || len(buf) >= l.min
}

func (l *lenders) Lend(ctx context.Context, peer int, step uint32, buf []byte) error {
	if len(buf) < l.min && !l.whole {
		return fmt.Errorf("lend of %d bytes below %d", len(buf), l.min)
	}
	wg := l.wg[peer]
	if wg == nil {
		wg = &sync.WaitGroup{}
		l.wg[peer] = wg
	}
	l.lent[peer]++
	l.count()
	l.mu.Lock()
	l.ahead++
	l.maxAhead = max(l.maxAhead, l.ahead)
	l.mu.Unlock()
	before, sent := l.last[peer], make(chan struct{})
	l.last[peer] = sent
	wg.Go(func() {
		defer close(sent)
		if before != nil {
			<-before
		}
		if err := l.Peers.Send(ctx, peer, step, buf); err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
		}
	})
	return nil
}

func (l *lenders) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	l.mu.Lock()
	if l.sends == nil {
		l.sends = map[int][]int{}
	}
	l.sends[peer] = append(l.sends[peer], len(buf))
	l.mu.Unlock()
	return l.sendsFirst.Send(ctx, peer, step, buf)
}

func (l *lenders) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	l.mu.Lock()
	l.ahead = 0
	l.mu.Unlock()
	return l.sendsFirst.Recv(ctx, peer, step, buf)
}

func (l *lenders) Settle(ctx context.Context, peer int) error {
	l.settled[peer]++
	if wg := l.wg[peer]; wg != nil {
		wg.Wait()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// TestAllToAllPairwiseLendsWhole: peers that lend blocks of 1 MiB or
// more, and smaller ones where their receivers take them whole
// (WholeLendPeers),
// lend such blocks from lendFloor up to a piece, not larger ones, which
// their receivers expect in pieces; inline (every other block eager) and
// not; every rank gets its blocks and settles every peer it lent to.
func TestAllToAllPairwiseLendsWhole(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 7000
	const p = 4
	for _, sizes := range [][]int{{0, 1000, 5000}, {0, 1000, 5000, 20000}} {
		rng := rand.New(rand.NewPCG(4, uint64(len(sizes))))
		size := make([][]int, p)
		for a := range size {
			size[a] = make([]int, p)
			for b := range size[a] {
				size[a][b] = sizes[rng.IntN(len(sizes))]
			}
		}
		rec := make([]*lenders, p)
		checkAllToAll(t, size, fakepeers.Options{EagerLimit: 8 << 10}, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
			rec[rank] = newLenders(peers, 1<<20)
			rec[rank].whole = true
			return AllToAllPairwise(ctx, rec[rank], b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
		})
		for r, l := range rec {
			for to, n := range size[r] {
				want := 0
				if to != r && n >= lendFloor && n <= pairwiseChunk {
					want = 1
				}
				if l.lent[to] != want {
					t.Errorf("sizes %v: rank %d lent %d blocks of %d bytes to rank %d, want %d", sizes, r, l.lent[to], n, to, want)
				}
				if want == 1 && l.settled[to] != 1 {
					t.Errorf("sizes %v: rank %d settled rank %d %d times, want once", sizes, r, to, l.settled[to])
				}
			}
		}
	}
}

// TestAllToAllPairwiseWholeAboveLendMin: peers that lend from 4 KiB but
// lend messages their receivers take whole only from 6000 bytes send the
// blocks of 4 KiB to 6000 bytes, up to a piece, through their buffers,
// lend those from 6000 bytes, and lend the blocks larger than a piece by
// their size, which their receivers expect (lentFrom); every rank gets
// its blocks and settles every peer it lent to.
func TestAllToAllPairwiseWholeAboveLendMin(t *testing.T) {
	size, rec := lendFourSizes(t, [4]int{1000, 5000, 6500, 20000}, func(l *lenders) { l.wholeMin = 6000 })
	seen := map[int]bool{}
	for r, l := range rec {
		for to, n := range size[r] {
			if to == r {
				continue
			}
			seen[n] = true
			want := 0
			if n >= 6000 {
				want = 1
			}
			if l.lent[to] != want || l.settled[to] != want {
				t.Errorf("rank %d to %d (%d bytes): lent %d, settled %d times, want %d", r, to, n, l.lent[to], l.settled[to], want)
			}
		}
	}
	if len(seen) != 4 {
		t.Fatalf("the sizes drawn cover %v, want all four", seen)
	}
}

// lendFourSizes runs AllToAllPairwise at 4 ranks, pieces of 7000 bytes
// and an eager limit of 8 KiB, over lenders that lend from 4 KiB and that
// set adjusts; rank a sends rank b a block of sizes[(a+b)%4] bytes. It
// returns the block sizes and each rank's lenders.
func lendFourSizes(t *testing.T, sizes [4]int, set func(*lenders)) ([][]int, []*lenders) {
	t.Helper()
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 7000
	const p = 4
	size := make([][]int, p)
	for a := range size {
		size[a] = make([]int, p)
		for b := range size[a] {
			size[a][b] = sizes[(a+b)%4]
		}
	}
	rec := make([]*lenders, p)
	checkAllToAll(t, size, fakepeers.Options{EagerLimit: 8 << 10}, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
		rec[rank] = newLenders(peers, 4<<10)
		set(rec[rank])
		return AllToAllPairwise(ctx, rec[rank], b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
	})
	return size, rec
}

// TestAllToAllPairwiseWholeThroughRing: peers that lend from 4 KiB, but
// not the blocks taken whole from 25000 bytes (WholeLendPeers: a
// transport whose rings beat lending for blocks that do not stay in the
// cache), send those whole, in one message, not in pieces, and lend the
// others from 4 KiB, those larger than a piece included; every rank gets
// its blocks and settles only the peers it lent to.
func TestAllToAllPairwiseWholeThroughRing(t *testing.T) {
	size, rec := lendFourSizes(t, [4]int{1000, 5000, 20000, 30000}, func(l *lenders) { l.ringMin = 25000 })
	for r, l := range rec {
		for to, n := range size[r] {
			if to == r {
				continue
			}
			lent, sends := 0, []int{n}
			if n >= 4<<10 && n < 25000 {
				lent, sends = 1, nil
			}
			if l.lent[to] != lent || l.settled[to] != lent {
				t.Errorf("rank %d to %d (%d bytes): lent %d, settled %d times, want %d", r, to, n, l.lent[to], l.settled[to], lent)
			}
			if !slices.Equal(l.sends[to], sends) {
				t.Errorf("rank %d to %d (%d bytes): sent messages of %v bytes, want %v", r, to, n, l.sends[to], sends)
			}
		}
	}
}

// viewers shows every received message to the schedule (ViewPeers) in
// pieces of 4099 bytes, from a buffer of its own, as a ring shows its
// bytes where they lie; views counts the messages so shown.
type viewers struct {
	Peers
	views atomic.Int32
}

func (v *viewers) RecvView(ctx context.Context, peer int, step uint32, buf []byte, align int, use transport.Consumer) error {
	msg := make([]byte, len(buf))
	if err := v.Recv(ctx, peer, step, msg); err != nil {
		return err
	}
	v.views.Add(1)
	for off := 0; off < len(msg); off += 4099 {
		use.Consume(off, msg[off:min(off+4099, len(msg))])
	}
	return nil
}

// TestAllToAllPairwiseStreamsLargeBlocks: where the connections can show a
// message where it lies (ViewPeers), the pieces of blocks that do not stay
// in the cache (memcopy.Streams) are copied from there to their place;
// smaller blocks are received as they are. Every rank gets its blocks.
func TestAllToAllPairwiseStreamsLargeBlocks(t *testing.T) {
	large := memcopy.StreamMin() + 1000
	size := [][]int{{10, large}, {large, 3000}}
	views := make([]*viewers, 2)
	checkAllToAll(t, size, fakepeers.Options{EagerLimit: 1 << 20}, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
		views[rank] = &viewers{Peers: peers}
		return AllToAllPairwise(ctx, views[rank], b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
	})
	for r, v := range views {
		if got, want := int(v.views.Load()), pieces(large); got != want {
			t.Errorf("rank %d: %d messages shown where they lie, want the %d pieces of the %d-byte block", r, got, want, large)
		}
	}
	small := [][]int{{10, 3000}, {5000, 3000}}
	checkAllToAll(t, small, fakepeers.Options{EagerLimit: 1 << 20}, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
		views[rank] = &viewers{Peers: peers}
		return AllToAllPairwise(ctx, views[rank], b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
	})
	for r, v := range views {
		if got := v.views.Load(); got != 0 {
			t.Errorf("rank %d: %d small blocks shown where they lie, want them received", r, got)
		}
	}
}

// TestAllToAllPairwiseLends: with peers that lend blocks of 5000 bytes or
// more, an all-to-all whose other blocks are eager runs inline: every block
// posted before the first receive, the large ones lent (one above the eager
// limit), every peer lent to settled once, and every rank gets its blocks.
func TestAllToAllPairwiseLends(t *testing.T) {
	const p = 4
	rng := rand.New(rand.NewPCG(4, 13))
	size := make([][]int, p)
	for a := range size {
		size[a] = make([]int, p)
		for b := range size[a] {
			size[a][b] = []int{0, 1000, 5000, 9000}[rng.IntN(4)]
		}
	}
	rec := make([]*lenders, p)
	checkAllToAll(t, size, fakepeers.Options{EagerLimit: 8 << 10}, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
		rec[rank] = newLenders(peers, 5000)
		return AllToAllPairwise(ctx, rec[rank], b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
	})
	for r, l := range rec {
		posts := 0
		for to, n := range size[r] {
			if to == r || n == 0 {
				continue
			}
			posts++
			want := 0
			if n >= 5000 {
				want = 1
			}
			if l.lent[to] != want || l.settled[to] != want {
				t.Errorf("rank %d to %d (%d bytes): lent %d, settled %d times, want %d", r, to, n, l.lent[to], l.settled[to], want)
			}
		}
		if l.recvs > 0 && l.atFirstRecv != posts {
			t.Errorf("rank %d: %d of %d blocks posted when the first receive started, want all (inline)", r, l.atFirstRecv, posts)
		}
	}
}

// duplexCount counts a rank's duplex exchanges; with hide it is a rank
// whose connection is not duplex (DuplexMax 0).
type duplexCount struct {
	DuplexPeers
	n    *atomic.Int64
	hide bool
}

func (d duplexCount) EagerLimit(peer int) int { return d.DuplexPeers.(EagerPeers).EagerLimit(peer) }

func (d duplexCount) DuplexMax(peer int) int {
	if d.hide {
		return 0
	}
	return d.DuplexPeers.DuplexMax(peer)
}

func (d duplexCount) Exchange(ctx context.Context, peer int, sstep uint32, sbuf []byte, rstep uint32, rbuf []byte) error {
	d.n.Add(1)
	return d.DuplexPeers.Exchange(ctx, peer, sstep, sbuf, rstep, rbuf)
}

// TestAllToAllPairwiseDuplex: two ranks whose connection is duplex
// exchange blocks of at most a piece in one Exchange each, on their
// calling goroutine, and larger ones as every pair does; a block one way
// only is a Send or a Recv; and a rank whose connection is not duplex
// meets one whose is, the messages being the same either way.
func TestAllToAllPairwiseDuplex(t *testing.T) {
	defer func(c int) { pairwiseChunk = c }(pairwiseChunk)
	pairwiseChunk = 7
	for _, tc := range []struct {
		name string
		size [][]int
		hide [2]bool
		want [2]int64
	}{
		{"both ways", [][]int{{1, 5}, {6, 2}}, [2]bool{}, [2]int64{1, 1}},
		{"one way", [][]int{{0, 5}, {0, 0}}, [2]bool{}, [2]int64{0, 0}},
		{"above a piece", [][]int{{0, 20}, {3, 0}}, [2]bool{}, [2]int64{0, 0}},
		{"one rank duplex", [][]int{{0, 7}, {4, 0}}, [2]bool{false, true}, [2]int64{1, 0}},
	} {
		for _, opts := range []fakepeers.Options{
			{EagerLimit: -1, DuplexMax: 7},
			{EagerLimit: 3, QueueDepth: 1, MaxDelay: time.Millisecond, DuplexMax: 7},
		} {
			var n [2]atomic.Int64
			checkAllToAll(t, tc.size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
				d := duplexCount{peers.(DuplexPeers), &n[rank], tc.hide[rank]}
				return AllToAllPairwise(ctx, d, b.send, b.sOffs, b.sLens, b.recv, b.rOffs, b.rLens)
			})
			for r := range n {
				if g := n[r].Load(); g != tc.want[r] {
					t.Errorf("%s, eager limit %d: rank %d made %d exchanges, want %d", tc.name, opts.EagerLimit, r, g, tc.want[r])
				}
			}
		}
	}
}
