package emu

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
)

// Config says where a Fabric keeps its resource table and how precisely
// it waits. The zero value (with a Key) is ready to use.
type Config struct {
	// Key names the job. Every process of the job passes the same key
	// (the id of the job's first communicator, in hex) and so shares one
	// table; jobs with different keys never affect each other. Letters,
	// digits, '.', '_' and '-' are used as they are in the file name,
	// other keys are hashed. Required unless Local.
	Key string
	// Dir is the directory of the shared table file; "" means
	// DefaultDir() (/dev/shm).
	Dir string
	// Local keeps the table in process memory instead of a shared file:
	// for jobs whose ranks all live in this process (tests over
	// transport/mem, comm's local groups). Key and Dir are then unused.
	Local bool
	// CatchUp is how far a Conn may fall behind the model before its
	// delay counts against the link: when a Send returns later than the
	// frame's emulated end (the process was descheduled, the inner
	// transport was slow, a wait woke late), the next frame may start up to
	// that much earlier, never before the link is free or before a Recv of
	// the sending rank. It keeps the achieved bandwidth at the configured
	// one on a busy machine, at the price of bursts of up to CatchUp at
	// link speed. 0 means DefaultCatchUp; negative means none.
	CatchUp time.Duration
	// Spin is how long before the end of a wait the waiting goroutine
	// stops sleeping and polls the clock: a wait ends a few microseconds
	// late instead of 50 to 150, for that much CPU time. 0 means
	// DefaultSpin; negative means never spin.
	Spin time.Duration
}

// DefaultCatchUp is the CatchUp of a zero Config.
const DefaultCatchUp = time.Millisecond

// ErrFabricClosed is returned by Wrap and SetTopology after Close.
var ErrFabricClosed = errors.New("emu: fabric closed")

// Fabric is an emulated fabric: the topology that says which path joins
// each pair of ranks, and the table of resources (links, NIC sides) that
// messages book. It is safe for concurrent use. One Fabric may wrap the
// connections of several ranks of this process.
type Fabric struct {
	tab     *table
	nRanks  int
	nNICs   int
	catchUp int64
	spin    time.Duration

	view atomic.Pointer[view]

	mu     sync.Mutex // serialises SetTopology, Wrap and Close
	closed bool
	refs   atomic.Int64 // 1 for the Fabric until Close, plus 1 per open Conn

	// recvd[r] is when a Recv of rank r last returned (monotime): a frame
	// rank r sends later may depend on it, so it never starts earlier.
	recvd []atomic.Int64

	frames   atomic.Int64
	bytes    atomic.Int64
	held     atomic.Int64
	unrouted atomic.Int64

	// links are the byte counters of the links frames crossed, made when a
	// Conn first resolves a path over the link; a Send adds to the counter
	// its Conn holds, without a lookup.
	linksMu sync.Mutex
	links   map[Link]*atomic.Int64
}

// view is one topology version with what Sends derive from it.
type view struct {
	topo *topo.Topology
	// nicNs is the time in nanoseconds one byte takes on each NIC (0 for
	// unlimited).
	nicNs []float64
}

func newView(t *topo.Topology) *view {
	v := &view{topo: t, nicNs: make([]float64, len(t.NICs))}
	for i, n := range t.NICs {
		bw := n.Bandwidth
		if bw <= 0 {
			bw = t.Classes[n.Class].Bandwidth
		}
		v.nicNs[i] = nsPerByte(bw)
	}
	return v
}

func nsPerByte(bandwidth float64) float64 {
	if bandwidth <= 0 {
		return 0
	}
	return 1e9 / bandwidth
}

// New makes a Fabric for topology t. With cfg.Local the resource table is
// private to this process; otherwise New attaches to the job's shared
// table, creating it if this process is the first (or if the processes that
// used it were killed). Every process of the job must pass a topology with
// the same number of ranks and NICs.
//
// The Fabric keeps a copy of t. Close it when the job ends.
func New(t *topo.Topology, cfg Config) (*Fabric, error) {
	t, err := checkTopology(t)
	if err != nil {
		return nil, err
	}
	nRanks, nNICs := len(t.Ranks), len(t.NICs)
	if err := checkDims(nRanks, nNICs); err != nil {
		return nil, err
	}
	var tab *table
	if cfg.Local {
		tab = newLocalTable(nRanks, nNICs)
	} else {
		if cfg.Key == "" {
			return nil, errors.New("emu: a shared fabric needs a job key")
		}
		if clockErr != nil {
			return nil, clockErr
		}
		dir := cfg.Dir
		if dir == "" {
			dir = DefaultDir()
		}
		if tab, err = openSharedTable(dir, cfg.Key, nRanks, nNICs); err != nil {
			return nil, err
		}
	}
	f := &Fabric{tab: tab, nRanks: nRanks, nNICs: nNICs, recvd: make([]atomic.Int64, nRanks)}
	switch {
	case cfg.CatchUp == 0:
		f.catchUp = int64(DefaultCatchUp)
	case cfg.CatchUp > 0:
		f.catchUp = int64(cfg.CatchUp)
	}
	switch {
	case cfg.Spin == 0:
		f.spin = DefaultSpin
	case cfg.Spin > 0:
		f.spin = cfg.Spin
	}
	f.view.Store(newView(t))
	f.refs.Store(1)
	return f, nil
}

// checkTopology validates t and returns a private copy.
func checkTopology(t *topo.Topology) (*topo.Topology, error) {
	if t == nil {
		return nil, errors.New("emu: nil topology")
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("emu: %w", err)
	}
	return cloneTopology(t), nil
}

// cloneTopology returns a deep copy of t.
func cloneTopology(t *topo.Topology) *topo.Topology {
	c := *t
	c.Hosts = slices.Clone(t.Hosts)
	for i := range c.Hosts {
		c.Hosts[i].Coord = slices.Clone(c.Hosts[i].Coord)
	}
	c.Ranks = slices.Clone(t.Ranks)
	c.NICs = slices.Clone(t.NICs)
	c.Circuits = slices.Clone(t.Circuits)
	c.Classes = maps.Clone(t.Classes)
	return &c
}

// SetTopology switches the fabric to topology t, typically after the
// circuits of an optical switch changed. It must have the same ranks and
// NICs as the topology the Fabric was made with (only paths, circuits and
// link parameters may differ). Sends that start after SetTopology returns
// use the new paths; a Send already shaping finishes on the old ones.
//
// Each process of a job has its own Fabric, so each calls SetTopology.
func (f *Fabric) SetTopology(t *topo.Topology) error {
	t, err := checkTopology(t)
	if err != nil {
		return err
	}
	if len(t.Ranks) != f.nRanks || len(t.NICs) != f.nNICs {
		return fmt.Errorf("emu: topology has %d ranks and %d NICs, the fabric %d and %d",
			len(t.Ranks), len(t.NICs), f.nRanks, f.nNICs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrFabricClosed
	}
	f.view.Store(newView(t))
	return nil
}

// Topology returns a copy of the current topology.
func (f *Fabric) Topology() *topo.Topology {
	return cloneTopology(f.view.Load().topo)
}

// Path returns the path that a frame from rank a to rank b takes on the
// current topology. A pair without a direct path (topo.None, on rail-only
// fabrics) is carried by the packet network between the two ranks' NICs
// and reported as such.
func (f *Fabric) Path(a, b int) (topo.Path, error) {
	if err := f.checkPair(a, b); err != nil {
		return topo.Path{}, err
	}
	p, _ := route(f.view.Load().topo, a, b)
	return p, nil
}

func (f *Fabric) checkPair(a, b int) error {
	if a < 0 || a >= f.nRanks || b < 0 || b >= f.nRanks || a == b {
		return fmt.Errorf("emu: invalid rank pair (%d, %d) for %d ranks", a, b, f.nRanks)
	}
	return nil
}

// route returns the path from a to b, replacing topo.None by the packet
// network (unrouted is then true).
func route(t *topo.Topology, a, b int) (p topo.Path, unrouted bool) {
	p = t.Path(a, b)
	if p.Class != topo.None {
		return p, false
	}
	ra, rb := t.Ranks[a], t.Ranks[b]
	lp := t.Classes[topo.EPS]
	for _, nic := range [2]int{ra.NIC, rb.NIC} {
		if nic >= 0 && t.NICs[nic].Bandwidth > 0 && t.NICs[nic].Bandwidth < lp.Bandwidth {
			lp.Bandwidth = t.NICs[nic].Bandwidth
		}
	}
	return topo.Path{Class: topo.EPS, LinkParams: lp, SrcNIC: ra.NIC, DstNIC: rb.NIC}, true
}

// Wrap returns inner shaped as the link from rank self to rank peer, ranks
// of the Fabric's topology (for a communicator split from the job's, its
// members' ranks in the job). Both ends of a connection must be wrapped, by
// the Fabrics of their processes, once the connection carries nothing but
// frames of the transport.Conn it is (after any setup exchange such as
// shm.Connect's): every frame is preceded by a small timing frame that
// tells the receiver when it arrives.
//
// The returned Conn owns inner and closes it in Close.
func (f *Fabric) Wrap(inner transport.Conn, self, peer int) (*Conn, error) {
	if inner == nil {
		return nil, errors.New("emu: nil connection")
	}
	if err := f.checkPair(self, peer); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrFabricClosed
	}
	f.refs.Add(1)
	return newConn(f, inner, self, peer), nil
}

// Close releases the Fabric. The resource table stays mapped until every
// Conn it wrapped is closed too; the last process to let go of a shared
// table removes its file. Close is idempotent.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	return f.release()
}

// release drops one reference, detaching from the table with the last.
func (f *Fabric) release() error {
	if f.refs.Add(-1) == 0 {
		return f.tab.close()
	}
	return nil
}

// Link names a link of the emulated fabric in Stats.Links. Its fields are
// indices of the Fabric's topology (which SetTopology keeps: the same
// hosts' ranks and NICs), the lower first, and a link counts the bytes of
// both directions.
type Link struct {
	// Class is topo.HBD for the links inside a host or HB domain, topo.OCS
	// for an optical circuit and topo.EPS for the packet network
	// (including the pairs that the topology gives no direct path, see
	// Stats.Unrouted).
	Class topo.LinkClass
	// A and B are, for topo.OCS, the circuit's two ports and, for
	// topo.EPS, the NICs of the two ranks (indices in topo.Topology.NICs,
	// -1 for a rank without a NIC); for topo.HBD, the two ranks' hosts
	// (indices in topo.Topology.Hosts, equal inside a host).
	A, B int
}

// String formats l as "class:A-B".
func (l Link) String() string { return fmt.Sprintf("%s:%d-%d", l.Class, l.A, l.B) }

// Touches reports whether l has nic as one of its ends: an OCS port or an
// EPS NIC (HBD links have hosts for ends, never NICs).
func (l Link) Touches(nic int) bool {
	return l.Class != topo.HBD && (l.A == nic || l.B == nic)
}

// pathLink returns the link a frame from rank a to b crosses on path p of
// topology t.
func pathLink(t *topo.Topology, a, b int, p topo.Path) Link {
	var l Link
	switch p.Class {
	case topo.HBD:
		l = Link{Class: topo.HBD, A: t.Ranks[a].Host, B: t.Ranks[b].Host}
	case topo.OCS:
		l = Link{Class: topo.OCS, A: p.SrcNIC, B: p.DstNIC}
	default:
		l = Link{Class: topo.EPS, A: p.SrcNIC, B: p.DstNIC}
	}
	if l.A > l.B {
		l.A, l.B = l.B, l.A
	}
	return l
}

// linkCounter returns the byte counter of link l, making it the first
// time.
func (f *Fabric) linkCounter(l Link) *atomic.Int64 {
	f.linksMu.Lock()
	defer f.linksMu.Unlock()
	ctr := f.links[l]
	if ctr == nil {
		if f.links == nil {
			f.links = make(map[Link]*atomic.Int64)
		}
		ctr = new(atomic.Int64)
		f.links[l] = ctr
	}
	return ctr
}

// Stats are counters of a Fabric since it was made.
type Stats struct {
	// Frames and Bytes count the frames sent through the Fabric's Conns
	// and their size (payload plus frame header).
	Frames, Bytes int64
	// Held is the total time the emulated fabric added to Sends: from the
	// call until the frame had been serialised on every resource of its
	// path.
	Held time.Duration
	// Unrouted counts frames between ranks that the topology gives no
	// direct path (topo.None); they were carried as packet-network
	// traffic.
	Unrouted int64
	// Links are the bytes (payload plus frame header) that crossed each
	// link, on whatever topology the Fabric had when they were sent: an
	// optical circuit keeps its counter (the same two ports) when
	// SetTopology drops it and when a later one brings it back. Links no
	// frame crossed are absent. Only the frames sent through this Fabric's
	// Conns count: in a job of several processes, each process's Fabric
	// counts its own ranks' sends.
	Links map[Link]int64
}

// Stats returns the Fabric's counters.
func (f *Fabric) Stats() Stats {
	s := Stats{
		Frames:   f.frames.Load(),
		Bytes:    f.bytes.Load(),
		Held:     time.Duration(f.held.Load()),
		Unrouted: f.unrouted.Load(),
	}
	f.linksMu.Lock()
	s.Links = make(map[Link]int64, len(f.links))
	for l, ctr := range f.links {
		if n := ctr.Load(); n > 0 {
			s.Links[l] = n
		}
	}
	f.linksMu.Unlock()
	return s
}

// Since returns the counters that grew from prev, an earlier Stats of the
// same Fabric, to s: what the Fabric carried in between. Links that
// carried nothing in between are absent.
func (s Stats) Since(prev Stats) Stats {
	d := Stats{
		Frames:   s.Frames - prev.Frames,
		Bytes:    s.Bytes - prev.Bytes,
		Held:     s.Held - prev.Held,
		Unrouted: s.Unrouted - prev.Unrouted,
		Links:    make(map[Link]int64, len(s.Links)),
	}
	for l, n := range s.Links {
		if n -= prev.Links[l]; n > 0 {
			d.Links[l] = n
		}
	}
	return d
}
