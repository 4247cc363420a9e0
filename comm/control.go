package comm

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
			answers[r] = c.hist.status(seq)
		}
	}
	m.l.mu.Unlock()
	if pe := judge(seq, answers); pe != nil {
		m.l.broadcast(pe)
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

// ctrlClient is one rank's end of the control plane.
type ctrlClient struct {
	comm     *Communicator
	rank     int
	conn     *tcp.Conn
	wmu      sync.Mutex
	server   *ctrlServer // on rank 0 only
	hb, hbTO time.Duration
	log      *slog.Logger

	heard    atomic.Int64 // unix nanos of the last message from the root
	leaving  atomic.Bool
	shutdown atomic.Bool
	done     chan struct{}
	wg       sync.WaitGroup
}

func newCtrlClient(rank int, conn *tcp.Conn, server *ctrlServer, cfg config, log *slog.Logger) *ctrlClient {
	cl := &ctrlClient{rank: rank, conn: conn, server: server, hb: cfg.heartbeat, hbTO: cfg.heartbeatTimeout, log: logx.For(log, logx.Net), done: make(chan struct{})}
	cl.heard.Store(time.Now().UnixNano())
	return cl
}

// start begins heartbeats and listening for verdicts on behalf of c.
func (cl *ctrlClient) start(c *Communicator) {
	cl.comm = c
	cl.wg.Add(2)
	go cl.readLoop()
	go cl.heartbeatLoop()
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
			if cl.leaving.Load() || cl.shutdown.Load() {
				return
			}
			cl.comm.fail(&PeerError{Peer: 0, Reporter: cl.rank, Kind: ErrPeerFailed,
				Reason: fmt.Sprintf("lost the control connection to rank 0: %v", err)})
			return
		}
		cl.heard.Store(time.Now().UnixNano())
		switch m.Type {
		case wire.Verdict:
			cl.comm.fail(&PeerError{Peer: m.Peer, Reporter: m.Reporter, Kind: errOfKind(m.Kind), Reason: m.Text})
		case wire.Shutdown:
			cl.shutdown.Store(true)
		case wire.Probe:
			st := cl.comm.hist.status(m.Seq)
			if err := cl.send(&st); err != nil {
				cl.log.Debug("occl: probe answer to rank 0 failed", "err", err)
			}
		}
	}
}

func (cl *ctrlClient) heartbeatLoop() {
	defer cl.wg.Done()
	t := time.NewTicker(cl.hb)
	defer t.Stop()
	hb := wire.Msg{Type: wire.Heartbeat}
	for {
		select {
		case <-cl.done:
			return
		case <-t.C:
		}
		if cl.shutdown.Load() {
			continue
		}
		if err := cl.send(&hb); err != nil && !cl.leaving.Load() {
			cl.log.Debug("occl: heartbeat to rank 0 failed", "err", err)
		}
		if silent := time.Since(time.Unix(0, cl.heard.Load())); silent > cl.hbTO && !cl.shutdown.Load() {
			cl.comm.fail(&PeerError{Peer: 0, Reporter: cl.rank, Kind: ErrPeerFailed,
				Reason: fmt.Sprintf("no heartbeat from rank 0 (the control root) for %v", silent.Round(time.Millisecond))})
		}
	}
}

func (cl *ctrlClient) report(pe *PeerError) {
	m := wire.Msg{Type: wire.Report, Kind: kindOf(pe.Kind), Peer: pe.Peer, Reporter: pe.Reporter, Text: pe.Reason}
	if err := cl.send(&m); err != nil {
		cl.log.Debug("occl: failure report to rank 0 failed", "err", err)
	}
}

func (cl *ctrlClient) lost(peer int, err error) {
	m := wire.Msg{Type: wire.Report, Kind: kindLost, Peer: peer, Reporter: cl.rank, Text: err.Error()}
	if e := cl.send(&m); e != nil {
		cl.log.Debug("occl: link report to rank 0 failed", "err", e)
	}
}

func (cl *ctrlClient) stalled(seq uint64) {
	if err := cl.send(&wire.Msg{Type: wire.Stalled, Seq: seq}); err != nil {
		cl.log.Debug("occl: stall report to rank 0 failed", "err", err)
	}
}

func (cl *ctrlClient) close(ctx context.Context, clean bool) error {
	if cl.leaving.Swap(true) {
		return nil
	}
	if clean {
		cl.send(&wire.Msg{Type: wire.Goodbye})
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
	size     int
	hb, hbTO time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	conns   []*tcp.Conn
	wmu     []sync.Mutex
	heard   []atomic.Int64
	left    []bool
	gone    []bool
	verdict *wire.Msg
	sending sync.WaitGroup // verdicts being delivered
	probe   *probeRound
	allLeft chan struct{}
	closing bool
	done    chan struct{}
	wg      sync.WaitGroup
}

func newCtrlServer(conns []*tcp.Conn, cfg config, log *slog.Logger) *ctrlServer {
	n := len(conns)
	s := &ctrlServer{
		size: n, hb: cfg.heartbeat, hbTO: cfg.heartbeatTimeout, log: logx.For(log, logx.Net),
		conns: conns, wmu: make([]sync.Mutex, n), heard: make([]atomic.Int64, n),
		left: make([]bool, n), gone: make([]bool, n),
		allLeft: make(chan struct{}), done: make(chan struct{}),
	}
	now := time.Now().UnixNano()
	for r := range n {
		s.heard[r].Store(now)
		s.wg.Add(1)
		go s.readLoop(r)
	}
	s.wg.Add(1)
	go s.heartbeatLoop()
	return s
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
			s.mu.Lock()
			left, closing := s.left[r], s.closing
			s.gone[r] = true
			s.checkAllLeft()
			s.mu.Unlock()
			if !left && !closing {
				s.declare(&wire.Msg{Type: wire.Verdict, Kind: kindPeerFailed, Peer: r, Reporter: 0,
					Text: fmt.Sprintf("process exited or closed its connection without leaving (%v)", err)})
			}
			return
		}
		s.heard[r].Store(time.Now().UnixNano())
		switch m.Type {
		case wire.Goodbye:
			s.mu.Lock()
			s.left[r] = true
			s.checkAllLeft()
			s.mu.Unlock()
		case wire.Report:
			s.onReport(r, &m)
		case wire.Stalled:
			s.onStalled(m.Seq)
		case wire.Status:
			s.onStatus(r, &m)
		}
	}
}

// checkAllLeft closes allLeft once every rank has left or gone; s.mu held.
func (s *ctrlServer) checkAllLeft() {
	for r := range s.size {
		if !s.left[r] && !s.gone[r] {
			return
		}
	}
	select {
	case <-s.allLeft:
	default:
		close(s.allLeft)
	}
}

func (s *ctrlServer) onReport(from int, m *wire.Msg) {
	if m.Kind != kindLost {
		s.declare(&wire.Msg{Type: wire.Verdict, Kind: m.Kind, Peer: m.Peer, Reporter: from, Text: m.Text})
		return
	}
	// A broken link: if the rank at the other end died, its control
	// connection drops too, and that verdict is the precise one. Give it a
	// moment to arrive before blaming the link.
	peer, text := m.Peer, m.Text
	time.AfterFunc(lostGrace/4, func() {
		s.declare(&wire.Msg{Type: wire.Verdict, Kind: kindPeerFailed, Peer: peer, Reporter: from,
			Text: fmt.Sprintf("rank %d lost its connection to it: %s", from, text)})
	})
}

// probeRound collects the answers to one probe.
type probeRound struct {
	seq     uint64
	answers []wire.Msg
	missing int
	done    chan struct{}
}

// onStalled probes every rank about seq, unless a probe is running, and
// declares a mismatch if their answers disagree.
func (s *ctrlServer) onStalled(seq uint64) {
	s.mu.Lock()
	if s.probe != nil || s.verdict != nil || s.closing {
		s.mu.Unlock()
		return
	}
	pr := &probeRound{seq: seq, answers: make([]wire.Msg, s.size), done: make(chan struct{})}
	var to []int
	for r := range s.size {
		if !s.gone[r] && !s.left[r] {
			to = append(to, r)
		}
	}
	pr.missing = len(to)
	s.probe = pr
	s.mu.Unlock()
	go func() {
		for _, r := range to {
			s.send(r, &wire.Msg{Type: wire.Probe, Seq: seq})
		}
		t := time.NewTimer(min(2*time.Second, s.hbTO))
		select {
		case <-pr.done:
		case <-t.C:
		case <-s.done:
		}
		t.Stop()
		s.mu.Lock()
		s.probe = nil
		answers := pr.answers
		s.mu.Unlock()
		if pe := judge(seq, answers); pe != nil {
			s.declare(&wire.Msg{Type: wire.Verdict, Kind: kindMismatch, Peer: pe.Peer, Reporter: pe.Reporter, Text: pe.Reason})
		}
	}()
}

func (s *ctrlServer) onStatus(r int, m *wire.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.probe
	if pr == nil || pr.seq != m.Seq || pr.answers[r].Type == wire.Status {
		return
	}
	pr.answers[r] = *m
	if pr.missing--; pr.missing == 0 {
		close(pr.done)
	}
}

// declare sends the first verdict to every rank still connected.
func (s *ctrlServer) declare(v *wire.Msg) {
	s.mu.Lock()
	if s.verdict != nil || s.closing {
		s.mu.Unlock()
		return
	}
	s.verdict = v
	var to []int
	for r := range s.size {
		if !s.gone[r] && !s.left[r] {
			to = append(to, r)
		}
	}
	s.sending.Add(1)
	defer s.sending.Done()
	s.mu.Unlock()
	s.log.Warn("occl: communicator failed", "peer", v.Peer, "reporter", v.Reporter, "reason", v.Text)
	var wg sync.WaitGroup
	for _, r := range to {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.send(r, v); err != nil {
				s.log.Debug("occl: verdict not delivered", "to", r, "err", err)
			}
		}()
	}
	wg.Wait()
}

func (s *ctrlServer) heartbeatLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.hb)
	defer t.Stop()
	hb := wire.Msg{Type: wire.Heartbeat}
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		now := time.Now()
		for r := range s.size {
			s.mu.Lock()
			skip := s.gone[r] || s.left[r] || s.closing
			s.mu.Unlock()
			if skip {
				continue
			}
			if silent := now.Sub(time.Unix(0, s.heard[r].Load())); silent > s.hbTO {
				s.declare(&wire.Msg{Type: wire.Verdict, Kind: kindPeerFailed, Peer: r, Reporter: 0,
					Text: fmt.Sprintf("no heartbeat for %v", silent.Round(time.Millisecond))})
				continue
			}
			go s.send(r, &hb)
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
	s.mu.Lock()
	s.closing = true
	var to []int
	for r := range s.size {
		if !s.gone[r] && !s.left[r] {
			to = append(to, r)
		}
	}
	s.mu.Unlock()
	// A verdict being delivered reaches every rank before the shutdown.
	s.sending.Wait()
	for _, r := range to {
		s.send(r, &wire.Msg{Type: wire.Shutdown})
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
