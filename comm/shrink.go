package comm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/occl/occl/comm/internal/agree"
	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport/tcp"
)

// Shrink replaces the communicator by one without the ranks that failed
// and the ranks in exclude, like ncclCommShrink and MPI's
// MPIX_Comm_shrink. It is collective over the survivors: every rank of c
// that is not in exclude and has not failed must call it, with the same
// exclude, typically after an operation returned a *PeerError, or on a
// healthy communicator to drop ranks on purpose. The ranks in exclude do
// not call it (their communicator fails; they close it).
//
// Shrink first lets the operations this rank issued on c finish, as
// ncclCommShrink does by default: on a failed c they have failed already
// (their buffers hold undefined data); on a healthy c they complete, so
// that a collective followed by Shrink is not lost on a slower rank. Issue
// nothing on c once Shrink is called. Once the survivors have agreed, c
// ends on every rank (as with NCCL_SHRINK_ABORT): the excluded ranks'
// operations, and any later one, fail with ErrAborted. The survivors agree
// on who is left: the ranks named by c's failure, those in exclude and
// those that cannot be reached are out, and a rank that is alive is waited
// for until it calls Shrink (or ctx ends). The agreement needs more than
// half of the ranks not in exclude (or exactly half, with the lowest of
// them): a minority cut off from the others never forms a communicator of
// its own. Then the survivors bootstrap the new communicator: its ranks
// are the survivors in the order of their ranks in c (so rank 0 is the
// lowest survivor), its identity and secret are derived from c's and from
// the agreement, so nothing sent in c can reach it, its connections are
// new, and it has c's options, c's topology narrowed to the survivors and
// their fabric ranks. If a survivor's process dies after the agreement
// decided, the others find it gone during the bootstrap (connecting to its
// listeners is refused; they check every 100 ms), the bootstrap fails at
// once with a *PeerError naming it, and the agreement runs again without
// it, well within a second. A survivor that stops answering without
// going away (a stopped process, a host cut off) is waited for: the
// bootstrap fails within twice the heartbeat timeout, at least 5 s, and
// the agreement runs again. Shrinks counts the shrinks since Init.
// c is closed when Shrink returns; closing it again is harmless.
//
// A rank the others excluded, that the communicator's failure names (a
// rank that was stopped and resumes), that finds no quorum, or that cannot
// finish the agreement before ctx ends, gets an error wrapping
// ErrExcluded and no communicator; it never hangs past ctx (or, without a
// deadline, the configured timeout).
//
// Communicators made by Split from c are not rebuilt: they fail on their
// own when they use a failed rank. Split the new communicator again. What
// the application kept about ranks (rank numbers, sizes, shards of data
// held by the lost ranks) is its to recompute.
//
// In-process communicators (NewLocal) shrink the same way, except that
// the survivors meet in the process: a rank is alive until it closes or
// aborts its communicator, and no quorum is needed.
func (c *Communicator) Shrink(ctx context.Context, exclude []int) (*Communicator, error) {
	const name = "Shrink"
	opErr := func(err error) error { return &OpError{Rank: c.rank, Op: name, Err: err} }
	for _, r := range exclude {
		if r < 0 || r >= c.size {
			return nil, opErr(invalidf("rank %d to exclude is out of range for size %d", r, c.size))
		}
		if r == c.rank {
			return nil, opErr(invalidf("rank %d excludes itself; excluded ranks do not call Shrink", r))
		}
	}
	if c.queue.closed() || c.shrinking.Swap(true) {
		return nil, opErr(fmt.Errorf("%w: Shrink needs a communicator neither closed nor shrunk already", ErrClosed))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	start := time.Now()
	log := logx.For(c.log, logx.Init)

	// c ends on every rank once the survivors agreed (or this rank gave
	// up); its data listener serves the agreement until then.
	end := func() {
		if c.failure.err() == nil {
			pe := &PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted, Reason: "shrinking the communicator"}
			c.ctrl.report(pe)
			c.fail(pe)
		}
	}
	defer c.shutdown(context.Background(), false)
	defer end()
	if c.failure.err() == nil {
		if err := c.queue.idle(ctx); err != nil {
			return nil, opErr(fmt.Errorf("%w: the operations issued before Shrink did not finish: %w", ErrExcluded, err))
		}
	}
	var suspects []int
	if pe := c.failure.err(); pe != nil && pe.Kind == ErrPeerFailed && pe.Peer >= 0 {
		suspects = []int{pe.Peer}
	}
	if lk, ok := c.linker.(*localLinker); ok {
		nc, err := lk.g.shrink(ctx, c, exclude, suspects)
		end()
		if err != nil {
			return nil, opErr(err)
		}
		nc.shrinks = c.shrinks + 1
		nc.inheritObserver(c)
		return nc, nil
	}
	lk := c.linker.(*tcpLinker)

	rec := newRecovery(ctx, c, lk, exclude, log)
	defer rec.close()
	ballot := uint32(1)
	for {
		d, err := rec.agree(ctx, suspects, ballot)
		end()
		if err != nil {
			return nil, opErr(err)
		}
		log.Info("occl: survivors agreed", "members", d.Members, "coordinator", d.Coordinator, "ballot", d.Ballot)
		if afterDecision != nil {
			afterDecision()
		}
		nc, err := rec.bootstrap(ctx, d)
		if err == nil {
			nc.shrinks = c.shrinks + 1
			nc.inheritObserver(c)
			log.Info("occl: communicator shrunk", "old_rank", c.rank, "old_size", c.size,
				"new_rank", nc.rank, "new_size", nc.size, "elapsed", time.Since(start).Round(time.Millisecond))
			return nc, nil
		}
		if ctx.Err() != nil || rec.m.Ballot() >= uint32(c.size) {
			return nil, opErr(fmt.Errorf("%w: the new communicator of ranks %v did not form: %w", ErrExcluded, d.Members, err))
		}
		log.Warn("occl: the shrunk communicator did not form; agreeing again", "members", d.Members, "err", err)
		suspects, ballot = rec.m.Suspects(), rec.m.Ballot()+1
		if pe := (*PeerError)(nil); errors.As(err, &pe) && pe.Kind == ErrPeerFailed && d.Has(pe.Peer) && !slices.Contains(suspects, pe.Peer) {
			// A member whose process is gone: the others find it too.
			suspects = append(suspects, pe.Peer)
		}
	}
}

// Shrinks returns how many times Shrink made this communicator's lineage
// smaller since Init (0 for a communicator made by Init or Split).
func (c *Communicator) Shrinks() int { return int(c.shrinks) }

// afterPropose, if set (by tests), runs once this rank's proposal is sent.
var afterPropose func()

// afterDecision, if set (by tests), runs once the agreement decided that
// this rank is a member, before the bootstrap of the new communicator.
var afterDecision func()

// recovery runs one rank's side of a shrink's agreement (package agree)
// over recovery connections through the data listeners: a proposer dials
// its coordinator's, the coordinator answers on that connection. The
// failure detector probes the ranks the machine watches, every heartbeat
// interval (tcp.PurposeProbe, answered by the listener's handshake, so
// that it works before the rank calls Shrink and leaves nothing behind):
// a rank whose listener is gone refuses at once, a stopped one does not
// finish the handshake within the heartbeat timeout.
type recovery struct {
	c       *Communicator
	lk      *tcpLinker
	exclude []int
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	events  chan recEvent
	wg      sync.WaitGroup

	// Owned by the goroutine running agree and bootstrap.
	m       *agree.Machine
	in      map[int]*inConn // the last connection each proposer opened to this rank
	out     *outConn        // to the current coordinator
	pinging map[int]bool
	done    *agree.Decision
	why     string   // Excluded: the reason
	decided wire.Msg // the decision as received (nonce, rendezvous address)
	rootLn  *tcp.Listener
}

// recEvent is what the connections and the failure detector report to the
// agreement.
type recEvent struct {
	ev   agree.Event
	in   *inConn  // the connection a Propose, or a proposer's Lost, came on
	out  *outConn // the connection a Decide, or the coordinator's Lost, came on
	msg  wire.Msg // Decide: the message
	ping int      // the rank a failure-detector check was about (-1: none)
	ok   bool     // the check's outcome
}

type inConn struct {
	rank     int
	conn     *tcp.Conn
	prop     *wire.Msg // the proposal it carried
	answered bool
}

type outConn struct {
	to     int
	cancel context.CancelFunc
	mu     sync.Mutex
	conn   *tcp.Conn
}

func newRecovery(ctx context.Context, c *Communicator, lk *tcpLinker, exclude []int, log *slog.Logger) *recovery {
	r := &recovery{c: c, lk: lk, exclude: exclude, log: log, events: make(chan recEvent),
		in: map[int]*inConn{}, pinging: map[int]bool{}}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(1)
	go r.acceptLoop()
	return r
}

// close stops every goroutine and closes every connection of the
// agreement.
func (r *recovery) close() {
	r.cancel()
	for _, ic := range r.in {
		ic.conn.Close()
	}
	r.dropOut()
	if r.rootLn != nil {
		r.rootLn.Close()
	}
	r.wg.Wait()
}

func (r *recovery) post(e recEvent) {
	select {
	case r.events <- e:
	case <-r.ctx.Done():
	}
}

func (r *recovery) hello(to int) tcp.Hello {
	return tcp.Hello{Purpose: tcp.PurposeRecovery, Comm: r.c.id, From: r.c.rank, To: to, NStreams: 1}
}

// acceptLoop takes the recovery connections to this rank and reads the
// proposals on them.
func (r *recovery) acceptLoop() {
	defer r.wg.Done()
	c := r.c
	want := func(h tcp.Hello) bool {
		return h.Purpose == tcp.PurposeRecovery && h.Comm == c.id && h.To == c.rank && h.From >= 0 && h.From < c.size
	}
	for {
		a, err := r.lk.ln.AcceptFor(r.ctx, want, nil)
		if err != nil {
			return
		}
		conn, err := tcp.NewConn([]*net.TCPConn{a.Conn}, tcp.Options{})
		if err != nil {
			a.Conn.Close()
			continue
		}
		ic := &inConn{rank: a.Hello.From, conn: conn}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				m, _, err := recvMsg(r.ctx, conn, nil)
				if err != nil {
					conn.Close()
					r.post(recEvent{ev: agree.Event{Kind: agree.Lost, From: ic.rank}, in: ic, ping: -1})
					return
				}
				if m.Type == wire.ShrinkPropose && m.Rank == ic.rank {
					r.post(recEvent{ev: agree.Event{Kind: agree.Propose, From: ic.rank, Ballot: m.Ballot, Suspects: m.List}, in: ic, msg: m, ping: -1})
				}
			}
		}()
	}
}

// agree runs the agreement from suspects at ballot and returns the
// decision if this rank is a member.
func (r *recovery) agree(ctx context.Context, suspects []int, ballot uint32) (agree.Decision, error) {
	c := r.c
	r.dropOut() // the connection of an earlier round's proposal
	r.m = agree.New(c.rank, c.size, r.exclude, suspects, ballot)
	r.done, r.why = nil, ""
	r.apply(r.m.Start())
	// Proposals this rank held, unanswered, from an earlier round.
	for rank, ic := range r.in {
		if ic.answered {
			ic.conn.Close()
			delete(r.in, rank)
		} else if ic.prop != nil && !r.m.Over() {
			r.apply(r.m.Step(agree.Event{Kind: agree.Propose, From: rank, Ballot: ic.prop.Ballot, Suspects: ic.prop.List}))
		}
	}
	tick := time.NewTicker(c.cfg.heartbeat)
	defer tick.Stop()
	r.detect()
	for !r.m.Over() {
		select {
		case e := <-r.events:
			r.handle(e)
		case <-tick.C:
			r.detect()
		case <-ctx.Done():
			return agree.Decision{}, fmt.Errorf("%w: no agreement before the deadline (coordinator rank %d, ballot %d): %w",
				ErrExcluded, r.m.Coordinator(), r.m.Ballot(), ctx.Err())
		}
	}
	if r.done == nil {
		return agree.Decision{}, fmt.Errorf("%w: %s", ErrExcluded, r.why)
	}
	return *r.done, nil
}

// handle steps the machine with what a connection or the detector said.
func (r *recovery) handle(e recEvent) {
	switch {
	case e.ping >= 0:
		r.pinging[e.ping] = false
		if !e.ok && slices.Contains(r.m.Watched(), e.ping) {
			r.log.Info("occl: shrink: rank unreachable", "peer", e.ping)
			r.apply(r.m.Step(agree.Event{Kind: agree.Lost, From: e.ping}))
		}
	case e.in != nil && e.ev.Kind == agree.Propose:
		if old := r.in[e.in.rank]; old != nil && old != e.in {
			old.conn.Close()
		}
		m := e.msg
		e.in.prop = &m
		r.in[e.in.rank] = e.in
		r.apply(r.m.Step(e.ev))
	case e.in != nil:
		// A proposer's connection closed: it left (or died).
		if r.in[e.in.rank] != e.in || e.in.answered {
			return
		}
		delete(r.in, e.in.rank)
		r.apply(r.m.Step(e.ev))
	case e.out != nil:
		if e.out != r.out {
			return
		}
		if e.ev.Kind == agree.Decide {
			r.decided = e.msg
		}
		r.apply(r.m.Step(e.ev))
	}
}

// detect checks, in the background, that the ranks the machine watches
// are still alive.
func (r *recovery) detect() {
	for _, w := range r.m.Watched() {
		if r.pinging[w] {
			continue
		}
		r.pinging[w] = true
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.heartbeatTimeout)
			defer cancel()
			h := r.hello(w)
			h.Purpose = tcp.PurposeProbe
			tc, err := tcp.DialOnce(ctx, r.lk.addrs[w], r.lk.secret[:], h)
			if err == nil {
				tc.Close()
			} else if r.ctx.Err() != nil {
				return
			}
			r.post(recEvent{ping: w, ok: err == nil})
		}()
	}
}

// apply carries out the machine's actions.
func (r *recovery) apply(acts []agree.Action) {
	for _, a := range acts {
		switch a.Kind {
		case agree.SendPropose:
			r.propose(a.To, a.Ballot, a.Suspects)
		case agree.Leave:
			if r.out != nil && r.out.to == a.To {
				r.dropOut()
			}
		case agree.SendDecide:
			r.sendDecision(a)
		case agree.Done:
			d := a.Decision
			r.done = &d
		case agree.Excluded:
			r.why = a.Reason
		}
	}
}

func (r *recovery) dropOut() {
	if r.out == nil {
		return
	}
	r.out.cancel()
	r.out.mu.Lock()
	if r.out.conn != nil {
		r.out.conn.Close()
	}
	r.out.mu.Unlock()
	r.out = nil
}

// propose opens a recovery connection to rank to, sends the proposal and
// waits there for the decision.
func (r *recovery) propose(to int, ballot uint32, suspects []int) {
	r.dropOut()
	ctx, cancel := context.WithCancel(r.ctx)
	oc := &outConn{to: to, cancel: cancel}
	r.out = oc
	r.log.Info("occl: shrink: proposing", "coordinator", to, "ballot", ballot, "suspects", suspects)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		lost := func(err error) {
			if ctx.Err() == nil {
				r.log.Info("occl: shrink: lost the coordinator", "coordinator", to, "err", err)
			}
			r.post(recEvent{ev: agree.Event{Kind: agree.Lost, From: to}, out: oc, ping: -1})
		}
		dctx, dcancel := context.WithTimeout(ctx, r.c.cfg.heartbeatTimeout)
		tc, err := tcp.DialOnce(dctx, r.lk.addrs[to], r.lk.secret[:], r.hello(to))
		dcancel()
		if err != nil {
			lost(err)
			return
		}
		conn, err := tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{})
		if err != nil {
			tc.Close()
			lost(err)
			return
		}
		oc.mu.Lock()
		if ctx.Err() != nil {
			oc.mu.Unlock()
			conn.Close()
			return
		}
		oc.conn = conn
		oc.mu.Unlock()
		m := wire.Msg{Type: wire.ShrinkPropose, Rank: r.c.rank, Ballot: ballot, List: suspects}
		if err := sendMsg(ctx, conn, &m); err != nil {
			lost(err)
			return
		}
		if afterPropose != nil {
			afterPropose()
		}
		for {
			d, _, err := recvMsg(ctx, conn, nil)
			if err != nil {
				lost(err)
				return
			}
			if d.Type == wire.ShrinkDecide && d.Rank == to {
				r.post(recEvent{ev: agree.Event{Kind: agree.Decide, From: to, Ballot: d.Ballot,
					Decision: agree.Decision{Coordinator: d.Rank, Ballot: d.Epoch, Members: d.List}}, out: oc, msg: d, ping: -1})
				return
			}
		}
	}()
}

// sendDecision binds the new communicator's rendezvous (if there is one)
// and tells the ranks that proposed to this rank what it decided.
func (r *recovery) sendDecision(a agree.Action) {
	d := a.Decision
	m := wire.Msg{Type: wire.ShrinkDecide, Rank: r.c.rank, Epoch: d.Ballot, List: d.Members}
	if len(d.Members) > 0 {
		if _, err := rand.Read(m.Nonce[:]); err != nil {
			panic(fmt.Sprintf("occl: crypto/rand: %v", err)) // cannot happen since Go 1.24
		}
		id := r.newID(d, m.Nonce, "")
		host, _, _ := net.SplitHostPort(r.lk.ln.Addr().String())
		ln, err := tcp.Listen(net.JoinHostPort(host, "0"), id.Secret[:],
			listenFilter(tcp.PurposeRendezvous, commIDOf(id)), r.log)
		if err != nil {
			// The members will not find the rendezvous, and agree again.
			r.log.Warn("occl: shrink: rendezvous listener", "err", err)
		} else {
			r.rootLn = ln
			m.Text = ln.Addr().String()
		}
	}
	r.decided = m
	for _, to := range a.Recipients {
		ic := r.in[to.Rank]
		if ic == nil {
			continue
		}
		ic.answered = true
		m.Ballot = to.Ballot
		ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.heartbeatTimeout)
		if err := sendMsg(ctx, ic.conn, &m); err != nil {
			r.log.Info("occl: shrink: decision not delivered", "peer", to.Rank, "err", err)
		}
		cancel()
	}
}

// newID is the new communicator's identity: its secret, and so its id,
// derive from c's secret and from the decision.
func (r *recovery) newID(d agree.Decision, nonce [16]byte, addr string) UniqueID {
	h := sha256.New()
	h.Write(r.lk.secret[:])
	h.Write([]byte("occl-shrink"))
	binary.Write(h, binary.LittleEndian, r.c.id)
	binary.Write(h, binary.LittleEndian, uint64(d.Coordinator))
	binary.Write(h, binary.LittleEndian, d.Ballot)
	for _, m := range d.Members {
		binary.Write(h, binary.LittleEndian, uint64(m))
	}
	h.Write(nonce[:])
	id := UniqueID{Addr: addr}
	copy(id.Secret[:], h.Sum(nil))
	return id
}

// bootstrap makes the new communicator of d's members, as Init does, its
// rendezvous served by the coordinator. A member whose process is gone
// makes it fail at once, with a *PeerError naming it (goneWatch); one that
// does not join otherwise, within the bootstrap timeout.
func (r *recovery) bootstrap(ctx context.Context, d agree.Decision) (*Communicator, error) {
	c := r.c
	self, _ := slices.BinarySearch(d.Members, c.rank)
	id := r.newID(d, r.decided.Nonce, r.decided.Text)
	rootLn := r.rootLn
	r.rootLn = nil // initTCP owns it now
	if id.Addr == "" {
		return nil, fmt.Errorf("coordinator rank %d has no rendezvous for the new communicator", d.Coordinator)
	}
	cfg := c.cfg
	cfg.fabricRanks = nil // given apart: the topology is subset already
	// Survivors waiting to recover should not wait for every new ring to
	// be populated: its pages are mapped as they are first touched.
	cfg.lazyRings = true
	if c.cfg.topology != nil {
		cfg.topology = c.cfg.topology.Subset(d.Members)
	}
	bctx, cancel := context.WithTimeout(ctx, max(2*c.cfg.heartbeatTimeout, 5*time.Second))
	defer cancel()
	b, err := newTCPBootstrap(id, self, len(d.Members), cfg)
	if err != nil {
		if rootLn != nil {
			rootLn.Close()
		}
		return nil, err
	}
	b.what = "shrink"
	b.gone = &goneWatch{self: self, members: d.Members, oldRank: c.rank, oldComm: c.id,
		oldSecret: r.lk.secret[:], oldAddrs: r.lk.addrs, timeout: c.cfg.heartbeatTimeout, interval: goneProbeInterval, rate: goneProbeRate}
	return b.run(bctx, rootLn, c.groupFabricRanks(d.Members))
}
