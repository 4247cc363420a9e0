package comm

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/occl/occl/transport"
)

// The verdict of a rewire
//
// Every rank must leave a rewire with the same outcome: all on the target
// topology, or all on the previous one with the same *RewireError. Rank 0
// decides, because it is the rank that switches the fabric.
//
// Steps, while rank 0's switch runs:
//
//  1. every rank opens and checks its new links (see rewire.go) and each
//     rank other than 0 sends its outcome, a status, to rank 0;
//  2. rank 0 waits until its switch has returned, then sends one verdict to
//     every other rank, directly: the switch's failure if it failed;
//     otherwise the failure of the lowest rank among those whose outcome
//     it holds, as soon as it holds one; otherwise success once every
//     outcome is in;
//  3. a rank that gets a failure before its own links are ready stops
//     connecting and checking, and still sends its outcome, which rank 0
//     receives and discards, so that no message is left on a connection.
//
// Communication steps: 2 (statuses in, verdict out), of which only the
// verdict follows the switch when the links are ready before it returns,
// as they are when the switch is the slow part. Bytes on the wire: each
// rank other than 0 sends statusSize bytes to rank 0 and receives
// statusSize bytes from it; rank 0 receives and sends (size-1)*statusSize.
//
// A peer that dies or sends something else (ranks given different
// targets) fails the communicator, as in any operation.

// status is one rank's outcome of a rewire step, or rank 0's verdict.
type status struct {
	ok       bool
	rank     int // where it failed
	step     string
	reason   string
	applied  bool // verdict: the switch happened
	rollback bool // verdict: and rank 0 restores the previous circuits
}

// A status on the wire: ok (byte 0), applied (1), the length of the step
// (2), rollback (3), the length of the reason (4-5), the step (8-23), the
// reason (24 up to the last 4 bytes, truncated) and the failing rank (last
// 4 bytes).
const statusSize = 512

func (s status) encode(b []byte) {
	clear(b)
	if s.ok {
		b[0] = 1
	}
	if s.applied {
		b[1] = 1
	}
	if s.rollback {
		b[3] = 1
	}
	b[2] = byte(copy(b[8:24], s.step))
	binary.LittleEndian.PutUint16(b[4:], uint16(copy(b[24:statusSize-4], s.reason)))
	binary.LittleEndian.PutUint32(b[statusSize-4:], uint32(s.rank))
}

func decodeStatus(b []byte) status {
	n := min(int(b[2]), 16)
	m := min(int(binary.LittleEndian.Uint16(b[4:])), statusSize-28)
	return status{ok: b[0] == 1, applied: b[1] == 1, rollback: b[3] == 1, rank: int(binary.LittleEndian.Uint32(b[statusSize-4:])),
		step: string(b[8 : 8+n]), reason: string(b[24 : 24+m])}
}

// failure returns a failed status of step for err.
func failure(step string, err error) status {
	return status{step: step, reason: err.Error()}
}

// Step labels of the rewire's own messages.
const (
	stepStatus  = 2
	stepVerdict = 3
)

// switchRun is rank 0's switch, running beside its links.
type switchRun struct {
	done    chan struct{}
	err     error
	applied bool
}

// startSwitch calls rw.Apply on its own goroutine, bounded by applyContext.
func startSwitch(ctx context.Context, rw Rewire) *switchRun {
	s := &switchRun{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		actx, cancel := applyContext(ctx, rw.ApplyTimeout)
		defer cancel()
		s.err = rw.Apply(actx)
		s.applied = s.err == nil
	}()
	return s
}

// wait waits for the switch, if there is one, and says whether it
// happened.
func (s *switchRun) wait() bool {
	if s == nil {
		return false
	}
	<-s.done
	return s.applied
}

// newLinks is what a rank's new links came to.
type newLinks struct {
	conns           map[int]transport.Conn
	status          status // plan, connect or verify
	err             error  // the cause, on this rank
	connect, verify time.Duration
}

func (l newLinks) close() {
	for _, conn := range l.conns {
		conn.Close()
	}
}

// peerStatus is a status received by rank 0.
type peerStatus struct {
	rank   int
	s      status
	digest uint64
	err    error
}

// decide is rank 0's side, the shell of a verdictRoot: it collects the
// statuses, sends the verdict and returns it with its own links (once they
// have stopped). digest is its target's; planErr is rank 0's own plan
// failure, decisive at once. An error fails the communicator; the caller
// still waits for the switch.
func (c *Communicator) decide(ctx context.Context, p *opPeers, rw Rewire, digest uint64, sw *switchRun, planErr error,
	links <-chan newLinks, stop func()) (newLinks, status, error) {
	statuses := make(chan peerStatus, c.size)
	for r := 1; r < c.size; r++ {
		go func() {
			buf := make([]byte, statusSize)
			err := p.Recv(ctx, r, stepStatus, buf)
			statuses <- peerStatus{rank: r, s: decodeStatus(buf), digest: digest, err: err}
		}()
	}
	sm := newVerdictRoot(c.size, digest, sw != nil, rw.Rollback != nil, planErr)
	var switched <-chan struct{}
	if sw != nil {
		switched = sw.done
	}
	var own newLinks
	sent := make(chan error, 1)
	acts := sm.start()
	for {
		for _, a := range acts {
			switch a.Kind {
			case agStop:
				stop()
			case agSend:
				buf := make([]byte, statusSize)
				a.Status.encode(buf)
				go func() { sent <- c.sendAll(ctx, p, stepVerdict, buf) }()
			case agDone:
				return own, a.Status, a.Err
			}
		}
		var ev agreeEvent
		select {
		case <-switched:
			switched = nil
			ev = agreeEvent{Kind: agSwitched, Err: sw.err}
		case own = <-links:
			links = nil
			ev = agreeEvent{Kind: agLinks, Status: own.status}
		case ps := <-statuses:
			ev = agreeEvent{Kind: agStatus, From: ps.rank, Status: ps.s, Digest: ps.digest, Err: ps.err}
		case err := <-sent:
			ev = agreeEvent{Kind: agSent, Err: err}
		}
		acts = sm.step(ev)
	}
}

// sendAll sends buf to every rank but this one, at once, and returns the
// first error.
func (c *Communicator) sendAll(ctx context.Context, p *opPeers, step uint32, buf []byte) error {
	errs := make(chan error, c.size)
	for r := range c.size {
		if r != c.rank {
			go func() { errs <- p.Send(ctx, r, step, buf) }()
		}
	}
	var first error
	for range c.size - 1 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// report is the side of a rank other than 0, the shell of a
// verdictMember: it sends its links' status to rank 0 and returns rank 0's
// verdict with its links (once they have stopped). An error fails the
// communicator.
func (c *Communicator) report(ctx context.Context, p *opPeers, digest uint64, links <-chan newLinks, stop func()) (newLinks, status, error) {
	verdicts := make(chan agreeEvent, 1)
	go func() {
		buf := make([]byte, statusSize)
		err := p.Recv(ctx, 0, stepVerdict, buf)
		verdicts <- agreeEvent{Kind: agVerdict, Status: decodeStatus(buf), Digest: digest, Err: err}
	}()
	sm := newVerdictMember(c.rank, digest)
	var own newLinks
	sent := make(chan error, 1)
	var acts []agreeAction
	for {
		for _, a := range acts {
			switch a.Kind {
			case agStop:
				stop()
			case agSend:
				buf := make([]byte, statusSize)
				a.Status.encode(buf)
				go func() { sent <- p.Send(ctx, 0, stepStatus, buf) }()
			case agDone:
				return own, a.Status, a.Err
			}
		}
		var ev agreeEvent
		select {
		case own = <-links:
			links = nil
			ev = agreeEvent{Kind: agLinks, Status: own.status}
		case ev = <-verdicts:
		case err := <-sent:
			ev = agreeEvent{Kind: agSent, Err: err}
		}
		acts = sm.step(ev)
	}
}
