package algo

import (
	"context"

	"github.com/occl/occl/transport"
)

// SubPeers returns a view of a subset of p's ranks as a smaller Peers, so a
// schedule written for a whole communicator can run on one group of it (the
// ranks of one host, one rail, one row of a grid). Index i of the view is
// rank ranks[i] of p; p.Rank() must be one of them. Step labels of the view
// are offset by base, so that the phases of a composite schedule stay
// distinguishable on the wire.
func SubPeers(p Peers, ranks []int, base uint32) Peers {
	s := subOf(p, ranks, base)
	if ep, ok := p.(EagerPeers); ok {
		return eagerSubPeers{subPeers: s, ep: ep}
	}
	return s
}

// subOf makes the view SubPeers returns.
func subOf(p Peers, ranks []int, base uint32) subPeers {
	me := -1
	for i, r := range ranks {
		if r == p.Rank() {
			me = i
			break
		}
	}
	if me < 0 {
		panic("algo: SubPeers: this rank is not in the group")
	}
	return subPeers{p: p, ranks: ranks, me: me, base: base}
}

// Sub is SubPeers kept in the workspace, in slot: the view allocates
// nothing, and stays valid until the next Sub with the same slot.
func (w *Workspace) Sub(slot int, p Peers, ranks []int, base uint32) Peers {
	for len(w.subs) <= slot {
		w.subs = append(w.subs, new(eagerSubPeers))
	}
	v := w.subs[slot]
	v.subPeers = subOf(p, ranks, base)
	if ep, ok := p.(EagerPeers); ok {
		v.ep = ep
		return v
	}
	v.ep = nil
	return &v.subPeers
}

type subPeers struct {
	p     Peers
	ranks []int
	me    int
	base  uint32
}

func (s subPeers) Rank() int { return s.me }
func (s subPeers) Size() int { return len(s.ranks) }

func (s subPeers) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	return s.p.Send(ctx, s.ranks[peer], s.base+step, buf)
}

func (s subPeers) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	return s.p.Recv(ctx, s.ranks[peer], s.base+step, buf)
}

// RecvView implements ViewPeers where p does, and is Recv with the
// payload handed whole otherwise.
func (s subPeers) RecvView(ctx context.Context, peer int, step uint32, buf []byte, align int, use transport.Consumer) error {
	if vp, ok := s.p.(ViewPeers); ok {
		return vp.RecvView(ctx, s.ranks[peer], s.base+step, buf, align, use)
	}
	return recvWhole(ctx, s.p, s.ranks[peer], s.base+step, buf, use)
}

type eagerSubPeers struct {
	subPeers
	ep EagerPeers
}

func (s eagerSubPeers) EagerLimit(peer int) int { return s.ep.EagerLimit(s.ranks[peer]) }

// CPUs implements CPUPeers: a sub-group's rank is the whole rank's.
func (s subPeers) CPUs() int { return cpusOf(s.p) }

// Child returns the i-th child workspace of w, created on first use and
// kept, for sub-schedules that run concurrently within one operation and
// must not share staging buffers.
func (w *Workspace) Child(i int) *Workspace {
	for len(w.children) <= i {
		w.children = append(w.children, &Workspace{})
	}
	return w.children[i]
}
