package comm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/trace"
)

// Environment variables of the timeline and the flight recorder.
const (
	// TraceEnv names a directory: every rank writes its timeline there as
	// Chrome trace-event JSON (rank-<r>.json, comm-<id>-rank-<r>.json for
	// a communicator made by Split) when it closes or fails, and its
	// flight record (flight-rank-<r>.json, ...) when it fails.
	TraceEnv = "OCCL_TRACE"
	// FlightRecorderEnv sets how many operations the flight record keeps
	// (DefaultFlightRecord; 0 turns the automatic dumps off).
	FlightRecorderEnv = "OCCL_FLIGHT_RECORDER"
	// FlightRecorderSignalEnv=1 makes the process dump the flight record
	// of every live communicator on SIGUSR1. Off by default: a library
	// must not take a signal its program may use.
	FlightRecorderSignalEnv = "OCCL_FLIGHT_RECORDER_SIGNAL"
)

// observer holds a communicator's timeline recorder and the flight
// record's settings.
type observer struct {
	tr        *trace.Recorder // nil unless OCCL_TRACE is set
	dir       string          // OCCL_TRACE
	flightLen int             // operations FlightRecord returns
	signal    bool            // registered for SIGUSR1

	// The running operation's transfers, while a timeline is recorded:
	// the schedules' goroutines append, endOp takes them.
	xmu   sync.Mutex
	xfers []trace.Transfer
	xomit int
}

// MaxTraceTransfers bounds the transfers (messages sent or received) the
// timeline records per operation: the first ones are kept, the rest only
// counted. A ring AllReduce whose segments fit one chunk sends and
// receives 4(p-1) messages: all of them up to 65 ranks.
const MaxTraceTransfers = 256

// transfer records, for the timeline, a message of the running operation
// to or from peer that started at start and ends now.
func (o *observer) transfer(peer int, send bool, step uint32, bytes int, start time.Time) {
	end := time.Now()
	o.xmu.Lock()
	if len(o.xfers) < MaxTraceTransfers {
		o.xfers = append(o.xfers, trace.Transfer{Peer: peer, Send: send, Step: step, Bytes: bytes, Start: start, End: end})
	} else {
		o.xomit++
	}
	o.xmu.Unlock()
}

// takeTransfers returns the running operation's transfers and how many
// were left out, and starts the next operation's.
func (o *observer) takeTransfers() ([]trace.Transfer, int) {
	o.xmu.Lock()
	defer o.xmu.Unlock()
	if len(o.xfers) == 0 && o.xomit == 0 {
		return nil, 0
	}
	x, omit := slices.Clone(o.xfers), o.xomit
	o.xfers, o.xomit = o.xfers[:0], 0
	return x, omit
}

// Timeline returns the recorder of c's timeline, nil unless OCCL_TRACE is
// set. A program may add its own phases to it with Span on thread
// trace.App: they are written with c's operations, on the same clock, so
// that occl-trace merge shows both.
func (c *Communicator) Timeline() *trace.Recorder { return c.obs.tr }

// setupObserver reads OCCL_TRACE, OCCL_FLIGHT_RECORDER and
// OCCL_FLIGHT_RECORDER_SIGNAL and prepares c's recorders. The worker has
// not started.
func (c *Communicator) setupObserver() {
	o := &c.obs
	o.flightLen = DefaultFlightRecord
	warn := logx.For(c.log, logx.Init).Warn
	if v := os.Getenv(FlightRecorderEnv); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			warn("occl: ignoring "+FlightRecorderEnv+": want a number of operations", "value", v)
		} else {
			o.flightLen = n
		}
	}
	c.hist.init(o.flightLen, c.size)
	if dir := os.Getenv(TraceEnv); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			warn("occl: no timeline: cannot create "+TraceEnv+" directory", "dir", dir, "err", err)
		} else {
			o.dir = dir
			host := ""
			if len(c.hostIDs) > 0 {
				host = c.hostIDs[c.hosts[c.rank]]
			}
			o.tr = trace.NewRecorder(trace.Meta{Rank: c.rank, Size: c.size, Comm: fmt.Sprintf("%016x", c.id),
				FabricRank: c.fabricRank(c.rank), Host: host, PID: os.Getpid()})
		}
	}
	if v := os.Getenv(FlightRecorderSignalEnv); v == "1" || strings.EqualFold(v, "true") {
		o.signal = true
		watchSignal(c)
	}
}

// setClockOffset records rank 0's clock minus this rank's for the
// timeline.
func (o *observer) setClockOffset(d time.Duration) { o.tr.SetClockOffset(d) }

// inheritObserver places the timeline of c, made by Split from parent,
// on the fabric: its process row is this rank's fabric rank, and its clock
// offset is the parent's (to the fabric's rank 0, not the group leader).
func (c *Communicator) inheritObserver(parent *Communicator) {
	c.obs.tr.SetSub(c.fabricRank(c.rank))
	c.obs.tr.SetClockOffset(parent.obs.tr.ClockOffset())
}

// fileName returns the name of this rank's file of the given kind
// ("rank" for the timeline, "flight-rank" for the flight record).
func (c *Communicator) fileName(kind string) string {
	if c.fabricRanks == nil {
		return fmt.Sprintf("%s-%d.json", kind, c.rank)
	}
	return fmt.Sprintf("comm-%016x-%s-%d.json", c.id, kind, c.rank)
}

// chose records the schedule the running operation runs, with the cost
// model's prediction when a timeline is recorded, and logs the choice
// (logChoice).
func (c *Communicator) chose(ctx context.Context, l *layout, op algo.Collective, a algo.Algorithm, bytes int, matrix [][]int) {
	var predicted time.Duration
	if c.obs.tr != nil && l.model != nil {
		var s float64
		var ok bool
		if matrix != nil {
			s, ok = l.model.PredictAllToAll(a, matrix)
		} else {
			s, ok = l.model.Predict(op, a, bytes)
		}
		if ok && s > 0 && s < 1e6 {
			predicted = time.Duration(s * float64(time.Second))
		}
	}
	c.hist.chose(a, bytes, predicted)
	c.logChoice(ctx, op, bytes, a, matrix)
}

// now reads the clock for an operation's record: the counter (see stamp),
// or, while a timeline is recorded, the monotonic clock itself, which the
// timeline's other events are read from (time.Now), so that an operation's
// start and end order with them to the nanosecond.
func (c *Communicator) now() stamp {
	if c.obs.tr != nil {
		return stamp(time.Since(clockBase))
	}
	return now()
}

// endOp records the end of the running operation.
func (c *Communicator) endOp(err error) {
	if c.obs.tr == nil {
		c.hist.end(now(), err, nil)
		return
	}
	var e opEntry
	c.hist.end(c.now(), err, &e)
	op := e.traceOp()
	op.Transfers, op.TransfersOmitted = c.obs.takeTransfers()
	c.obs.tr.Op(op)
}

// traceOp converts e for the timeline.
func (e *opEntry) traceOp() trace.Op {
	op := trace.Op{Name: e.name, Seq: e.seq, Bytes: e.bytes, Predicted: e.predicted, Peer: int(e.peer),
		Err: e.err, Start: e.start.time(), End: e.end.time()}
	if e.hasDType {
		op.DType = e.dtype.String()
	}
	if e.sched != algo.AlgoAuto {
		op.Schedule = e.sched.String()
	}
	return op
}

// traceRewire records a rewire's steps: the pause from the call to the
// start (on the waits thread: the operations issued before it run
// meanwhile), then nested in its operation and laid out back from the end
// from the steps' durations, plan, switch with connect and verify inside
// it, and resume.
func (c *Communicator) traceRewire(called time.Time, t *RewireTimes) {
	tr := c.obs.tr
	if tr == nil {
		return
	}
	span := func(name string, start time.Time, d time.Duration) {
		if d > 0 {
			tr.Span(trace.Span{Name: name, Cat: "rewire", Start: start, End: start.Add(d)})
		}
	}
	if t.Pause > 0 {
		tr.Span(trace.Span{Name: "pause", Cat: "rewire", Start: called, End: called.Add(t.Pause), Tid: trace.Waits})
	}
	end := called.Add(t.Total)
	resume := end.Add(-t.Resume)
	apply := resume.Add(-t.Apply)
	span("plan", apply.Add(-t.Plan), t.Plan)
	span("switch", apply, t.Apply)
	span("connect", apply, t.Connect)
	span("verify", apply.Add(t.Connect), t.Verify)
	span("resume", resume, t.Resume)
}

// dumpOnFail marks the running operation failed by pe and writes the
// flight record, as the communicator fails with pe (the timeline follows
// once the connections are closed).
func (c *Communicator) dumpOnFail(pe *PeerError) {
	c.hist.failRunning(pe)
	if c.obs.flightLen == 0 {
		return
	}
	path, err := c.writeFlightRecord(pe)
	l := logx.For(c.log, logx.Coll)
	if err != nil {
		l.Warn("occl: could not write the flight record", "err", err)
	} else {
		l.Warn("occl: flight record written", "path", path)
	}
}

// writeFlightRecord writes the flight record, with the communicator's
// failure (nil: healthy), to OCCL_TRACE's directory, or else the temporary
// directory, and returns the file's path.
func (c *Communicator) writeFlightRecord(failure error) (string, error) {
	var path string
	if c.obs.dir != "" {
		path = filepath.Join(c.obs.dir, c.fileName("flight-rank"))
	} else {
		path = filepath.Join(os.TempDir(), fmt.Sprintf("occl-flight-%016x-rank-%d-%d.json", c.id, c.rank, os.Getpid()))
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", fmt.Errorf("occl: rank %d: flight record: %w", c.rank, err)
	}
	err = c.dumpFlightRecord(f, failure)
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("occl: rank %d: flight record %s: %w", c.rank, path, err)
	}
	return path, nil
}

// writeTrace writes the timeline, if one is recorded, with the running
// operation (if any) ending now.
func (c *Communicator) writeTrace() {
	if c.obs.tr == nil {
		return
	}
	var open []trace.Op
	if e, ok := c.hist.runningEntry(); ok {
		e.end = now()
		open = append(open, e.traceOp())
	}
	path := filepath.Join(c.obs.dir, c.fileName("rank"))
	if err := c.obs.tr.WriteFile(path, open...); err != nil {
		logx.For(c.log, logx.Coll).Warn("occl: could not write the timeline", "err", err)
	}
}

// closeObserver writes the timeline as the communicator closes.
func (c *Communicator) closeObserver() {
	if c.obs.signal {
		unwatchSignal(c)
	}
	c.writeTrace()
}
