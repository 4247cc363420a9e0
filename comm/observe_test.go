package comm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/trace"
)

// opsOf returns the operations ("ph":"X" of category op) of pid in f, in
// file order.
func opsOf(f trace.File, pid int) []trace.Event {
	var ops []trace.Event
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Cat == "op" && e.Pid == pid {
			ops = append(ops, e)
		}
	}
	return ops
}

// TestTraceLocal runs collectives and a rewire on 4 ranks with OCCL_TRACE
// set, then checks every rank's file and the merged timeline: every
// operation once per rank, in sequence order, with its arguments, and the
// rewire's steps nested in it.
func TestTraceLocal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(comm.TraceEnv, dir)
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/0-1/2-3/2-3")
	const size = 8
	want := []string{"AllReduce", "AllReduce", "Broadcast", "Rewire", "AllGather", "Barrier", "AllReduce"}
	requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
		x := make([]float32, 1024)
		y := make([]float32, 1024*size)
		steps := []func() error{
			func() error { return c.AllReduce(ctx, comm.Slice(x), comm.Slice(x), comm.Sum) },
			func() error { return c.AllReduce(ctx, comm.Slice(x[:5]), comm.Slice(x[:5]), comm.Max) },
			func() error { return c.Broadcast(ctx, comm.Slice(x), comm.Slice(x), 2) },
			func() error {
				_, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error { return nil }})
				return err
			},
			func() error { return c.AllGather(ctx, comm.Slice(x), comm.Slice(y)) },
			func() error { return c.Barrier(ctx) },
			func() error { return c.AllReduce(ctx, comm.Slice(y), comm.Slice(y), comm.Sum) },
		}
		for i, s := range steps {
			if err := s(); err != nil {
				return fmt.Errorf("step %d (%s): %w", i, want[i], err)
			}
		}
		return nil
	}, comm.WithTopology(base)))

	var files []trace.File
	for r := range size {
		f, err := trace.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		if f.OtherData == nil || f.OtherData.Rank != r || f.OtherData.Size != size {
			t.Fatalf("rank %d: metadata %+v", r, f.OtherData)
		}
		ops := opsOf(f, r)
		if len(ops) != len(want) {
			t.Fatalf("rank %d: %d operations, want %d: %+v", r, len(ops), len(want), ops)
		}
		for i, e := range ops {
			if e.Args["op"] != want[i] || e.Args["seq"] != float64(i+1) || e.Name != fmt.Sprintf("%s #%d", want[i], i+1) {
				t.Errorf("rank %d op %d: %s %v, want %s seq %d", r, i, e.Name, e.Args, want[i], i+1)
			}
			if i > 0 && e.Ts < ops[i-1].Ts+ops[i-1].Dur {
				t.Errorf("rank %d: op %d starts before op %d ends", r, i, i-1)
			}
		}
		ar := ops[0].Args
		if ar["bytes"] != float64(4096) || ar["dtype"] != "float32" || ar["schedule"] == nil || ar["predicted_us"] == nil {
			t.Errorf("rank %d: AllReduce args %v: want bytes 4096, float32, a schedule and a prediction", r, ar)
		}
		// The rewire's steps are inside it.
		rw := ops[3]
		steps := map[string]bool{}
		for _, e := range f.TraceEvents {
			if e.Cat == "rewire" {
				steps[e.Name] = true
				if e.Name == "pause" {
					if e.Tid != trace.Waits || e.Ts+e.Dur > rw.Ts+0.001+rw.Dur {
						t.Errorf("rank %d: pause %+v: want it on the waits thread, ending as the rewire runs", r, e)
					}
					continue
				}
				if e.Tid != trace.Worker {
					t.Errorf("rank %d: rewire step %s on thread %d", r, e.Name, e.Tid)
				}
				if e.Ts < rw.Ts || e.Ts+e.Dur > rw.Ts+rw.Dur+0.001 {
					t.Errorf("rank %d: rewire step %s [%v, %v] outside the rewire [%v, %v]", r, e.Name, e.Ts, e.Ts+e.Dur, rw.Ts, rw.Ts+rw.Dur)
				}
			}
		}
		for _, s := range []string{"pause", "plan", "switch", "connect", "verify", "resume"} {
			if !steps[s] {
				t.Errorf("rank %d: no rewire step %s (have %v)", r, s, steps)
			}
		}
		files = append(files, f)
	}
	m, err := trace.MergeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for r := range size {
		ops := opsOf(m, r)
		if len(ops) != len(want) {
			t.Fatalf("merged: rank %d has %d operations, want %d", r, len(ops), len(want))
		}
		for i, e := range ops {
			if e.Args["seq"] != float64(i+1) {
				t.Errorf("merged: rank %d op %d has seq %v", r, i, e.Args["seq"])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "flight-rank-0.json")); err == nil {
		t.Error("a flight record was dumped by a healthy run")
	}
}

// readFlight reads a flight record file.
func readFlight(t *testing.T, path string) comm.FlightDump {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d comm.FlightDump
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return d
}

// checkKilledRecords checks what the survivors of a job whose rank victim
// was killed in an operation opName of 32 MiB left in dir: a flight
// record with the failure whose last operation is that operation, failed,
// after a run of completed ones, on at least one survivor, and on the
// others that or the one before it, done (a survivor the failure reached
// between two operations, as a rank that finished a lent AllToAll before
// the kill and was then descheduled: it fails the next at once, before
// recording it); and timelines that merge into one with every survivor's
// operations.
func checkKilledRecords(t *testing.T, dir string, np, victim int, opName string) {
	t.Helper()
	var seqs []uint64
	inOp := 0
	for r := range np {
		if r == victim {
			continue
		}
		d := readFlight(t, filepath.Join(dir, fmt.Sprintf("flight-rank-%d.json", r)))
		if d.Rank != r || d.Error == "" || len(d.Ops) < 2 {
			t.Fatalf("rank %d: flight record of rank %d, error %q, %d ops", r, d.Rank, d.Error, len(d.Ops))
		}
		last := d.Ops[len(d.Ops)-1]
		failedSeq := last.Seq
		switch {
		case last.Op != opName || last.Bytes != 32<<20 || last.Start.IsZero():
			t.Errorf("rank %d: last operation %+v, want a 32 MiB %s", r, last, opName)
		case last.State == comm.OpFailed && last.Error != "":
			inOp++
		case last.State == comm.OpDone && last.Error == "":
			failedSeq++
		default:
			t.Errorf("rank %d: last operation %+v, want the 32 MiB %s failed, or done before the failure", r, last, opName)
		}
		for i, op := range d.Ops[:len(d.Ops)-1] {
			if op.State != comm.OpDone || op.Seq != last.Seq-uint64(len(d.Ops)-1-i) {
				t.Errorf("rank %d: op %d %+v, want done with seq %d", r, i, op, last.Seq-uint64(len(d.Ops)-1-i))
			}
		}
		seqs = append(seqs, failedSeq)
	}
	if inOp == 0 {
		t.Errorf("no survivor's flight record names the %s the victim was killed in", opName)
	}
	for _, s := range seqs[1:] {
		if s != seqs[0] && s != seqs[0]+1 && s+1 != seqs[0] {
			t.Errorf("survivors failed at seqs %v: more than one apart", seqs)
		}
	}
	m, err := trace.MergeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for r := range np {
		if r != victim && len(opsOf(m, r)) == 0 {
			t.Errorf("merged timeline has no operations of rank %d", r)
		}
	}
}

// TestFlightRecordOnFailure: rank 3 of 4 aborts while the others are in
// their third AllReduce; every survivor dumps its flight record into the
// OCCL_TRACE directory, naming that AllReduce as failed, and FlightRecord
// says the same.
func TestFlightRecordOnFailure(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(comm.TraceEnv, dir)
	const size = 4
	comms, err := comm.NewLocal(size)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			x := make([]float64, 300)
			for i := range 3 {
				if r == size-1 && i == 2 {
					// Abort once the others are waiting in seq 3.
					for !inSeq(comms[:size-1], 3) && ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					c.Abort()
					return
				}
				if errs[r] = c.AllReduce(ctx, comm.Slice(x), comm.Slice(x), comm.Sum); errs[r] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for r := range size - 1 {
		if !errors.Is(errs[r], comm.ErrAborted) {
			t.Fatalf("rank %d: %v, want ErrAborted", r, errs[r])
		}
		for _, d := range []comm.FlightDump{
			readFlight(t, filepath.Join(dir, fmt.Sprintf("flight-rank-%d.json", r))),
			{Rank: r, Ops: comms[r].FlightRecord()},
		} {
			if d.Rank != r || len(d.Ops) != 3 {
				t.Fatalf("rank %d: record %+v", r, d)
			}
			for i, op := range d.Ops {
				want := comm.OpDone
				if i == 2 {
					want = comm.OpFailed
				}
				if op.Seq != uint64(i+1) || op.Op != "AllReduce" || op.State != want || op.Bytes != 2400 || op.DType != "float64" {
					t.Errorf("rank %d op %d: %+v, want AllReduce seq %d of 2400 float64 bytes, %s", r, i, op, i+1, want)
				}
				if want == comm.OpDone && (op.Schedule == "" || op.End.Before(op.Start) || op.Peer != -1 || op.Error != "") {
					t.Errorf("rank %d op %d: %+v: want a schedule, an end, no peer, no error", r, i, op)
				}
			}
			if f := d.Ops[2]; !strings.Contains(f.Error, "rank 3") || f.Peer < 0 || f.Peer >= size {
				t.Errorf("rank %d: failed op %+v: want the error naming rank 3 and the peer waited on", r, f)
			}
		}
	}
}

// inSeq reports whether every communicator of comms is running seq and
// has begun waiting on a peer in it (a running operation names no peer
// until its schedule first sends or receives).
func inSeq(comms []*comm.Communicator, seq uint64) bool {
	for _, c := range comms {
		recs := c.FlightRecord()
		if len(recs) == 0 {
			return false
		}
		if last := recs[len(recs)-1]; last.Seq != seq || last.State != comm.OpRunning || last.Peer < 0 {
			return false
		}
	}
	return true
}

// TestFlightRecordQueuedAndRunning: operations issued behind one that
// cannot complete show as queued, the blocked one as running with the peer
// it waits on.
func TestFlightRecordQueuedAndRunning(t *testing.T) {
	comms := commtest.Local(t, 2)
	commtest.AbortAtEnd(t, comms)
	ctx := context.Background()
	c := comms[0]
	x := make([]int32, 10)
	if err := runBoth(comms, func(c *comm.Communicator) error { return c.Barrier(ctx) }); err != nil {
		t.Fatal(err)
	}
	c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(x), comm.Sum) // rank 1 never joins
	c.BroadcastAsync(ctx, comm.Slice(x), comm.Slice(x), 0)
	recs := recordRunning(c, 3, 1, 1)
	want := []struct {
		op    string
		seq   uint64
		state comm.OpState
		peer  int
	}{{"Barrier", 1, comm.OpDone, -1}, {"AllReduce", 2, comm.OpRunning, 1}, {"Broadcast", 3, comm.OpQueued, -1}}
	if len(recs) != len(want) {
		t.Fatalf("record %+v", recs)
	}
	for i, w := range want {
		if g := recs[i]; g.Op != w.op || g.Seq != w.seq || g.State != w.state || g.Peer != w.peer {
			t.Errorf("op %d: %+v, want %+v", i, g, w)
		}
	}
	var buf bytes.Buffer
	if err := c.DumpFlightRecord(&buf); err != nil {
		t.Fatal(err)
	}
	var d comm.FlightDump
	if err := json.Unmarshal(buf.Bytes(), &d); err != nil || len(d.Ops) != 3 || d.Ops[1].State != comm.OpRunning || d.Error != "" {
		t.Fatalf("dump %v: %s", err, buf.Bytes())
	}
}

// TestFlightRecordGroupPeer: a group's flight record entry shows the rank
// it waits on while it runs, and, done, running or queued, the bytes of
// all its sends and receives on this rank with the element type they
// share (none where they differ).
func TestFlightRecordGroupPeer(t *testing.T) {
	comms := commtest.Local(t, 3)
	commtest.AbortAtEnd(t, comms)
	ctx := context.Background()
	if err := runBoth(comms[:2], func(c *comm.Communicator) error {
		peer := 1 - c.Rank()
		return c.NewGroup().Send(comm.Slice(make([]float32, 5)), peer).Recv(comm.Slice(make([]float32, 5)), peer).Run(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	c.RecvAsync(ctx, comm.Slice(make([]int32, 4)), 2) // rank 2 never sends
	c.NewGroup().Send(comm.Slice(make([]float64, 2)), 1).Recv(comm.Slice(make([]int32, 3)), 1).Start(ctx)
	want := []comm.OpRecord{
		{Op: "Group", Bytes: 40, DType: "float32", State: comm.OpDone, Peer: -1},
		{Op: "Group", Bytes: 16, DType: "int32", State: comm.OpRunning, Peer: 2},
		{Op: "Group", Bytes: 28, State: comm.OpQueued, Peer: -1},
	}
	recs := recordRunning(c, len(want), 1, 2)
	if len(recs) != len(want) {
		t.Fatalf("record %+v, want %d entries", recs, len(want))
	}
	for i, w := range want {
		r := recs[i]
		if r.Op != w.Op || r.Bytes != w.Bytes || r.DType != w.DType || r.State != w.State || r.Peer != w.Peer {
			t.Errorf("entry %d: %s of %d bytes (dtype %q), %s, peer %d; want %s of %d bytes (dtype %q), %s, peer %d",
				i, r.Op, r.Bytes, r.DType, r.State, r.Peer, w.Op, w.Bytes, w.DType, w.State, w.Peer)
		}
	}
}

// recordRunning reads c's flight record until it has n entries, entry i
// running and waiting on peer, for up to 10 s, and returns the last one
// read.
func recordRunning(c *comm.Communicator, n, i, peer int) []comm.OpRecord {
	var recs []comm.OpRecord
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if recs = c.FlightRecord(); len(recs) == n && recs[i].State == comm.OpRunning && recs[i].Peer == peer {
			break
		}
	}
	return recs
}

// runBoth runs fn on every communicator concurrently.
func runBoth(comms []*comm.Communicator, fn func(c *comm.Communicator) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() { errs[i] = fn(c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestFlightRecorderLength: OCCL_FLIGHT_RECORDER bounds the record.
func TestFlightRecorderLength(t *testing.T) {
	t.Setenv(comm.FlightRecorderEnv, "5")
	comms, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx := context.Background()
	for range 12 {
		if err := runBoth(comms, func(c *comm.Communicator) error { return c.Barrier(ctx) }); err != nil {
			t.Fatal(err)
		}
	}
	recs := comms[1].FlightRecord()
	if len(recs) != 5 || recs[0].Seq != 8 || recs[4].Seq != 12 {
		t.Fatalf("record %+v, want seqs 8 to 12", recs)
	}
}

// TestTraceClockOffset: ranks bootstrapped over TCP record their clock's
// offset to rank 0's, measured from the rank table; in one process the
// clocks are the same, so the offset is minus the table's latency: not
// zero, and far below a second.
func TestTraceClockOffset(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(comm.TraceEnv, dir)
	comms := initTCP(t, comm.UniqueID{}, 3)
	ctx := context.Background()
	if err := runBoth(comms, func(c *comm.Communicator) error { return c.Barrier(ctx) }); err != nil {
		t.Fatal(err)
	}
	// Halves {0, 2} and {1}: rank 1 leads its half, rank 2 does not.
	subs := make([]*comm.Communicator, len(comms))
	if err := runBoth(comms, func(c *comm.Communicator) error {
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err == nil {
			subs[c.Rank()] = sub
			err = sub.Barrier(ctx)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := runBoth(subs, (*comm.Communicator).Close); err != nil {
		t.Fatal(err)
	}
	if err := runBoth(comms, (*comm.Communicator).Close); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		f, err := trace.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		off := time.Duration(f.OtherData.ClockOffsetNano)
		switch {
		case r == 0 && off != 0:
			t.Errorf("rank 0: clock offset %v, want 0", off)
		case r > 0 && (off == 0 || off.Abs() > time.Second):
			t.Errorf("rank %d: clock offset %v, want the table's latency", r, off)
		}
		if ops := opsOf(f, r); len(ops) != 2 || ops[0].Name != "Barrier #1" || ops[1].Name != "Split #2" {
			t.Errorf("rank %d: operations %+v", r, ops)
		}
		// Its half's file: on the fabric's rank r, with this process's
		// offset to the fabric's rank 0 (not to the half's leader).
		sub := subs[r]
		g, err := trace.ReadFile(filepath.Join(dir, fmt.Sprintf("comm-%016x-rank-%d.json", sub.ID(), sub.Rank())))
		if err != nil {
			t.Fatal(err)
		}
		if m := g.OtherData; !m.Sub || m.FabricRank != r || m.Rank != sub.Rank() || m.ClockOffsetNano != int64(off) {
			t.Errorf("rank %d: its half's metadata %+v, want fabric rank %d, clock offset %v", r, m, r, off)
		}
		if ops := opsOf(g, r); len(ops) != 1 || ops[0].Name != "Barrier #1" {
			t.Errorf("rank %d: its half's operations %+v", r, ops)
		}
	}
	m, err := trace.MergeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[int]string{}
	for _, e := range m.TraceEvents {
		if e.Name == "process_name" {
			rows[e.Pid] = e.Args["name"].(string)
		}
	}
	if len(rows) != 6 || rows[0] != "rank 0" || rows[2] != "rank 2" || !strings.HasPrefix(rows[1+6], "rank 1 (comm ") {
		t.Errorf("merged rows %v, want ranks 0-2 then their halves", rows)
	}
}

// TestTraceTransfers runs ring AllReduces on 4 ranks with OCCL_TRACE set
// and checks the transfers recorded inside each: sends only to the right
// neighbour and receives only from the left one, within the operation's
// slice and labelled with its sequence number, their step labels the
// ring's, and their bytes summing to the ring's bytes on the wire,
// 2(p-1)/p of the buffer each way; an AllReduce of more messages than
// MaxTraceTransfers keeps that many and counts the rest.
func TestTraceTransfers(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(comm.TraceEnv, dir)
	// Float32 elements per AllReduce, in 512-byte chunks: 16 KiB is 8
	// messages per step and direction, 48 per direction in all; 64 KiB is
	// 192 per direction, 384 in all, over the bound.
	const size, chunk = 4, 512
	counts := []int{4096, 4096, 16384}
	if 2*2*(size-1)*(counts[2]*4/size/chunk) <= comm.MaxTraceTransfers {
		t.Fatal("the last AllReduce does not exceed the bound")
	}
	requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
		for i, n := range counts {
			x := make([]float32, n)
			for j := range x {
				x[j] = float32(c.Rank())
			}
			if err := c.AllReduce(ctx, comm.Slice(x), comm.Slice(x), comm.Sum); err != nil {
				return fmt.Errorf("AllReduce %d: %w", i, err)
			}
			if x[0] != 6 || x[n-1] != 6 {
				return fmt.Errorf("AllReduce %d: got %v, want 6", i, x[0])
			}
		}
		return nil
	}, comm.WithAlgorithm(algo.AlgoRing), comm.WithChunkSize(chunk)))
	for r := range size {
		f, err := trace.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		right, left := (r+1)%size, (r+size-1)%size
		ops := opsOf(f, r)
		if len(ops) != len(counts) {
			t.Fatalf("rank %d: %d operations, want %d", r, len(ops), len(counts))
		}
		threads := map[int]string{}
		for _, e := range f.TraceEvents {
			if e.Name == "thread_name" {
				threads[e.Tid] = e.Args["name"].(string)
			}
		}
		for i, op := range ops {
			if op.Args["schedule"] != "ring" {
				t.Fatalf("rank %d op %d: schedule %v, want ring", r, i, op.Args["schedule"])
			}
			seq := op.Args["seq"].(float64)
			sent, recvd, nsent, nrecvd := 0, 0, 0, 0
			for _, e := range f.TraceEvents {
				if e.Cat != "transfer" || e.Args["seq"] != seq {
					continue
				}
				if e.Ts < op.Ts || e.Ts+e.Dur > op.Ts+op.Dur+0.001 {
					t.Errorf("rank %d op %d: %s [%v, %v] outside the operation [%v, %v]", r, i, e.Name, e.Ts, e.Ts+e.Dur, op.Ts, op.Ts+op.Dur)
				}
				if step := e.Args["step"].(float64); step < 0 || step > 2*size-3 {
					t.Errorf("rank %d op %d: %s step %v, want 0..%d", r, i, e.Name, step, 2*size-3)
				}
				peer, b := int(e.Args["peer"].(float64)), int(e.Args["bytes"].(float64))
				switch {
				case e.Name == fmt.Sprintf("send to %d", right) && peer == right && e.Tid == trace.TransferTid(right, true):
					sent += b
					nsent++
				case e.Name == fmt.Sprintf("recv from %d", left) && peer == left && e.Tid == trace.TransferTid(left, false):
					recvd += b
					nrecvd++
				default:
					t.Errorf("rank %d op %d: transfer %s (peer %d, thread %d): want sends to %d and receives from %d", r, i, e.Name, peer, e.Tid, right, left)
				}
				if threads[e.Tid] != e.Name {
					t.Errorf("rank %d: thread %d named %q, holds %q", r, e.Tid, threads[e.Tid], e.Name)
				}
			}
			ftotal, _ := op.Args["transfers"].(float64)
			total := int(ftotal)
			omitted, _ := op.Args["transfers_omitted"].(float64)
			if i < 2 {
				wire := 2 * (size - 1) * counts[i] * 4 / size
				if sent != wire || recvd != wire || nsent != 48 || nrecvd != 48 || total != 96 || omitted != 0 {
					t.Errorf("rank %d op %d: sent %d B in %d, received %d B in %d, %d transfers (%v omitted); want %d B in 48 each way, 96",
						r, i, sent, nsent, recvd, nrecvd, total, omitted, wire)
				}
				continue
			}
			if nsent+nrecvd != comm.MaxTraceTransfers || total != 384 || int(omitted) != total-comm.MaxTraceTransfers {
				t.Errorf("rank %d op %d: %d transfers kept, %d in all, %v omitted; want %d kept of 384", r, i, nsent+nrecvd, total, omitted, comm.MaxTraceTransfers)
			}
		}
	}
}

// BenchmarkTraceAllReduce measures a 1 MiB AllReduce on 4 in-process ranks
// with the timeline off and on (OCCL_TRACE).
func BenchmarkTraceAllReduce(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "trace=off"
		if on {
			name = "trace=on"
			b.Setenv(comm.TraceEnv, b.TempDir())
		}
		b.Run(name, func(b *testing.B) {
			const size = 4
			comms, err := comm.NewLocal(size)
			if err != nil {
				b.Fatal(err)
			}
			defer runBoth(comms, (*comm.Communicator).Close)
			ctx := context.Background()
			bufs := make([][]float32, size)
			for i := range bufs {
				bufs[i] = make([]float32, 1<<18)
			}
			b.SetBytes(1 << 20)
			for b.Loop() {
				if err := runBoth(comms, func(c *comm.Communicator) error {
					x := bufs[c.Rank()]
					return c.AllReduce(ctx, comm.Slice(x), comm.Slice(x), comm.Sum)
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
