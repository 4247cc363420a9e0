// Package fakepeers is an in-process network of ranks for testing
// collective schedules.
//
// Each ordered pair of ranks has a FIFO queue. Receives check the step label
// and the exact length of every message and report a mismatch as an error
// (and record it in the Network, so a test can assert none happened even if
// a schedule swallowed the error). Messages up to an eager limit are copied
// and buffered; larger ones block the sender until the receiver has copied
// them out (rendezvous), as on a real transport with bounded buffers, so a
// schedule that would deadlock on TCP deadlocks here too. Random delays can
// be injected before every Send and Recv to shake out ordering bugs.
//
// The delays are drawn from a seeded generator, one stream per link and
// direction, so a seed fixes the delays every Send and Recv sleeps. The
// seed is Options.Seed, else the value of OCCL_FAKEPEERS_SEED, else a
// random one; Run's errors name it, so that a failure can be rerun with
// the same delays (the goroutine interleaving is still the scheduler's).
//
// The package does not import algo; *Peer has the method set of
// algo.Peers, algo.EagerPeers, algo.ViewPeers and algo.DuplexPeers.
package fakepeers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/transport"
)

// Options configure a Network.
type Options struct {
	// EagerLimit is the largest message, in bytes, that Send buffers and
	// returns from without waiting for the receiver. Larger messages are
	// handed over in a rendezvous. Zero buffers only empty messages; a
	// negative limit makes every message a rendezvous.
	EagerLimit int
	// QueueDepth is the number of messages that may be queued from one
	// rank to another before Send blocks (default 1024).
	QueueDepth int
	// MaxDelay, when positive, makes each Send and Recv sleep for a random
	// duration below MaxDelay, with probability DelayProb (default 0.25),
	// before it starts.
	MaxDelay  time.Duration
	DelayProb float64
	// HideEager makes Run hand out peers without the EagerLimit method, so
	// that schedules take their generic paths.
	HideEager bool
	// Seed seeds the random delays; zero takes NewSeed's.
	Seed uint64
	// DuplexMax is the largest message Exchange moves (what DuplexMax
	// returns); 0 leaves Exchange to schedules that never ask.
	DuplexMax int
}

// SeedEnv is the environment variable that fixes the seed of networks
// whose Options.Seed is zero.
const SeedEnv = "OCCL_FAKEPEERS_SEED"

// NewSeed returns the value of SeedEnv if it is set (it panics if that is
// not a non-zero unsigned integer), else a random non-zero seed.
func NewSeed() uint64 {
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil || s == 0 {
			panic(fmt.Sprintf("fakepeers: %s=%q: want a non-zero unsigned integer", SeedEnv, v))
		}
		return s
	}
	return rand.Uint64() | 1
}

// Peers is the method set of algo.Peers.
type Peers interface {
	Rank() int
	Size() int
	Send(ctx context.Context, peer int, step uint32, buf []byte) error
	Recv(ctx context.Context, peer int, step uint32, buf []byte) error
}

// Network is a set of n ranks connected pairwise.
type Network struct {
	n     int
	opts  Options
	links []*link // links[from*n+to]
	peers []*Peer

	mu   sync.Mutex
	errs []error
}

// Message states.
const (
	pending int32 = iota
	taken
	abandoned
)

type msg struct {
	step       uint32
	data       []byte // the payload: own (eager) or the sender's buffer
	own        []byte
	rendezvous bool
	ack        chan struct{} // rendezvous: receiver has copied the payload

	mu    sync.Mutex
	state int32
}

type link struct {
	q    chan *msg
	free chan *msg
	// Step+1 of a Send or Recv blocked on this link, 0 when none; for
	// diagnosing deadlocks.
	sending, receiving atomic.Int64
	// The delay streams of the sender and the receiver; at most one
	// goroutine sends on a link at a time, and one receives.
	sendRand, recvRand *rand.Rand
}

func (l *link) get() *msg {
	select {
	case m := <-l.free:
		return m
	default:
		return &msg{ack: make(chan struct{}, 1)}
	}
}

func (l *link) put(m *msg) {
	m.data = nil
	select {
	case l.free <- m:
	default:
	}
}

// New returns a network of n ranks.
func New(n int, opts Options) *Network {
	if opts.QueueDepth <= 0 {
		opts.QueueDepth = 1024
	}
	if opts.DelayProb <= 0 {
		opts.DelayProb = 0.25
	}
	if opts.Seed == 0 {
		opts.Seed = NewSeed()
	}
	nw := &Network{n: n, opts: opts, links: make([]*link, n*n), peers: make([]*Peer, n)}
	for i := range nw.links {
		nw.links[i] = &link{
			q:        make(chan *msg, opts.QueueDepth),
			free:     make(chan *msg, opts.QueueDepth),
			sendRand: rand.New(rand.NewPCG(opts.Seed, uint64(2*i))),
			recvRand: rand.New(rand.NewPCG(opts.Seed, uint64(2*i+1))),
		}
	}
	for i := range nw.peers {
		nw.peers[i] = &Peer{net: nw, rank: i}
	}
	return nw
}

// Seed returns the seed of the network's random delays.
func (nw *Network) Seed() uint64 { return nw.opts.Seed }

// Peer returns rank i's view of the network.
func (nw *Network) Peer(i int) *Peer { return nw.peers[i] }

// Peers returns the view of every rank, indexed by rank. With
// Options.HideEager the peers do not implement EagerLimit.
func (nw *Network) Peers() []Peers {
	ps := make([]Peers, nw.n)
	for i, p := range nw.peers {
		if nw.opts.HideEager {
			ps[i] = plain{p}
		} else {
			ps[i] = p
		}
	}
	return ps
}

// Errors returns the protocol errors seen so far: step or length
// mismatches, messages abandoned by their sender.
func (nw *Network) Errors() []error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return append([]error(nil), nw.errs...)
}

func (nw *Network) record(err error) error {
	nw.mu.Lock()
	nw.errs = append(nw.errs, err)
	nw.mu.Unlock()
	return err
}

// Blocked describes every Send and Recv currently waiting, e.g. "rank 2
// recv step 3 from rank 1"; after a timeout it shows where ranks are stuck.
func (nw *Network) Blocked() []string {
	var out []string
	for from := 0; from < nw.n; from++ {
		for to := 0; to < nw.n; to++ {
			l := nw.links[from*nw.n+to]
			if s := l.sending.Load(); s != 0 {
				out = append(out, fmt.Sprintf("rank %d send step %d to rank %d", from, s-1, to))
			}
			if s := l.receiving.Load(); s != 0 {
				out = append(out, fmt.Sprintf("rank %d recv step %d from rank %d", to, s-1, from))
			}
		}
	}
	return out
}

// Undelivered describes messages that were sent but never received, e.g.
// "rank 0 -> rank 1: 2 messages (first step 4)". It must only be called
// once every rank has returned.
func (nw *Network) Undelivered() []string {
	var out []string
	for from := 0; from < nw.n; from++ {
		for to := 0; to < nw.n; to++ {
			l := nw.links[from*nw.n+to]
			if k := len(l.q); k > 0 {
				m := <-l.q
				out = append(out, fmt.Sprintf("rank %d -> rank %d: %d messages (first step %d, %d bytes)", from, to, k, m.step, len(m.data)))
			}
		}
	}
	return out
}

// Peer is one rank's view of a Network. It implements algo.Peers and
// algo.EagerPeers.
type Peer struct {
	net  *Network
	rank int
}

// Rank returns this rank.
func (p *Peer) Rank() int { return p.rank }

// Size returns the number of ranks.
func (p *Peer) Size() int { return p.net.n }

// EagerLimit returns Options.EagerLimit (at least -1).
func (p *Peer) EagerLimit(peer int) int { return max(p.net.opts.EagerLimit, -1) }

// draw returns the next delay of the stream r: zero, or with probability
// DelayProb a duration below MaxDelay.
func (p *Peer) draw(r *rand.Rand) time.Duration {
	o := &p.net.opts
	if o.MaxDelay > 0 && r.Float64() < o.DelayProb {
		return time.Duration(r.Int64N(int64(o.MaxDelay)))
	}
	return 0
}

// delay sleeps for the next delay of the stream r.
func (p *Peer) delay(r *rand.Rand) {
	if d := p.draw(r); d > 0 {
		time.Sleep(d)
	}
}

func (p *Peer) check(op string, peer int) error {
	if peer < 0 || peer >= p.net.n {
		return p.net.record(fmt.Errorf("fakepeers: rank %d: %s peer %d out of range [0, %d)", p.rank, op, peer, p.net.n))
	}
	if peer == p.rank {
		return p.net.record(fmt.Errorf("fakepeers: rank %d: %s to itself", p.rank, op))
	}
	return nil
}

// Send sends buf to peer as message step. Messages up to the eager limit
// are copied and Send returns at once (unless the queue is full); larger
// ones are copied by the receiver and Send returns once it has.
func (p *Peer) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	if err := p.check("send", peer); err != nil {
		return err
	}
	l := p.net.links[p.rank*p.net.n+peer]
	p.delay(l.sendRand)
	l.sending.Store(int64(step) + 1)
	defer l.sending.Store(0)

	m := l.get()
	m.step = step
	m.state = pending
	m.rendezvous = len(buf) > p.net.opts.EagerLimit
	if m.rendezvous {
		m.data = buf
	} else {
		m.own = append(m.own[:0], buf...)
		m.data = m.own
	}
	select {
	case l.q <- m:
	case <-ctx.Done():
		return fmt.Errorf("fakepeers: rank %d: send step %d to rank %d: %w", p.rank, step, peer, ctx.Err())
	}
	if !m.rendezvous {
		return nil
	}
	select {
	case <-m.ack:
		l.put(m)
		return nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	if m.state == taken {
		m.mu.Unlock()
		<-m.ack
		l.put(m)
		return nil
	}
	m.state = abandoned
	m.mu.Unlock()
	return fmt.Errorf("fakepeers: rank %d: send step %d (%d bytes) to rank %d not received: %w", p.rank, step, len(buf), peer, ctx.Err())
}

// DuplexMax returns Options.DuplexMax.
func (p *Peer) DuplexMax(peer int) int { return p.net.opts.DuplexMax }

// Exchange sends sbuf to peer as message sstep while it receives message
// rstep from peer into rbuf, as a duplex connection does. Messages
// longer than Options.DuplexMax are refused.
func (p *Peer) Exchange(ctx context.Context, peer int, sstep uint32, sbuf []byte, rstep uint32, rbuf []byte) error {
	if n := max(len(sbuf), len(rbuf)); n > p.net.opts.DuplexMax {
		return p.net.record(fmt.Errorf("fakepeers: rank %d: exchange of %d bytes with rank %d over the duplex limit of %d", p.rank, n, peer, p.net.opts.DuplexMax))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		err := p.Send(ctx, peer, sstep, sbuf)
		if err != nil {
			cancel()
		}
		sent <- err
	}()
	err := p.Recv(ctx, peer, rstep, rbuf)
	if err != nil {
		cancel()
	}
	if e := <-sent; err == nil {
		err = e
	}
	return err
}

// Recv receives the next message from peer into buf. It fails if that
// message is not labelled step or is not exactly len(buf) bytes long.
func (p *Peer) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	return p.recv(ctx, peer, step, buf, func(data []byte) { copy(buf, data) })
}

// RecvView receives as Recv does but hands the payload to use where it
// lies, in pieces cut at random multiples of align (as a ring's end and
// its producer's progress cut a shared-memory connection's), and never
// writes buf.
func (p *Peer) RecvView(ctx context.Context, peer int, step uint32, buf []byte, align int, use transport.Consumer) error {
	rnd := p.net.links[peer*p.net.n+p.rank].recvRand
	return p.recv(ctx, peer, step, buf, func(data []byte) {
		for off := 0; off < len(data); {
			k := len(data) - off
			if k > align && rnd.IntN(2) == 0 {
				k = align * (1 + rnd.IntN((k-1)/align))
			}
			use.Consume(off, data[off:off+k])
			off += k
		}
	})
}

// recv receives the next message from peer, for buf, and hands its
// payload to take if it is labelled step and has len(buf) bytes.
func (p *Peer) recv(ctx context.Context, peer int, step uint32, buf []byte, take func(data []byte)) error {
	if err := p.check("recv", peer); err != nil {
		return err
	}
	l := p.net.links[peer*p.net.n+p.rank]
	p.delay(l.recvRand)
	l.receiving.Store(int64(step) + 1)
	defer l.receiving.Store(0)

	var m *msg
	select {
	case m = <-l.q:
	case <-ctx.Done():
		return fmt.Errorf("fakepeers: rank %d: recv step %d (%d bytes) from rank %d: %w", p.rank, step, len(buf), peer, ctx.Err())
	}
	var err error
	m.mu.Lock()
	switch {
	case m.state == abandoned:
		err = fmt.Errorf("fakepeers: rank %d: recv step %d from rank %d: sender gave up on the message", p.rank, step, peer)
	case m.step != step:
		err = fmt.Errorf("fakepeers: rank %d: recv from rank %d: got step %d (%d bytes), want step %d (%d bytes)", p.rank, peer, m.step, len(m.data), step, len(buf))
	case len(m.data) != len(buf):
		err = fmt.Errorf("fakepeers: rank %d: recv step %d from rank %d: got %d bytes, want %d", p.rank, step, peer, len(m.data), len(buf))
	default:
		take(m.data)
	}
	abandonedMsg := m.state == abandoned
	m.state = taken
	m.mu.Unlock()
	if m.rendezvous {
		if !abandonedMsg {
			m.ack <- struct{}{}
		}
	} else {
		l.put(m)
	}
	if err != nil {
		return p.net.record(err)
	}
	return nil
}

// plain hides EagerLimit and RecvView.
type plain struct{ p *Peer }

func (q plain) Rank() int { return q.p.Rank() }
func (q plain) Size() int { return q.p.Size() }
func (q plain) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	return q.p.Send(ctx, peer, step, buf)
}
func (q plain) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	return q.p.Recv(ctx, peer, step, buf)
}

// Run builds a network of n ranks and calls fn for every rank in its own
// goroutine. When a rank fails the context passed to the others is
// cancelled. Run returns nil only if every rank returned nil, the network
// saw no protocol error and no message was left undelivered; otherwise the
// error names the first failure and, after a timeout, where every rank was
// blocked.
func Run(ctx context.Context, n int, opts Options, fn func(ctx context.Context, rank int, p Peers) error) error {
	nw := New(n, opts)
	return nw.Run(ctx, fn)
}

// Run calls fn for every rank of nw, as the package-level Run does.
func (nw *Network) Run(ctx context.Context, fn func(ctx context.Context, rank int, p Peers) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	peers := nw.Peers()
	errs := make([]error, nw.n)
	var (
		wg      sync.WaitGroup
		once    sync.Once
		first   = -1
		blocked []string
	)
	for i := range nw.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if v := recover(); v != nil {
					errs[i] = fmt.Errorf("rank %d panicked: %v\n%s", i, v, debug.Stack())
				}
				if errs[i] != nil {
					once.Do(func() {
						first = i
						blocked = nw.Blocked()
						cancel()
					})
				}
			}()
			errs[i] = fn(ctx, i, peers[i])
		}()
	}
	wg.Wait()

	var out []error
	if first >= 0 {
		out = append(out, fmt.Errorf("rank %d failed first: %w", first, errs[first]))
		if len(blocked) > 0 {
			out = append(out, fmt.Errorf("blocked when it failed: %s", strings.Join(blocked, "; ")))
		}
		for i, err := range errs {
			if err != nil && i != first && !errors.Is(err, context.Canceled) {
				out = append(out, fmt.Errorf("rank %d: %w", i, err))
			}
		}
	}
	for _, err := range nw.Errors() {
		out = append(out, fmt.Errorf("protocol error: %w", err))
	}
	if first < 0 {
		if u := nw.Undelivered(); len(u) > 0 {
			out = append(out, fmt.Errorf("undelivered messages: %s", strings.Join(u, "; ")))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return fmt.Errorf("fakepeers network of %d ranks, seed %d (%s=%d repeats its delays): %w", nw.n, nw.opts.Seed, SeedEnv, nw.opts.Seed, errors.Join(out...))
}
