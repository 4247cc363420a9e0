package comm

import (
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/plain"
	"github.com/occl/occl/internal/seqlock"
	"github.com/occl/occl/transport"
)

// OpState is the state of an operation in a flight record.
type OpState string

// Operation states.
const (
	OpQueued  OpState = "queued"  // issued, waiting for the operations before it
	OpRunning OpState = "running" // running now
	OpDone    OpState = "done"    // completed successfully
	OpFailed  OpState = "failed"  // completed with an error
)

// OpRecord is one operation in a communicator's flight record (see
// FlightRecord).
type OpRecord struct {
	// Seq is the collective sequence number, the same on every rank for
	// the same call; 0 for point-to-point groups.
	Seq uint64 `json:"seq"`
	// Op names the operation ("AllReduce", "Group", "Rewire", ...).
	Op string `json:"op"`
	// Bytes is the size of the operation's buffer on this rank, and for
	// a group the bytes of all its sends and receives there; DType is its
	// element type (empty where the operation has none, or a group's
	// buffers have different ones).
	Bytes int64  `json:"bytes"`
	DType string `json:"dtype,omitempty"`
	// Schedule is the schedule that ran ("ring", "rhd", ...), empty until
	// it is chosen or when none is (a single rank, an empty buffer).
	Schedule string `json:"schedule,omitempty"`
	// State is queued, running, done or failed.
	State OpState `json:"state"`
	// Start and End are when the operation started and ended on this
	// rank (zero while queued, End zero while running).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Peer is the rank the operation last waited on (sent to or received
	// from) when it is running or failed; -1 when unknown or done.
	Peer int `json:"peer"`
	// Error is the error of a failed operation.
	Error string `json:"error,omitempty"`
}

// DefaultFlightRecord is the number of operations a communicator keeps in
// its flight record unless OCCL_FLIGHT_RECORDER says otherwise.
const DefaultFlightRecord = 256

// histLen is the least number of operations the history keeps, whatever
// the flight record's length: the mismatch probes look collectives up in
// it.
const histLen = 256

// opHistory is a rank's record of its recent operations, in the order
// they ran: a fixed ring written by the goroutine that runs the
// operations (the holder of the queue's exec), under a sequence lock, so
// that recording takes no locked instruction on amd64; the readers,
// seldom, copy what they need, an entry at a time, and retry when a write
// overlapped the copy.
// It answers the mismatch probes (the fingerprint of the collective a rank
// ran at a sequence number) and is the flight record.
type opHistory struct {
	lock    seqlock.Lock
	ring    []opEntry // a power of two long
	mask    uint64    // len(ring)-1
	n       uint64    // entries ever written; the newest is ring[(n-1)&mask]
	cur     *opEntry  // the running operation's entry, nil if none
	started uint64    // highest collective sequence number started
	running uint64    // collective sequence number running now, 0 if none
	done    uint64    // last collective sequence number completed
	doneFP  wire.Fingerprint
	// waiting is the peer the running operation last sent to or received
	// from, tagged with the operation (see tagged); the schedules'
	// goroutines store it. sched is the schedule it chose, tagged alike.
	// Tagging spares begin a store that resets them for the next
	// operation, and chose the lock: a reader sees a value only if its
	// tag is the running entry's, so neither needs its stores ordered
	// with anything, and both are plain stores (internal/plain).
	waiting atomic.Uint64
	sched   atomic.Uint64
	// failed marks the running operation failed ahead of its end (see
	// failRunning), for the entry whose tag it carries and those after.
	failed atomic.Pointer[failMark]
	// tag is the running entry's tag (the low 32 bits of n when it
	// began) and bytes its size, as begin recorded them: written by
	// begin, read by the goroutines of the operation.
	tag   uint32
	bytes int64
	// size is the communicator's number of ranks: the collectives whose
	// header counts the elements of one rank's block have a buffer of
	// size blocks.
	size int
}

// failMark is the failure of a running operation, recorded by
// failRunning before the operation ends.
type failMark struct {
	tag uint32
	err string
}

// tagged packs v with an operation's tag.
func tagged(tag uint32, v uint32) uint64 { return uint64(tag)<<32 | uint64(v) }

// untag returns the value packed in w if w carries tag, or -1.
func untag(w uint64, tag uint32) int32 {
	if uint32(w>>32) != tag {
		return -1
	}
	return int32(uint32(w))
}

// opEntry is one operation in the history. Its fields are ordered by
// size, and its state is a byte (entryState), not the OpState string: begin
// writes the whole entry on every operation (one literal, so that no field
// added later is left from the entry's last lap), and a string field is two
// words and a pointer the garbage collector must be told of.
type opEntry struct {
	seq       uint64
	start     stamp
	end       stamp
	bytes     int64
	predicted time.Duration
	fp        wire.Fingerprint
	name      string
	err       string
	peer      int32
	tag       uint32
	dtype     algo.DType
	sched     algo.Algorithm
	state     entryState
	coll      bool
	hasDType  bool
}

// entryState is an entry's OpState, as a byte.
type entryState uint8

// Entry states, in the order of OpState's.
const (
	entryQueued entryState = iota
	entryRunning
	entryDone
	entryFailed
)

// opStates names the entry states.
var opStates = [...]OpState{entryQueued: OpQueued, entryRunning: OpRunning, entryDone: OpDone, entryFailed: OpFailed}

// OpState returns s as an OpState.
func (s entryState) OpState() OpState { return opStates[s] }

// perBlock reports whether the header of collective op counts the
// elements of one rank's block of its buffer rather than the whole buffer
// (AllToAll's send buffer, AllGather's output, ReduceScatter's input).
func perBlock(op algo.Collective) bool {
	return op == algo.OpAllToAll || op == algo.OpAllGather || op == algo.OpReduceScatter
}

func fingerprint(h *transport.Header) wire.Fingerprint {
	var fp wire.Fingerprint
	setFingerprint(&fp, h, 0)
	return fp
}

// setFingerprint writes the fingerprint of the operation of header h and
// rewire target target into fp, field by field: a fingerprint built
// apart and copied in is read back, 16 bytes at a time, from the narrower
// stores that just built it, which the processor cannot forward (a stall
// of tens of cycles on every operation).
func setFingerprint(fp *wire.Fingerprint, h *transport.Header, target uint64) {
	fp.Op, fp.DType, fp.RedOp, fp.Root, fp.Count, fp.Target = h.Op, h.DType, h.RedOp, h.Root, h.Count, target
}

// wait records that the running operation waits on peer. It stores only
// a change, so that an operation that talks to one peer, as every
// operation of two ranks does, writes the line once.
func (h *opHistory) wait(peer int32) {
	if w := tagged(h.tag, uint32(peer)); h.waiting.Load() != w {
		plain.Store(&h.waiting, w)
	}
}

// waitingOn returns the peer the running entry e (or a copy of it) waits
// on (-1: none yet).
func (h *opHistory) waitingOn(e *opEntry) int32 { return untag(h.waiting.Load(), e.tag) }

// withSched records in e, the running entry or a copy of it, the schedule
// chose stored for it, if any.
func (h *opHistory) withSched(e *opEntry) {
	if a := untag(h.sched.Load(), e.tag); a >= 0 && e.sched == algo.AlgoAuto {
		e.sched = algo.Algorithm(a)
	}
}

// init sizes the ring for a flight record of n operations of a
// communicator of size ranks.
func (h *opHistory) init(n, size int) {
	// A power of two, so that an entry's place is a mask, not a
	// division (tens of cycles), on every operation.
	h.ring = make([]opEntry, 1<<bits.Len(uint(max(n, histLen)-1)))
	h.mask = uint64(len(h.ring) - 1)
	h.size = size
}

// begin records that r starts at now. The worker calls it.
func (h *opHistory) begin(r *Request, now stamp) {
	h.beginEntry(opName{r.name, r.seq}, &r.hdr, r.target, r.args.p2p, now)
}

// beginEntry records that operation o starts at now: its frames' header
// hdr, a rewire's target, and a group's operations.
func (h *opHistory) beginEntry(o opName, hdr *transport.Header, target uint64, p2p *p2pOps, now stamp) {
	coll := hdr.Kind == transport.KindCollective
	dt, hasDT, bytes := entrySize(hdr, p2p, h.size)
	h.lock.WriteBegin()
	e := &h.ring[h.n&h.mask]
	h.n++
	h.tag, h.bytes = uint32(h.n), bytes
	// Field by field, for the reason setFingerprint gives.
	e.seq, e.start, e.end, e.bytes, e.predicted = o.seq, now, 0, bytes, 0
	setFingerprint(&e.fp, hdr, target)
	e.name, e.err = o.name, ""
	e.peer, e.tag, e.dtype, e.sched = -1, h.tag, dt, algo.AlgoAuto
	e.state, e.coll, e.hasDType = entryRunning, coll, hasDT
	h.cur = e
	if coll {
		h.started, h.running = o.seq, o.seq
	}
	h.lock.WriteEnd()
}

// entrySize returns the element type of the flight record entry of an
// operation whose frames' header is hdr, whether it has one, and its
// bytes: for a collective, the size of the buffer its schedule runs on,
// as chose records it (then chose need not take the lock to correct it);
// for a group (p2p its operations), all its sends and receives on this
// rank, with the type they share, if they do. size is the communicator's.
func entrySize(hdr *transport.Header, p2p *p2pOps, size int) (dt algo.DType, hasDT bool, bytes int64) {
	if hdr.Kind == transport.KindP2P {
		if p2p != nil {
			return p2p.dt, p2p.oneType, p2p.bytes
		}
		return 0, false, 0
	}
	dt = algo.DType(hdr.DType)
	hasDT = dt.Valid() && hdr.Op != uint8(algo.OpBarrier) && hdr.Op != uint8(algo.OpRewire) && hdr.Op != uint8(algo.OpSplit) && hdr.Op != uint8(algo.OpGrow)
	if hasDT {
		bytes = int64(hdr.Count) * int64(dt.Size())
		if hdr.Kind == transport.KindCollective && perBlock(algo.Collective(hdr.Op)) {
			bytes *= int64(max(size, 1))
		}
	}
	return dt, hasDT, bytes
}

// chose records the schedule the running operation chose for bytes bytes
// and, when known, its predicted time. The common case, a schedule for the
// bytes begin recorded and no prediction, is one tagged store; the others
// take the lock.
func (h *opHistory) chose(a algo.Algorithm, bytes int, predicted time.Duration) {
	plain.Store(&h.sched, tagged(h.tag, uint32(a)))
	if predicted == 0 && int64(bytes) == h.bytes {
		return
	}
	h.lock.WriteBegin()
	if e := h.cur; e != nil {
		e.bytes, e.predicted = int64(bytes), predicted
	}
	h.lock.WriteEnd()
}

// end records that the running operation ended at end with err and, if
// out is not nil, copies its entry there.
func (h *opHistory) end(end stamp, err error, out *opEntry) {
	e := h.cur
	if e == nil {
		return
	}
	h.lock.WriteBegin()
	e.end = end
	h.withSched(e)
	if err == nil {
		e.state, e.peer = entryDone, -1
	} else {
		e.state, e.err, e.peer = entryFailed, err.Error(), h.waitingOn(e)
	}
	h.cur = nil
	if e.coll {
		h.running = 0
		if err == nil {
			// Two assignments: as one, the fingerprint went through
			// a copy on the stack (see setFingerprint).
			h.done = e.seq
			h.doneFP = e.fp
		}
	}
	h.lock.WriteEnd()
	if out != nil {
		*out = *e
	}
}

// failRunning marks the running operation failed by err, ahead of its
// end, so that a record dumped when the communicator fails names it, and
// with it every operation that begins later (the communicator fails with
// err: every later operation fails). It runs beside the writer: the mark
// is for the entry running when it looked, or the last one to run, and
// readers apply it to a running entry of that tag or a later one
// (see marked), so that an entry that ended or began meanwhile is not
// left out.
func (h *opHistory) failRunning(err error) {
	// The running entry's tag is n's low 32 bits; with none running,
	// the next entry's tag is above them.
	h.failed.Store(&failMark{tag: uint32(h.state().n), err: err.Error()})
}

// marked returns e, a copy of the running entry, with what the
// schedule's goroutines stored for it and the failure failRunning marked
// it with, if any.
func (h *opHistory) marked(e opEntry) opEntry {
	h.withSched(&e)
	if f := h.failed.Load(); f != nil && int32(e.tag-f.tag) >= 0 && e.state == entryRunning {
		e.state, e.err, e.peer = entryFailed, f.err, h.waitingOn(&e)
	}
	return e
}

// current returns a copy of the running entry, as stored (see marked), if
// any.
func (h *opHistory) current() (opEntry, bool) {
	for {
		s := h.lock.ReadBegin()
		var e opEntry
		cur := h.cur
		if cur != nil {
			e = *cur
		}
		if !h.lock.Retry(s) {
			return e, cur != nil
		}
	}
}

// runningEntry returns the entry of the running operation, if any.
func (h *opHistory) runningEntry() (opEntry, bool) {
	e, ok := h.current()
	if !ok {
		return opEntry{}, false
	}
	return h.marked(e), true
}

// runningCollective returns the sequence number of the collective running
// and when it started, or 0 if none runs.
func (h *opHistory) runningCollective() (seq uint64, start stamp) {
	for {
		s := h.lock.ReadBegin()
		seq, start = 0, 0
		if cur := h.cur; h.running != 0 && cur != nil {
			seq, start = h.running, cur.start
		}
		if !h.lock.Retry(s) {
			return seq, start
		}
	}
}

// histState is the history's counters at one moment.
type histState struct {
	n, started, running, done uint64
	doneFP                    wire.Fingerprint
	cur                       bool   // an operation runs
	curTag                    uint32 // its entry's tag
}

// state reads the history's counters.
func (h *opHistory) state() histState {
	for {
		s := h.lock.ReadBegin()
		st := histState{n: h.n, started: h.started, running: h.running, done: h.done, doneFP: h.doneFP}
		if cur := h.cur; cur != nil {
			st.cur, st.curTag = true, cur.tag
		}
		if !h.lock.Retry(s) {
			return st
		}
	}
}

// entry returns a copy of entry i (the i+1-th ever written), and false if
// the ring has overwritten it since. Read one entry at a time, each read
// is short next to an operation, so that a writer recording operations
// back to back does not keep a reader retrying (a copy of the whole ring,
// tens of kilobytes, takes as long as several operations).
func (h *opHistory) entry(i uint64) (opEntry, bool) {
	for {
		s := h.lock.ReadBegin()
		e := h.ring[i&h.mask]
		if !h.lock.Retry(s) {
			return e, e.tag == uint32(i+1)
		}
	}
}

// answer answers a probe about seq: whether this rank reached it and with
// which call, what it runs now and waits on, and what it completed last.
func (h *opHistory) answer(seq uint64) wire.Msg {
	st := h.state()
	m := wire.Msg{Type: wire.ProbeAnswer, Seq: seq, Current: st.running, Done: st.done, DoneOp: st.doneFP, Waiting: -1}
	if st.running != 0 && st.cur {
		m.Waiting = int(untag(h.waiting.Load(), st.curTag))
	}
	if seq > st.started {
		m.State = notReached
		return m
	}
	m.State = forgotten
	for i := uint64(0); i < min(st.n, uint64(len(h.ring))); i++ {
		e, ok := h.entry(st.n - 1 - i)
		if !ok {
			break // overwritten since, and so is everything older
		}
		if !e.coll {
			continue
		}
		if e.seq == seq {
			m.State, m.Op = reached, e.fp
			break
		}
		if e.seq < seq {
			break
		}
	}
	return m
}

// records returns the last n entries, oldest first: fewer if the ring
// overwrote the oldest of them while the newer were read (newest first,
// so that what is lost to a fast writer is the oldest).
func (h *opHistory) records(n int) []OpRecord {
	st := h.state()
	k := min(uint64(n), st.n, uint64(len(h.ring)))
	out := make([]OpRecord, 0, k)
	for i := st.n; i > st.n-k; i-- {
		e, ok := h.entry(i - 1)
		if !ok && len(out) == 0 {
			// Even the newest was overwritten (the reader was
			// descheduled for a lap of the ring): start again from
			// the writer's position now.
			st = h.state()
			k = min(uint64(n), st.n, uint64(len(h.ring)))
			i = st.n + 1
			continue
		}
		if !ok {
			break
		}
		rec := e.record()
		if e.state == entryRunning {
			e = h.marked(e)
			rec = e.record()
			if e.state == entryRunning {
				rec.Peer = int(h.waitingOn(&e))
			}
		}
		out = append(out, rec)
	}
	slices.Reverse(out)
	return out
}

// record converts e.
func (e *opEntry) record() OpRecord {
	rec := OpRecord{Seq: e.seq, Op: e.name, Bytes: e.bytes, State: e.state.OpState(), Start: e.start.time(), End: e.end.time(), Peer: int(e.peer), Error: e.err}
	if e.hasDType {
		rec.DType = e.dtype.String()
	}
	if e.sched != algo.AlgoAuto {
		rec.Schedule = e.sched.String()
	}
	return rec
}

// FlightRecord returns this rank's flight record: its last operations
// (OCCL_FLIGHT_RECORDER of them, DefaultFlightRecord by default), oldest
// first, followed by the operations issued and still queued. Keeping the
// record costs each operation a few stores into a fixed ring; it is
// always on.
func (c *Communicator) FlightRecord() []OpRecord {
	recs := c.hist.records(c.obs.flightLen)
	c.queue.mu.Lock()
	c.queue.numberQueued()
	for _, r := range c.queue.pending {
		q := &opEntry{seq: r.seq, name: r.name, state: entryQueued, peer: -1}
		q.dtype, q.hasDType, q.bytes = entrySize(&r.hdr, r.args.p2p, c.size)
		recs = append(recs, q.record())
	}
	c.queue.mu.Unlock()
	return recs
}

// FlightDump is the JSON form of a flight record that DumpFlightRecord
// writes.
type FlightDump struct {
	Rank int    `json:"rank"`
	Size int    `json:"size"`
	Comm string `json:"comm"`
	// Error is the communicator's failure, empty while it is healthy.
	Error string     `json:"error,omitempty"`
	Time  time.Time  `json:"time"`
	Ops   []OpRecord `json:"ops"`
}

// DumpFlightRecord writes the flight record to w as JSON (a FlightDump).
func (c *Communicator) DumpFlightRecord(w io.Writer) error {
	return c.dumpFlightRecord(w, c.Err())
}

// dumpFlightRecord is DumpFlightRecord with the communicator's failure
// given (nil: healthy).
func (c *Communicator) dumpFlightRecord(w io.Writer, failure error) error {
	d := FlightDump{Rank: c.rank, Size: c.size, Comm: fmt.Sprintf("%016x", c.id), Time: time.Now(), Ops: c.FlightRecord()}
	if failure != nil {
		d.Error = failure.Error()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&d); err != nil {
		return fmt.Errorf("occl: rank %d: writing the flight record: %w", c.rank, err)
	}
	return nil
}
