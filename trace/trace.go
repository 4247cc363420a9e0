// Package trace records timelines of occl communicators as Chrome
// trace-event JSON (the JSON object format of the Trace Event Format, which
// Perfetto and chrome://tracing load) and merges the files of a job's ranks
// into one timeline.
//
// A Recorder buffers a rank's operations and spans in memory and writes
// them as one file, normally at the communicator's Close or failure. Every
// operation becomes one complete event ("ph":"X") on the rank's worker
// thread, with its sequence number, size, data type, schedule and the cost
// model's predicted time as arguments; steps inside it (a rewire's pause,
// plan, switch, connect, verify and resume) are complete events nested in
// it. The messages its schedule sent and received (Transfer) lie within its
// time on threads of their own, one per peer and direction, and a program
// may add its own phases on the App thread.
//
// Timestamps in a file are microseconds since the recorder's zero, a
// moment on the rank's own clock whose wall-clock time is in the file's
// metadata (Meta.ZeroUnixNano), together with the estimated offset of the
// rank's clock to rank 0's (Meta.ClockOffsetNano). Merge uses both to put
// every rank on rank 0's clock.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Event is one event of the Trace Event Format. Ts and Dur are in
// microseconds.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Meta describes the communicator rank that wrote a file. It is the
// file's "otherData".
type Meta struct {
	// Rank and Size are the rank in its communicator and the
	// communicator's size.
	Rank int `json:"rank"`
	Size int `json:"size"`
	// Comm is the communicator id in hex.
	Comm string `json:"comm"`
	// FabricRank is the rank in the communicator Init or NewLocal made,
	// for a communicator made by Split (then Sub is set); else Rank.
	FabricRank int  `json:"fabric_rank"`
	Sub        bool `json:"sub,omitempty"`
	// Host and PID identify the process.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid"`
	// ZeroUnixNano is the wall-clock time, on this rank's clock, of
	// timestamp 0.
	ZeroUnixNano int64 `json:"zero_unix_ns"`
	// ClockOffsetNano is the clock of rank 0 (of the communicator Init
	// made, for one made by Split) minus this rank's clock, as estimated
	// at bootstrap (0 on rank 0 and for ranks sharing its process).
	ClockOffsetNano int64 `json:"clock_offset_ns"`
	// Dropped counts the records left out because the recorder was full.
	Dropped int `json:"dropped,omitempty"`
}

// File is a trace file in the JSON object format.
type File struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit,omitempty"`
	OtherData       *Meta   `json:"otherData,omitempty"`
}

// Op is one operation of a communicator.
type Op struct {
	// Name is the operation, e.g. "AllReduce".
	Name string
	// Seq is the collective sequence number (0 for point-to-point).
	Seq uint64
	// Bytes is the size of the operation's buffer; DType its element type.
	Bytes int64
	DType string
	// Schedule is the schedule that ran (empty if none was chosen);
	// Predicted the cost model's prediction for it (0 if unknown).
	Schedule  string
	Predicted time.Duration
	// Peer is the peer the operation waited on when it failed (-1: none).
	Peer int
	// Err is the operation's error, empty if it succeeded.
	Err        string
	Start, End time.Time
	// Transfers are the messages the operation's schedule sent and
	// received, in the order they ended; TransfersOmitted counts those
	// left out of Transfers (the recording communicator bounds them per
	// operation).
	Transfers        []Transfer
	TransfersOmitted int
}

// Transfer is one message an operation's schedule sent to or received
// from a peer. It is drawn on its own thread per peer and direction
// (TransferTid), inside its operation's time: a schedule sends and
// receives at once, so the messages of one operation overlap.
type Transfer struct {
	// Peer is the rank in the communicator sent to or received from.
	Peer int
	// Send is true for a message sent, false for one received.
	Send bool
	// Step is the message's step label in the schedule.
	Step uint32
	// Bytes is the message's payload size.
	Bytes      int
	Start, End time.Time
}

// TransferTid returns the thread id of the transfers to (send) or from
// peer.
func TransferTid(peer int, send bool) int {
	if send {
		return transferTid + 2*peer
	}
	return transferTid + 2*peer + 1
}

// transferTid is the first thread id of transfers; the ones below are
// Worker, Waits and App.
const transferTid = 16

// Span is a step inside an operation, or any other interval.
type Span struct {
	Name, Cat  string
	Start, End time.Time
	// Tid is the thread: Worker (also for 0) for steps of the running
	// operation, Waits for waits before an operation starts, App for the
	// program's own phases.
	Tid int
	// Args are the event's arguments (nil: none).
	Args map[string]any
}

// DefaultMaxRecords bounds the records a Recorder keeps (operations,
// their transfers and spans); later ones are counted in Meta.Dropped.
const DefaultMaxRecords = 1 << 20

// Thread ids of a rank's process row.
const (
	// Worker is the thread of the rank's operations and their steps.
	Worker = 1
	// Waits is the thread of waits before an operation starts (a
	// rewire's pause while the operations before it complete).
	Waits = 2
	// App is the thread of the program's own phases, recorded with Span
	// into the communicator's recorder (see comm.Communicator.Timeline).
	App = 3
)

// threadNames names the threads below the transfers'.
var threadNames = map[int]string{Worker: "operations", Waits: "waits", App: "application"}

// Recorder buffers one rank's timeline. Its methods are safe for
// concurrent use; a nil *Recorder records nothing.
type Recorder struct {
	mu    sync.Mutex
	zero  time.Time
	meta  Meta
	ops   [][]Op // in chunks of opChunk, so that appending never copies
	nops  int
	spans []Span
	nrec  int // operations, transfers and spans kept
	max   int
}

// opChunk is the number of operations per chunk of a Recorder.
const opChunk = 1024

// NewRecorder returns a recorder whose zero is now.
func NewRecorder(meta Meta) *Recorder {
	now := time.Now()
	meta.ZeroUnixNano = now.UnixNano()
	return &Recorder{zero: now, meta: meta, max: DefaultMaxRecords}
}

// SetClockOffset records rank 0's clock minus this rank's clock.
func (r *Recorder) SetClockOffset(d time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.meta.ClockOffsetNano = int64(d)
	r.mu.Unlock()
}

// SetSub marks the recorder's communicator as made by Split, and records
// the rank's fabric rank (Meta.FabricRank and Meta.Sub).
func (r *Recorder) SetSub(fabricRank int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.meta.FabricRank, r.meta.Sub = fabricRank, true
	r.mu.Unlock()
}

// ClockOffset returns what SetClockOffset recorded (0 for a nil
// Recorder).
func (r *Recorder) ClockOffset() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.meta.ClockOffsetNano)
}

// Op records an operation.
func (r *Recorder) Op(op Op) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.nrec < r.max {
		if room := r.max - r.nrec - 1; len(op.Transfers) > room {
			r.meta.Dropped += len(op.Transfers) - room
			op.TransfersOmitted += len(op.Transfers) - room
			op.Transfers = op.Transfers[:room]
		}
		if r.nops%opChunk == 0 {
			r.ops = append(r.ops, make([]Op, 0, opChunk))
		}
		last := &r.ops[len(r.ops)-1]
		*last = append(*last, op)
		r.nops++
		r.nrec += 1 + len(op.Transfers)
	} else {
		r.meta.Dropped++
	}
	r.mu.Unlock()
}

// Span records a span (on the worker thread unless s.Tid says
// otherwise).
func (r *Recorder) Span(s Span) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.nrec < r.max {
		r.spans = append(r.spans, s)
		r.nrec++
	} else {
		r.meta.Dropped++
	}
	r.mu.Unlock()
}

// micros returns t as microseconds since the zero.
func (r *Recorder) micros(t time.Time) float64 {
	return float64(t.Sub(r.zero).Nanoseconds()) / 1e3
}

// File returns what was recorded so far as a trace file: a process named
// after the rank, its worker thread, and one complete event per operation
// and span, each operation's transfers on their threads (one per peer and
// direction), sorted by start (a parent before the children it contains).
// The operations in open, still running, are added as if they ended at
// their End.
func (r *Recorder) File(open ...Op) File {
	r.mu.Lock()
	defer r.mu.Unlock()
	meta := r.meta
	pid := meta.FabricRank
	evs := make([]Event, 0, 3+r.nrec+len(open))
	evs = append(evs, processName(pid, meta))
	threads := map[int]string{Worker: threadNames[Worker]}
	all := make([]Op, 0, r.nops+len(open))
	for _, chunk := range r.ops {
		all = append(all, chunk...)
	}
	for _, op := range append(all, open...) {
		args := map[string]any{"op": op.Name, "seq": op.Seq, "bytes": op.Bytes}
		if op.DType != "" {
			args["dtype"] = op.DType
		}
		if op.Schedule != "" {
			args["schedule"] = op.Schedule
		}
		if op.Predicted > 0 {
			args["predicted_us"] = float64(op.Predicted.Nanoseconds()) / 1e3
		}
		if op.Err != "" {
			args["error"] = op.Err
			if op.Peer >= 0 {
				args["peer"] = op.Peer
			}
		}
		if n := len(op.Transfers) + op.TransfersOmitted; n > 0 {
			args["transfers"] = n
			if op.TransfersOmitted > 0 {
				args["transfers_omitted"] = op.TransfersOmitted
			}
		}
		name := op.Name
		if op.Seq > 0 {
			name = fmt.Sprintf("%s #%d", op.Name, op.Seq)
		}
		evs = append(evs, Event{Name: name, Cat: "op", Ph: "X", Ts: r.micros(op.Start), Dur: dur(op.Start, op.End), Pid: pid, Tid: Worker, Args: args})
		for _, x := range op.Transfers {
			tid := TransferTid(x.Peer, x.Send)
			xname := fmt.Sprintf("recv from %d", x.Peer)
			if x.Send {
				xname = fmt.Sprintf("send to %d", x.Peer)
			}
			if _, ok := threads[tid]; !ok {
				threads[tid] = xname
			}
			evs = append(evs, Event{Name: xname, Cat: "transfer", Ph: "X", Ts: r.micros(x.Start), Dur: dur(x.Start, x.End), Pid: pid, Tid: tid,
				Args: map[string]any{"op": op.Name, "seq": op.Seq, "peer": x.Peer, "step": x.Step, "bytes": x.Bytes}})
		}
	}
	for _, s := range r.spans {
		tid := s.Tid
		if tid == 0 {
			tid = Worker
		}
		if _, ok := threads[tid]; !ok {
			threads[tid] = threadNames[tid]
		}
		evs = append(evs, Event{Name: s.Name, Cat: s.Cat, Ph: "X", Ts: r.micros(s.Start), Dur: dur(s.Start, s.End), Pid: pid, Tid: tid, Args: s.Args})
	}
	for _, tid := range slices.Sorted(maps.Keys(threads)) {
		name := threads[tid]
		if name == "" {
			name = fmt.Sprintf("thread %d", tid)
		}
		evs = append(evs, Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}},
			Event{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"sort_index": tid}})
	}
	sortEvents(evs)
	return File{TraceEvents: evs, DisplayTimeUnit: "ns", OtherData: &meta}
}

func dur(start, end time.Time) float64 {
	return float64(max(end.Sub(start), 0).Nanoseconds()) / 1e3
}

func processName(pid int, m Meta) Event {
	name := fmt.Sprintf("rank %d", m.Rank)
	if m.Sub {
		name = fmt.Sprintf("rank %d (comm %s rank %d)", m.FabricRank, m.Comm, m.Rank)
	}
	return Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}}
}

// sortEvents orders metadata first, then by start, a longer event before
// a shorter one starting at the same time (its parent).
func sortEvents(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		if (a.Ph == "M") != (b.Ph == "M") {
			if a.Ph == "M" {
				return -1
			}
			return 1
		}
		switch {
		case a.Ts < b.Ts:
			return -1
		case a.Ts > b.Ts:
			return 1
		case a.Dur > b.Dur:
			return -1
		case a.Dur < b.Dur:
			return 1
		}
		return 0
	})
}

// WriteTo writes the trace file as JSON.
func (r *Recorder) WriteTo(w io.Writer) (int64, error) {
	return r.write(w)
}

func (r *Recorder) write(w io.Writer, open ...Op) (int64, error) {
	f := r.File(open...)
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	if err := json.NewEncoder(bw).Encode(&f); err != nil {
		return cw.n, err
	}
	err := bw.Flush()
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteFile writes the trace file to path, through a temporary file
// renamed into place, so that a reader never sees half a file. The
// operations in open are added as File adds them.
func (r *Recorder) WriteFile(path string, open ...Op) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	_, err = r.write(tmp, open...)
	if e := tmp.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("trace: writing %s: %w", path, err)
	}
	return nil
}

// ReadFile reads a trace file.
func ReadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("trace: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return File{}, fmt.Errorf("trace: %s: %w", path, err)
	}
	return f, nil
}

// Merge puts the files of a job's ranks on one timeline: every file's
// events are shifted onto rank 0's clock (Meta.ZeroUnixNano plus
// Meta.ClockOffsetNano) so that the earliest zero is timestamp 0, and each
// file becomes one process row, numbered by its fabric rank; the rows of
// communicators made by Split come after, numbered from the fabric rank up
// in steps of the number of files. Files without Meta are refused.
func Merge(files []File) (File, error) {
	if len(files) == 0 {
		return File{}, fmt.Errorf("trace: merge: no files")
	}
	base := int64(0)
	for i, f := range files {
		if f.OtherData == nil {
			return File{}, fmt.Errorf("trace: merge: file %d has no occl metadata (otherData)", i)
		}
		z := f.OtherData.ZeroUnixNano + f.OtherData.ClockOffsetNano
		if i == 0 || z < base {
			base = z
		}
	}
	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ma, mb := files[a].OtherData, files[b].OtherData
		if ma.Sub != mb.Sub {
			if mb.Sub {
				return -1
			}
			return 1
		}
		return ma.FabricRank - mb.FabricRank
	})
	used := map[int]bool{}
	var out File
	out.DisplayTimeUnit = "ns"
	for _, i := range order {
		f := files[i]
		m := f.OtherData
		pid := m.FabricRank
		for used[pid] {
			pid += len(files)
		}
		used[pid] = true
		shift := float64(m.ZeroUnixNano+m.ClockOffsetNano-base) / 1e3
		out.TraceEvents = append(out.TraceEvents, Event{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}})
		for _, e := range f.TraceEvents {
			e.Pid = pid
			if e.Ph != "M" {
				e.Ts += shift
			}
			out.TraceEvents = append(out.TraceEvents, e)
		}
	}
	sortEvents(out.TraceEvents)
	return out, nil
}

// MergeDir merges the trace files (*.json) of dir; see Merge.
func MergeDir(dir string) (File, error) {
	files, err := ReadDir(dir)
	if err != nil {
		return File{}, err
	}
	return Merge(files)
}

// ReadDir reads the trace files (*.json) occl's ranks wrote into dir, in
// the order of their names. Files without occl's metadata (an earlier
// merge) are left out.
func ReadDir(dir string) ([]File, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("trace: no trace files (*.json) in %s", dir)
	}
	slices.Sort(paths)
	var files []File
	for _, p := range paths {
		f, err := ReadFile(p)
		if err != nil {
			return nil, err
		}
		if f.OtherData == nil {
			continue // not an occl rank's file (e.g. an earlier merge)
		}
		files = append(files, f)
	}
	return files, nil
}
