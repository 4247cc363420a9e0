package comm

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/occl/occl/internal/logx"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/setup"
)

// NewLocal creates size communicators joined by the in-process transport,
// one per rank, all in this process: element r is rank r. They behave like
// communicators across processes (same frames, same checks, same failure
// agreement) and are meant for tests and for running schedules without a
// network. Drive each rank from its own goroutine.
func NewLocal(size int, opts ...Option) ([]*Communicator, error) {
	if size < 1 {
		return nil, invalidf("NewLocal: size %d", size)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkTopology(size); err != nil {
		return nil, err
	}
	g := newLocalGroup(size)
	hostIDs := make([]string, size)
	for r := range hostIDs {
		hostIDs[r] = cfg.hostID
		if cfg.topology != nil {
			hostIDs[r] = virtualHostID(cfg.hostID, cfg.topology, r)
		}
	}
	// The ranks share this process's processors.
	cfg.cpus = max(1, runtime.GOMAXPROCS(0)/size)
	const rootID = 0x10ca1
	if err := g.emulate(cfg, rootID); err != nil {
		return nil, err
	}
	return g.members(rootID, hostIDs, cfg), nil
}

// members makes the communicators of every rank of the group, element r
// rank r, with communicator id rootID and the ranks' host ids.
func (g *localGroup) members(rootID uint64, hostIDs []string, cfg config) []*Communicator {
	reg := &localRegistry{groups: map[uint64]*localGroup{}}
	comms := make([]*Communicator, g.size)
	for r := range comms {
		comms[r] = g.member(newPlacement(rootID, g.nonce, r, hostIDs, cfg.fabricRanks), reg, cfg)
	}
	return comms
}

// emulate wraps every pipe of the group in one in-process emulated fabric.
func (g *localGroup) emulate(cfg config, id uint64) error {
	var err error
	if g.fabric, err = emulate(cfg, id, true); err != nil || g.fabric == nil {
		return err
	}
	for i, row := range g.conns {
		ends := make(map[int]transport.Conn, len(row))
		for j, conn := range row {
			if conn != nil {
				ends[j] = conn
			}
		}
		if err := setup.Emulate(g.fabric, i, ends); err != nil {
			return err
		}
		for j, conn := range ends {
			row[j] = conn
		}
	}
	return nil
}

// localGroup is the set of pipes and the control plane of one in-process
// communicator.
type localGroup struct {
	mu      sync.Mutex
	pending map[[3]int][2]transport.Conn // pipes of a rewire, by attempt and pair, until both ends are taken
	size    int
	conns   [][]transport.Conn // conns[i][j]: rank i's end of the pipe to j
	ctrl    *localControl
	fabric  *emu.Fabric // emulated links, if any
	nonce   [16]byte    // the job nonce of its communicators
	shrunk  localShrink // the survivors of a Shrink meet here
}

// localShrink is where the ranks of an in-process group calling Shrink
// meet, under the group's control lock.
type localShrink struct {
	callers map[int]bool
	done    chan struct{}         // closed once decided
	next    map[int]*Communicator // the new communicators, by old rank
}

func newLocalGroup(size int) *localGroup {
	g := &localGroup{size: size, conns: make([][]transport.Conn, size), ctrl: &localControl{members: make([]*Communicator, size)}}
	rand.Read(g.nonce[:]) // never fails (crypto/rand)
	for i := range g.conns {
		g.conns[i] = make([]transport.Conn, size)
	}
	for i := range size {
		for j := i + 1; j < size; j++ {
			a, b := mem.Pipe(mem.DefaultCapacity)
			g.conns[i][j], g.conns[j][i] = a, b
		}
	}
	return g
}

// member makes the communicator of rank pl.rank of the group.
func (g *localGroup) member(pl placement, reg *localRegistry, cfg config) *Communicator {
	c := newCommunicator(pl, g.conns[pl.rank], &localMember{l: g.ctrl, rank: pl.rank}, &localLinker{reg: reg, g: g}, cfg)
	g.ctrl.mu.Lock()
	g.ctrl.members[pl.rank] = c
	g.ctrl.mu.Unlock()
	return c
}

// shrink is Shrink for rank c of the group (see Communicator.Shrink): the
// caller waits until every rank still alive (it has not closed or aborted
// its communicator), not in exclude and not in suspects has called; the
// last to arrive makes the communicators of the callers.
func (g *localGroup) shrink(ctx context.Context, c *Communicator, exclude, suspects []int) (*Communicator, error) {
	out := func(r int) bool { return slices.Contains(exclude, r) || slices.Contains(suspects, r) }
	if out(c.rank) {
		return nil, fmt.Errorf("%w: this rank is the one whose failure ended the communicator", ErrExcluded)
	}
	l := g.ctrl
	s := &g.shrunk
	l.mu.Lock()
	if s.callers == nil {
		s.callers, s.done = map[int]bool{}, make(chan struct{})
	}
	s.callers[c.rank] = true
	done := s.done
	l.mu.Unlock()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		l.mu.Lock()
		if s.next == nil {
			waiting := false
			for r, m := range l.members {
				if m != nil && !out(r) && !s.callers[r] {
					waiting = true
				}
			}
			if !waiting {
				g.shrinkDecide(c, out)
				close(s.done)
			}
		}
		next := s.next
		l.mu.Unlock()
		if next != nil {
			if nc := next[c.rank]; nc != nil {
				return nc, nil
			}
			return nil, fmt.Errorf("%w: the survivors decided without this rank", ErrExcluded)
		}
		select {
		case <-done:
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: the other ranks did not call Shrink before the deadline: %w", ErrExcluded, ctx.Err())
		}
	}
}

// shrinkDecide makes the communicators of the callers still alive, under
// the control lock.
func (g *localGroup) shrinkDecide(c *Communicator, out func(int) bool) {
	s := &g.shrunk
	var members []int
	for r := range g.size {
		if s.callers[r] && !out(r) {
			members = append(members, r)
		}
	}
	s.next = map[int]*Communicator{}
	cfg := c.cfg
	cfg.fabricRanks = nil
	if cfg.topology != nil {
		cfg.topology = cfg.topology.Subset(members)
	}
	id := childID(c.id, uint64(len(members)), -2)
	ng := newLocalGroup(len(members))
	if err := ng.emulate(cfg, id); err != nil {
		logx.For(c.log, logx.Init).Warn("occl: shrink: emulation", "err", err)
		return
	}
	hostIDs := make([]string, len(members))
	for i, r := range members {
		hostIDs[i] = c.hostIDOf(r)
	}
	reg := c.linker.(*localLinker).reg
	for i, r := range members {
		s.next[r] = ng.member(newPlacement(id, ng.nonce, i, hostIDs, c.groupFabricRanks(members)), reg, cfg)
	}
}

// localLinker is the linker of an in-process communicator: Split meets the
// other members in the registry, and new connections are in-process pipes
// of the group.
type localLinker struct {
	reg *localRegistry
	g   *localGroup
}

func (f *localLinker) release() {}

func (f *localLinker) split(ctx context.Context, p *opPeers, childID uint64, group []int, self int) (*Communicator, error) {
	return f.reg.split(ctx, p, childID, group, self)
}

// connect takes this rank's ends of new pipes to peers: the first of a
// pair to ask creates the pipe, the other finds it. Pipes left from an
// earlier attempt (one that failed before both ends were taken) are closed:
// once a rank starts an attempt, the earlier one has ended on every rank or
// failed, and no rank will use them.
func (f *localLinker) connect(ctx context.Context, c *Communicator, gen uint32, peers []int) (map[int]transport.Conn, error) {
	g := f.g
	out := make(map[int]transport.Conn, len(peers))
	g.mu.Lock()
	for key, ends := range g.pending {
		if key[0] < int(gen) {
			ends[0].Close()
			ends[1].Close()
			delete(g.pending, key)
		}
	}
	for _, r := range peers {
		key := [3]int{int(gen), min(c.rank, r), max(c.rank, r)}
		if g.pending == nil {
			g.pending = map[[3]int][2]transport.Conn{}
		}
		ends, ok := g.pending[key]
		if !ok {
			a, b := mem.Pipe(mem.DefaultCapacity)
			ends = [2]transport.Conn{a, b}
			g.pending[key] = ends
		} else {
			delete(g.pending, key)
		}
		if c.rank < r {
			out[r] = ends[0]
		} else {
			out[r] = ends[1]
		}
	}
	g.mu.Unlock()
	if err := setup.Emulate(g.fabric, c.rank, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *localLinker) emulator() *emu.Fabric { return f.g.fabric }

// localRegistry is where in-process communicators meet: the groups of
// a Split meet here by their child id.
type localRegistry struct {
	mu     sync.Mutex
	groups map[uint64]*localGroup
	joined map[uint64]int
}

func (reg *localRegistry) split(ctx context.Context, p *opPeers, childID uint64, group []int, self int) (*Communicator, error) {
	if group == nil {
		return nil, nil
	}
	c := p.c
	cfg := c.cfg
	if cfg.topology != nil {
		cfg.topology = cfg.topology.Subset(group)
	}
	reg.mu.Lock()
	g := reg.groups[childID]
	if g == nil {
		g = newLocalGroup(len(group))
		if err := g.emulate(cfg, childID); err != nil {
			reg.mu.Unlock()
			return nil, err
		}
		reg.groups[childID] = g
		if reg.joined == nil {
			reg.joined = map[uint64]int{}
		}
	}
	reg.joined[childID]++
	if reg.joined[childID] == len(group) {
		delete(reg.groups, childID)
		delete(reg.joined, childID)
	}
	reg.mu.Unlock()
	if g.size != len(group) {
		return nil, fmt.Errorf("split: group %016x has %d ranks here and %d elsewhere", childID, len(group), g.size)
	}
	hostIDs := make([]string, len(group))
	for i, r := range group {
		hostIDs[i] = c.hostIDOf(r)
	}
	return g.member(newPlacement(childID, g.nonce, self, hostIDs, c.groupFabricRanks(group)), reg, cfg), nil
}

// grow makes this rank's communicator of a GrowLocal, and on rank 0 the
// joiners': the members of c meet in the registry by the grown group's id,
// as Split's groups do; the first to come makes the group of c's size plus
// n ranks. Members keep their ranks and hosts; joiners are on this
// process's host (or the topology's hosts for their ranks).
func (reg *localRegistry) grow(p *opPeers, id uint64, n int, cfg config) (*Communicator, []*Communicator, error) {
	c := p.c
	size := c.size + n
	reg.mu.Lock()
	g := reg.groups[id]
	if g == nil {
		g = newLocalGroup(size)
		if err := g.emulate(cfg, id); err != nil {
			reg.mu.Unlock()
			return nil, nil, err
		}
		reg.groups[id] = g
		if reg.joined == nil {
			reg.joined = map[uint64]int{}
		}
	}
	reg.joined[id]++
	if reg.joined[id] == c.size {
		delete(reg.groups, id)
		delete(reg.joined, id)
	}
	reg.mu.Unlock()
	if g.size != size {
		return nil, nil, fmt.Errorf("grow: group %016x has %d ranks here and %d elsewhere", id, size, g.size)
	}
	hostIDs := make([]string, size)
	for r := range size {
		hostIDs[r] = cfg.hostID
		if r < c.size {
			hostIDs[r] = machineIDs([]string{c.hostIDOf(r)})[0]
		}
		if cfg.topology != nil {
			hostIDs[r] = virtualHostID(hostIDs[r], cfg.topology, r)
		} else if r < c.size {
			hostIDs[r] = c.hostIDOf(r)
		}
	}
	var joiners []*Communicator
	if c.rank == 0 {
		for r := c.size; r < size; r++ {
			joiners = append(joiners, g.member(newPlacement(id, g.nonce, r, hostIDs, nil), reg, cfg))
		}
	}
	return g.member(newPlacement(id, g.nonce, c.rank, hostIDs, nil), reg, cfg), joiners, nil
}
