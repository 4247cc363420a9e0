package comm

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/tcp"
)

// controlPlane keeps the ranks of a communicator in agreement about
// failures, so that every rank reports the same error.
type controlPlane interface {
	// report shares a failure detected on this rank with every rank.
	report(pe *PeerError)
	// lost says the link to peer broke; the verdict on who failed
	// arrives through Communicator.fail.
	lost(peer int, err error)
	// stalled asks for a probe of collective seq (see probe.go).
	stalled(seq uint64)
	// close leaves the control plane; clean says the communicator is
	// healthy and its peers should not treat the departure as a failure.
	close(ctx context.Context, clean bool) error
}

// Failure kinds on the wire.
const (
	kindPeerFailed uint8 = 1
	kindAborted    uint8 = 2
	kindMismatch   uint8 = 3
	kindTimeout    uint8 = 4
	kindLost       uint8 = 5 // report only: a link broke
)

func kindOf(err error) uint8 {
	switch err {
	case ErrAborted:
		return kindAborted
	case ErrMismatch:
		return kindMismatch
	case ErrTimeout:
		return kindTimeout
	}
	return kindPeerFailed
}

func errOfKind(k uint8) error {
	switch k {
	case kindAborted:
		return ErrAborted
	case kindMismatch:
		return ErrMismatch
	case kindTimeout:
		return ErrTimeout
	}
	return ErrPeerFailed
}

// ---- in-process control plane ----

// localControl joins the communicators of one in-process group: a failure
// on one is delivered to all at once.
type localControl struct {
	mu      sync.Mutex
	members []*Communicator
	verdict *PeerError // the first failure reported; every rank gets it
	// reported is the last collective a stall report was logged for.
	reported uint64
}

// broadcast fails every member with the first failure ever reported, as
// the TCP root does: a rank that sees a link break because a peer already
// failed must not race its own, secondary, report to the others.
func (l *localControl) broadcast(pe *PeerError) {
	l.mu.Lock()
	if l.verdict == nil {
		l.verdict = pe
	}
	pe = l.verdict
	ms := append([]*Communicator(nil), l.members...)
	l.mu.Unlock()
	for _, m := range ms {
		if m != nil {
			m.fail(pe)
		}
	}
}

// localMember is one rank's handle on a localControl.
type localMember struct {
	l    *localControl
	rank int
}

func (m *localMember) report(pe *PeerError) { m.l.broadcast(pe) }

func (m *localMember) lost(peer int, err error) {
	m.l.broadcast(&PeerError{Peer: peer, Reporter: m.rank, Kind: ErrPeerFailed, Reason: err.Error()})
}

func (m *localMember) stalled(seq uint64) {
	m.l.mu.Lock()
	answers := make([]wire.Msg, len(m.l.members))
	for r, c := range m.l.members {
		if c != nil {
			answers[r] = c.hist.answer(seq)
		}
	}
	m.l.mu.Unlock()
	if pe := judge(seq, answers); pe != nil {
		m.l.broadcast(pe)
		return
	}
	if text := describeStall(seq, answers); text != "" {
		m.l.mu.Lock()
		if seq <= m.l.reported {
			// Reported already: the other ranks' watchdogs fire too.
			m.l.mu.Unlock()
			return
		}
		m.l.reported = seq
		ms := append([]*Communicator(nil), m.l.members...)
		m.l.mu.Unlock()
		for _, c := range ms {
			if c != nil && c.Err() == nil {
				logx.For(c.log, logx.Coll).Warn("occl: "+text, "seq", seq)
			}
		}
	}
}

func (m *localMember) close(context.Context, bool) error {
	m.l.mu.Lock()
	m.l.members[m.rank] = nil
	m.l.mu.Unlock()
	return nil
}

// ---- TCP control plane ----

// The TCP control plane is a star around rank 0, over the connections the
// rendezvous opened. Every rank sends heartbeats to the root and hears the
// root's; a rank whose connection drops without a goodbye, or that stays
// silent past the heartbeat timeout, is declared failed. Ranks report what
// they detect (a broken link, a mismatch, a timeout, an abort); the root
// turns the first report into a verdict and sends it to every rank, so all
// ranks fail with the same error. If the root itself dies, every rank sees
// its connection drop and blames rank 0.
//
// The decisions are ctrlRoot's and ctrlMember's (control_state.go); the
// types below are their shells: they read the connections, tick the
// heartbeats, run the timers and carry out the actions.

// ctrlClient is one rank's end of the control plane.
type ctrlClient struct {
	comm   *Communicator
	conn   *tcp.Conn
	wmu    sync.Mutex
	server *ctrlServer // on rank 0 only
	hb     time.Duration
	hbTO   time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	sm      *ctrlMember
	verdict chan struct{} // closed when the root's verdict arrives
	done    chan struct{}
	wg      sync.WaitGroup
}

func newCtrlClient(rank int, conn *tcp.Conn, server *ctrlServer, cfg config, log *slog.Logger) *ctrlClient {
	return &ctrlClient{conn: conn, server: server, hb: cfg.heartbeat, hbTO: cfg.heartbeatTimeout, log: logx.For(log, logx.Net),
		sm: newCtrlMember(rank, time.Now(), cfg.heartbeatTimeout), verdict: make(chan struct{}), done: make(chan struct{})}
}

// start begins heartbeats and listening for verdicts on behalf of c.
func (cl *ctrlClient) start(c *Communicator) {
	cl.comm = c
	cl.wg.Add(2)
	go cl.readLoop()
	go cl.heartbeatLoop()
}

// handle steps the state machine with ev and carries out its actions; it
// says whether this rank is leaving now.
func (cl *ctrlClient) handle(ev ctrlEvent) (leave bool) {
	cl.mu.Lock()
	acts := cl.sm.step(ev)
	cl.mu.Unlock()
	for _, a := range acts {
		switch a.Kind {
		case actSend:
			if err := cl.send(&a.Msg); err != nil {
				cl.log.Debug("occl: control message to rank 0 failed", "msg", describeMsg(&a.Msg), "err", err)
			}
		case actFail:
			cl.comm.fail(a.Fail)
		case actAnswer:
			st := cl.comm.hist.answer(a.Seq)
			if err := cl.send(&st); err != nil {
				cl.log.Debug("occl: probe answer to rank 0 failed", "err", err)
			}
		case actLeave:
			leave = true
		case actStallReport:
			logx.For(cl.comm.log, logx.Coll).Warn("occl: "+a.Msg.Text, "seq", a.Seq)
		case actVerdict:
			close(cl.verdict) // given once
		}
	}
	return leave
}

func (cl *ctrlClient) send(m *wire.Msg) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cl.hbTO)
	defer cancel()
	return sendMsg(ctx, cl.conn, m)
}

func (cl *ctrlClient) readLoop() {
	defer cl.wg.Done()
	var buf []byte
	for {
		m, b, err := recvMsg(context.Background(), cl.conn, buf)
		buf = b
		if err != nil {
			cl.handle(ctrlEvent{Kind: evConnLost, From: 0, Err: err.Error(), Now: time.Now()})
			return
		}
		cl.handle(ctrlEvent{Kind: evRecv, From: 0, Msg: m, Now: time.Now()})
	}
}

func (cl *ctrlClient) heartbeatLoop() {
	defer cl.wg.Done()
	t := time.NewTicker(cl.hb)
	defer t.Stop()
	for {
		select {
		case <-cl.done:
			return
		case now := <-t.C:
			cl.handle(ctrlEvent{Kind: evTick, Now: now})
		}
	}
}

func (cl *ctrlClient) report(pe *PeerError) {
	cl.handle(ctrlEvent{Kind: evReport, Fail: pe, Now: time.Now()})
}

func (cl *ctrlClient) lost(peer int, err error) {
	cl.handle(ctrlEvent{Kind: evLinkLost, Peer: peer, Err: err.Error(), Now: time.Now()})
}

func (cl *ctrlClient) stalled(seq uint64) {
	cl.handle(ctrlEvent{Kind: evStalled, Seq: seq, Now: time.Now()})
}

func (cl *ctrlClient) close(ctx context.Context, clean bool) error {
	if cl.server != nil {
		// Rank 0 closing right after it reported a failure (a Shrink
		// aborting the old communicator, an Abort) first lets the root's
		// verdict reach the others, bounded by the heartbeat timeout.
		cl.mu.Lock()
		wait := cl.sm.awaitsVerdict()
		cl.mu.Unlock()
		if wait {
			t := time.NewTimer(cl.hbTO)
			select {
			case <-cl.verdict:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
	if !cl.handle(ctrlEvent{Kind: evClose, Clean: clean, Now: time.Now()}) {
		return nil
	}
	var err error
	if cl.server != nil {
		err = cl.server.close(ctx, clean)
	}
	close(cl.done)
	cl.conn.Close()
	cl.wg.Wait()
	return err
}

// ctrlServer is the root of the control plane, on rank 0.
type ctrlServer struct {
	hb, hbTO time.Duration
	log      *slog.Logger
	conns    []*tcp.Conn
	wmu      []sync.Mutex

	mu      sync.Mutex
	sm      *ctrlRoot
	timers  []*time.Timer
	sending sync.WaitGroup // messages being delivered
	allLeft chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

func newCtrlServer(conns []*tcp.Conn, cfg config, log *slog.Logger) *ctrlServer {
	n := len(conns)
	s := &ctrlServer{
		hb: cfg.heartbeat, hbTO: cfg.heartbeatTimeout, log: logx.For(log, logx.Net),
		conns: conns, wmu: make([]sync.Mutex, n),
		sm:      newCtrlRoot(n, time.Now(), cfg.heartbeatTimeout, lostGrace/4),
		allLeft: make(chan struct{}), done: make(chan struct{}),
	}
	for r := range n {
		s.wg.Add(1)
		go s.readLoop(r)
	}
	s.wg.Add(1)
	go s.heartbeatLoop()
	return s
}

// handle steps the state machine with ev and carries out its actions.
// Messages go out on goroutines of their own, so that a stuck rank delays
// no other; s.sending counts them.
func (s *ctrlServer) handle(ev ctrlEvent) {
	s.mu.Lock()
	acts := s.sm.step(ev)
	for _, a := range acts {
		switch a.Kind {
		case actSend:
			s.sending.Add(1)
		case actArm:
			s.timers = append(s.timers, time.AfterFunc(a.After, func() {
				s.handle(ctrlEvent{Kind: evTimer, Timer: a.Timer, Now: time.Now()})
			}))
		}
	}
	s.mu.Unlock()
	// A verdict reaches rank 0, this process, after it has been written
	// to every other rank: rank 0's operations fail when it arrives, and
	// a process that exits on its failure at once would otherwise take
	// the verdict to the others with it, leaving them to blame rank 0.
	var others sync.WaitGroup
	var own *ctrlAction
	for _, a := range acts {
		switch a.Kind {
		case actSend:
			if a.Msg.Type == wire.Verdict {
				if a.To == 0 {
					own = &a
					continue
				}
				others.Add(1)
			}
			go func() {
				defer s.sending.Done()
				if a.Msg.Type == wire.Verdict {
					defer others.Done()
				}
				s.deliver(a)
			}()
		case actDeclare:
			s.log.Warn("occl: communicator failed", "peer", a.Msg.Peer, "reporter", a.Msg.Reporter, "reason", a.Msg.Text)
		case actAllLeft:
			close(s.allLeft)
		}
	}
	if own != nil {
		go func() {
			defer s.sending.Done()
			others.Wait()
			s.deliver(*own)
		}()
	}
}

// deliver sends a's message; one that cannot be delivered is logged (its
// rank is gone or going, which the state machine learns on its own).
func (s *ctrlServer) deliver(a ctrlAction) {
	if err := s.send(a.To, &a.Msg); err != nil {
		s.log.Debug("occl: control message not delivered", "to", a.To, "msg", describeMsg(&a.Msg), "err", err)
	}
}

func (s *ctrlServer) send(r int, m *wire.Msg) error {
	s.wmu[r].Lock()
	defer s.wmu[r].Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.hbTO)
	defer cancel()
	return sendMsg(ctx, s.conns[r], m)
}

func (s *ctrlServer) readLoop(r int) {
	defer s.wg.Done()
	var buf []byte
	for {
		m, b, err := recvMsg(context.Background(), s.conns[r], buf)
		buf = b
		if err != nil {
			s.handle(ctrlEvent{Kind: evConnLost, From: r, Err: err.Error(), Now: time.Now()})
			return
		}
		s.handle(ctrlEvent{Kind: evRecv, From: r, Msg: m, Now: time.Now()})
	}
}

func (s *ctrlServer) heartbeatLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.hb)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.handle(ctrlEvent{Kind: evTick, Now: now})
		}
	}
}

// close waits (bounded by ctx) for every rank to leave, then tells the
// stragglers that the root is going away on purpose.
func (s *ctrlServer) close(ctx context.Context, clean bool) error {
	if clean {
		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		select {
		case <-s.allLeft:
		case <-wait.Done():
		}
		cancel()
	}
	// Once closing, the state machine sends nothing but the shutdowns,
	// which go after the verdict being delivered, if any.
	s.mu.Lock()
	acts := s.sm.step(ctrlEvent{Kind: evClose, Now: time.Now()})
	for _, t := range s.timers {
		t.Stop()
	}
	s.mu.Unlock()
	s.sending.Wait()
	for _, a := range acts {
		if a.Kind == actSend {
			s.send(a.To, &a.Msg)
		}
	}
	close(s.done)
	for _, c := range s.conns {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

// sendMsg writes one control message as a KindControl frame.
func sendMsg(ctx context.Context, c transport.Conn, m *wire.Msg) error {
	b := bytebufferpool.Get()
	defer bytebufferpool.Put(b)
	b.B = m.Append(b.B[:0])
	return c.Send(ctx, transport.Header{Kind: transport.KindControl}, b.B)
}

// recvMsg reads one control message, reusing buf for its payload.
func recvMsg(ctx context.Context, c *tcp.Conn, buf []byte) (wire.Msg, []byte, error) {
	h, b, err := c.RecvMessage(ctx, wire.MaxMessage, buf)
	if err != nil {
		return wire.Msg{}, b, err
	}
	if h.Kind != transport.KindControl {
		return wire.Msg{}, b, fmt.Errorf("expected a control frame, got a %s frame", h.Kind)
	}
	m, err := wire.Decode(b)
	return m, b, err
}
