package tcp

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
)

// Endpoint is a peer to connect to: its rank and the address of its data
// listener.
type Endpoint struct {
	Rank int
	Addr string
}

// MeshConfig describes the connections one rank opens in Connect.
type MeshConfig struct {
	Self     int    // this rank
	Comm     uint64 // communicator id
	Epoch    uint32 // epoch the connections belong to
	Secret   []byte // communicator secret
	Streams  int    // sockets per pair (at least 1)
	Options  Options
	Listener *Listener // this rank's data listener
}

// Connect opens a Conn to every peer in peers. For each pair, the lower rank
// dials and the higher rank accepts, so both sides agree without further
// coordination; all dials and accepts proceed concurrently. If any
// connection fails, every Conn opened so far is closed and the error names
// the peer. Incoming connections for other communicators or epochs are
// refused.
func Connect(ctx context.Context, cfg MeshConfig, peers []Endpoint) (map[int]*Conn, error) {
	ns := max(cfg.Streams, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu     sync.Mutex
		socks  = map[int][]*net.TCPConn{}
		result = map[int]*Conn{}
		first  error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	// addSock takes the socket of peer's stream, or closes it and
	// reports false: after a failure, or if that stream has already
	// arrived (a broken peer dialled it twice), which must not count as
	// one of the sockets awaited.
	addSock := func(peer, stream int, tc *net.TCPConn) bool {
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			tc.Close()
			return false
		}
		s := socks[peer]
		if s == nil {
			s = make([]*net.TCPConn, ns)
			socks[peer] = s
		}
		if s[stream] != nil {
			cfg.Listener.log.Warn("occl: dropping duplicate connection", "from_rank", peer, "stream", stream, "comm", cfg.Comm, "epoch", cfg.Epoch)
			tc.Close()
			return false
		}
		s[stream] = tc
		for _, x := range s {
			if x == nil {
				return true
			}
		}
		c, err := NewConn(s, cfg.Options)
		if err != nil {
			first = fmt.Errorf("rank %d: %w", peer, err)
			cancel()
			return true
		}
		result[peer] = c
		return true
	}

	accepts := 0
	var wg sync.WaitGroup
	for _, p := range peers {
		if p.Rank == cfg.Self {
			continue
		}
		if p.Rank > cfg.Self {
			for s := 0; s < ns; s++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := Hello{Purpose: PurposeData, Comm: cfg.Comm, Epoch: cfg.Epoch, From: cfg.Self, To: p.Rank, Stream: s, NStreams: ns}
					tc, err := Dial(ctx, p.Addr, cfg.Secret, h)
					if err != nil {
						fail(fmt.Errorf("connect to rank %d at %s: %w", p.Rank, p.Addr, err))
						return
					}
					addSock(p.Rank, s, tc)
				}()
			}
		} else {
			accepts += ns
		}
	}
	if accepts > 0 {
		expect := map[int]bool{}
		for _, p := range peers {
			if p.Rank < cfg.Self {
				expect[p.Rank] = true
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := func(h Hello) bool {
				return h.Purpose == PurposeData && h.Comm == cfg.Comm && h.Epoch == cfg.Epoch && h.To == cfg.Self && expect[h.From] && h.NStreams == ns
			}
			// A peer ahead of this rank may already dial for the next
			// epoch: keep those for the next Connect. A peer whose
			// communicator failed may already dial to recover it: keep
			// those for the recovery.
			later := func(h Hello) bool {
				if h.Comm != cfg.Comm || h.To != cfg.Self {
					return false
				}
				return h.Purpose == PurposeData && h.Epoch > cfg.Epoch || h.Purpose == PurposeRecovery
			}
			for got := 0; got < accepts; {
				a, err := cfg.Listener.AcceptFor(ctx, want, later)
				if err != nil {
					fail(fmt.Errorf("accept from ranks %v: %w", missing(expect, &mu, socks, ns), err))
					return
				}
				h := a.Hello
				if addSock(h.From, h.Stream, a.Conn) {
					got++
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		for _, c := range result {
			c.Close()
		}
		for p, s := range socks {
			if result[p] == nil {
				for _, tc := range s {
					if tc != nil {
						tc.Close()
					}
				}
			}
		}
		return nil, first
	}
	return result, nil
}

// missing lists the expected ranks whose sockets have not all arrived.
func missing(expect map[int]bool, mu *sync.Mutex, socks map[int][]*net.TCPConn, ns int) []int {
	mu.Lock()
	defer mu.Unlock()
	var out []int
	for r := range expect {
		s := socks[r]
		n := 0
		for _, x := range s {
			if x != nil {
				n++
			}
		}
		if n < ns {
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out
}
