package comm

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/seqlock"
)

// The traffic monitor counts the bytes every AllToAll and AllToAllV sends
// from this rank to each peer, under a tag the caller attaches to the
// context (an MoE layer and phase, say "layer3/dispatch"). An operation is
// counted when it starts, by whoever runs it; the full matrix of a tag is
// assembled on demand by TrafficMatrix, a collective that gathers every
// rank's row. Planners use it to predict the next phase's demand.

type tagKey struct{}

// WithTrafficTag returns a context whose all-to-all operations are counted
// under tag.
func WithTrafficTag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, tagKey{}, tag)
}

// TrafficTag returns the tag WithTrafficTag attached to ctx ("" if none).
func TrafficTag(ctx context.Context) string {
	tag, _ := ctx.Value(tagKey{}).(string)
	return tag
}

// monitor is one rank's traffic counters. One writer at a time records
// (the holder of the queue's exec, which runs the operations); readers
// come from any goroutine. A loop of all-to-alls under one tag adds to the
// row used last (last) under a sequence lock, which takes no locked
// instruction on amd64; a row of another tag is found or made under mu,
// which the readers take too, and they copy a row under the sequence lock
// as well, retrying when a record overlapped the copy.
type monitor struct {
	mu   sync.Mutex
	rows map[string]*trafficRow
	last atomic.Pointer[trafficRow]
	seq  seqlock.Lock
}

type trafficRow struct {
	tag   string
	bytes []uint64 // to each rank
	ops   uint64
}

// record adds one operation's bytes per destination under tag: lens[j]
// to rank j, or uniform to every rank where lens is nil. The caller holds
// the queue's exec.
func (m *monitor) record(tag string, size int, lens []int, uniform int) {
	r := m.last.Load()
	if r == nil || r.tag != tag {
		m.mu.Lock()
		if m.rows == nil {
			m.rows = map[string]*trafficRow{}
		}
		if r = m.rows[tag]; r == nil {
			r = &trafficRow{tag: tag, bytes: make([]uint64, size)}
			m.rows[tag] = r
		}
		m.last.Store(r)
		m.mu.Unlock()
	}
	m.seq.WriteBegin()
	r.ops++
	if lens == nil {
		for j := range r.bytes {
			r.bytes[j] += uint64(uniform)
		}
	} else {
		for j, n := range lens {
			r.bytes[j] += uint64(n)
		}
	}
	m.seq.WriteEnd()
}

func (m *monitor) row(tag string, size int) ([]uint64, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]uint64, size)
	r := m.rows[tag]
	if r == nil {
		return out, 0
	}
	for {
		s := m.seq.ReadBegin()
		copy(out, r.bytes)
		ops := r.ops
		if !m.seq.Retry(s) {
			return out, ops
		}
	}
}

func (m *monitor) tags() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.rows))
	for t := range m.rows {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (m *monitor) reset(tag string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last.Store(nil)
	if tag == "" {
		m.rows = nil
		return
	}
	delete(m.rows, tag)
}

// Traffic is the all-to-all traffic of one tag: bytes from every rank to
// every rank, and summed per host pair.
type Traffic struct {
	Tag string `json:"tag"`
	// Ops is the number of operations recorded under the tag by each rank.
	Ops []uint64 `json:"ops"`
	// Ranks[i][j] is the bytes rank i sent to rank j.
	Ranks [][]uint64 `json:"ranks"`
	// Hosts[a][b] is the bytes ranks of host a sent to ranks of host b.
	Hosts [][]uint64 `json:"hosts"`
	// Host is the host index of every rank.
	Host []int `json:"host"`
}

// JSON encodes the traffic matrix.
func (t *Traffic) JSON() []byte {
	b, _ := json.Marshal(t)
	return b
}

// LocalTraffic returns the bytes this rank sent to every rank under tag,
// and how many operations were counted. It does not communicate.
func (c *Communicator) LocalTraffic(tag string) ([]uint64, uint64) {
	return c.traffic.row(tag, c.size)
}

// TrafficTags lists the tags this rank has counted traffic under.
func (c *Communicator) TrafficTags() []string { return c.traffic.tags() }

// ResetTraffic forgets this rank's counters of tag, or of every tag when
// tag is "". It does not communicate; call it on every rank to start a new
// measurement.
func (c *Communicator) ResetTraffic(tag string) { c.traffic.reset(tag) }

// TrafficMatrix gathers every rank's counters of tag into the full matrix,
// on every rank. It is a collective: every rank must call it. It runs in
// issue order, as an operation: its counts include every all-to-all
// issued before it (Async ones too), on every rank.
func (c *Communicator) TrafficMatrix(ctx context.Context, tag string) (*Traffic, error) {
	n := c.size
	mine, all := make([]uint64, n+1), make([]uint64, n*(n+1))
	mb, ab := Slice(mine), Slice(all)
	hdr := collHeader(algo.OpAllGather, mb.dt, 0, 0, mb.Len())
	err := wait(c.postCall(ctx, "TrafficMatrix", hdr, func(ctx context.Context, p *opPeers) error {
		row, ops := c.traffic.row(tag, n)
		mine[0] = ops
		copy(mine[1:], row)
		return allGatherBytes(ctx, p, mb.b, ab.b)
	}))
	if err != nil {
		return nil, err
	}
	t := &Traffic{Tag: tag, Ops: make([]uint64, n), Ranks: make([][]uint64, n), Host: append([]int(nil), c.hosts...)}
	h := c.NumHosts()
	t.Hosts = make([][]uint64, h)
	for a := range t.Hosts {
		t.Hosts[a] = make([]uint64, h)
	}
	for i := 0; i < n; i++ {
		rec := all[i*(n+1) : (i+1)*(n+1)]
		t.Ops[i] = rec[0]
		t.Ranks[i] = append([]uint64(nil), rec[1:]...)
		for j, b := range t.Ranks[i] {
			t.Hosts[c.hosts[i]][c.hosts[j]] += b
		}
	}
	return t, nil
}
