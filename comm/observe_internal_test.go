package comm

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/trace"
)

// BenchmarkOpRecord measures what recording one operation costs the
// worker: the flight record's begin, schedule and end, always done, and
// with the timeline on its trace record too, with no transfers and with
// the 12 of a ring AllReduce on 4 ranks (6 steps, a send and a receive
// each).
func BenchmarkOpRecord(b *testing.B) {
	for _, bc := range []struct {
		on        bool
		transfers int
	}{{false, 0}, {true, 0}, {true, 12}} {
		on := bc.on
		name := "trace=off"
		if on {
			name = "trace=on"
		}
		if bc.transfers > 0 {
			name += fmt.Sprintf(",transfers=%d", bc.transfers)
		}
		b.Run(name, func(b *testing.B) {
			c := &Communicator{}
			c.hist.init(DefaultFlightRecord, 1)
			newRecorder := func() {
				if on {
					c.obs.tr = trace.NewRecorder(trace.Meta{})
				}
			}
			newRecorder()
			r := &Request{c: c, name: "AllReduce", hdr: collHeader(algo.OpAllReduce, Float32, Sum, 0, 1<<18)}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if i%(1<<16) == 0 {
					// Keep the recorder below its bound, as a run of
					// that many operations would.
					b.StopTimer()
					newRecorder()
					b.StartTimer()
				}
				r.seq = uint64(i)
				c.hist.begin(r, now())
				c.hist.chose(algo.AlgoRing, 1<<20, 0)
				for x := range bc.transfers {
					c.obs.transfer(x%4, x%2 == 0, uint32(x/2), 256<<10, time.Now())
				}
				c.endOp(nil)
			}
		})
	}
}

// TestOpRecordOrder checks the ring the benchmark exercises: entries in
// order, the oldest overwritten.
func TestOpRecordOrder(t *testing.T) {
	c := &Communicator{}
	c.hist.init(4, 1)
	c.obs.flightLen = 4
	for i := 1; i <= histLen+3; i++ {
		r := &Request{c: c, name: "Barrier", seq: uint64(i), hdr: collHeader(algo.OpBarrier, 0, 0, 0, 0)}
		c.hist.begin(r, now())
		c.endOp(nil)
	}
	recs := c.FlightRecord()
	if len(recs) != 4 || recs[0].Seq != histLen || recs[3].Seq != histLen+3 {
		t.Fatalf("record %+v", recs)
	}
	// The probes still see histLen collectives back.
	if m := c.hist.answer(4); m.State != reached {
		t.Errorf("seq 4: state %d, want reached", m.State)
	}
	if m := c.hist.answer(3); m.State != forgotten {
		t.Errorf("seq 3: state %d, want forgotten", m.State)
	}
	if m := c.hist.answer(histLen + 4); m.State != notReached {
		t.Errorf("seq %d: state %d, want not reached", histLen+4, m.State)
	}
}

// TestOpRecordReadersDuringWrites: readers of the history (the flight
// record, the probes' answers, the running collective) beside a writer
// that records operation after operation always see whole entries: the
// operation of an odd sequence number is an AllReduce of 4 KiB, of an even
// one a Broadcast of 8 B, and every reader checks that pairing.
func TestOpRecordReadersDuringWrites(t *testing.T) {
	const ops = 300000
	c := &Communicator{}
	c.hist.init(8, 1)
	c.obs.flightLen = 8
	reqs := [2]*Request{
		{c: c, name: "Broadcast", hdr: collHeader(algo.OpBroadcast, Uint8, 0, 0, 8)},
		{c: c, name: "AllReduce", hdr: collHeader(algo.OpAllReduce, Float32, Sum, 0, 1024)},
	}
	check := func(seq uint64, name string, bytes int64) error {
		want := reqs[seq%2]
		if name != want.name || bytes != int64(want.hdr.Count)*int64(DType(want.hdr.DType).Size()) {
			return fmt.Errorf("seq %d recorded as %s of %d bytes", seq, name, bytes)
		}
		return nil
	}
	done := make(chan struct{})
	errs := make(chan error, 3)
	reader := func(read func() error) {
		for {
			if err := read(); err != nil {
				errs <- err
				return
			}
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
		}
	}
	go reader(func() error {
		recs := c.FlightRecord()
		for i, rec := range recs {
			// Entries the ring overwrote while they were read are left
			// out; the others come in order.
			if i > 0 && rec.Seq <= recs[i-1].Seq {
				return fmt.Errorf("record out of order: %+v", recs)
			}
			if rec.State != OpDone && rec.State != OpRunning {
				return fmt.Errorf("seq %d in state %q", rec.Seq, rec.State)
			}
			if err := check(rec.Seq, rec.Op, rec.Bytes); err != nil {
				return err
			}
		}
		return nil
	})
	go reader(func() error {
		seq, _ := c.hist.runningCollective()
		if seq == 0 {
			return nil
		}
		m := c.hist.answer(seq)
		want := fingerprint(&reqs[seq%2].hdr)
		if m.State == reached && m.Op != want {
			return fmt.Errorf("seq %d answered with %+v, want %+v", seq, m.Op, want)
		}
		return nil
	})
	go reader(func() error {
		if e, ok := c.hist.runningEntry(); ok {
			return check(e.seq, e.name, e.bytes)
		}
		return nil
	})
	for i := uint64(1); i <= ops; i++ {
		r := reqs[i%2]
		r.seq = i
		c.hist.begin(r, now())
		c.endOp(nil)
	}
	close(done)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpRecordReadersNotStarved: readers of a whole flight record (256
// entries) and of probe answers beside a writer that records operations
// back to back, each much shorter than a copy of the record, complete
// their reads and get entries: the writer stops after the readers have
// made theirs, and fails the test if it records a million operations
// first. (Where the Go scheduler deschedules the writer now and then, a
// copy of the whole ring in one read gets through too; reading entry by
// entry does not depend on it.)
func TestOpRecordReadersNotStarved(t *testing.T) {
	const (
		reads  = 50
		maxOps = 1 << 20
	)
	c := &Communicator{}
	c.hist.init(DefaultFlightRecord, 1)
	c.obs.flightLen = DefaultFlightRecord
	r := &Request{c: c, name: "AllReduce", hdr: collHeader(algo.OpAllReduce, Float32, Sum, 0, 2)}
	for i := uint64(1); i <= histLen; i++ {
		r.seq = i
		c.hist.begin(r, now())
		c.endOp(nil)
	}
	var done atomic.Int32
	for range 2 {
		go func() {
			for range reads {
				if len(c.FlightRecord()) == 0 {
					t.Error("empty flight record")
				}
				c.hist.answer(1)
			}
			done.Add(1)
		}()
	}
	for i := uint64(histLen + 1); done.Load() < 2; i++ {
		if i > maxOps {
			t.Fatalf("the writer recorded %d operations before two readers made %d reads each", maxOps, reads)
		}
		r.seq = i
		c.hist.begin(r, now())
		c.endOp(nil)
	}
}

// TestOpRecordFailMark: the mark that failRunning leaves as the
// communicator fails names the operation running when the record is read,
// whichever of the operations around the failure it is: the one running
// when the mark was made, one that began after it, one that began after
// an operation that ended between the mark's look and its store. An
// operation that ended keeps the state it ended with.
func TestOpRecordFailMark(t *testing.T) {
	errPeer := fmt.Errorf("peer failed: rank 2")
	for _, tc := range []struct {
		name string
		// steps: "b" begins the next operation, "e" ends the running one
		// without an error, "E" with one, "f" marks the failure.
		steps string
		want  []OpState
	}{
		{"running", "bf", []OpState{OpFailed}},
		{"ended-with-error", "bfE", []OpState{OpFailed}},
		{"done-before", "bebf", []OpState{OpDone, OpFailed}},
		{"between", "befb", []OpState{OpDone, OpFailed}},
		{"ended-after-mark", "bfeb", []OpState{OpDone, OpFailed}},
		{"after-end-and-next", "bfebeb", []OpState{OpDone, OpDone, OpFailed}},
		{"none", "bebeb", []OpState{OpDone, OpDone, OpRunning}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Communicator{}
			c.hist.init(8, 1)
			c.obs.flightLen = 8
			seq := uint64(0)
			for _, s := range tc.steps {
				switch s {
				case 'b':
					seq++
					r := &Request{c: c, name: "AllReduce", seq: seq, hdr: collHeader(algo.OpAllReduce, Float32, Sum, 0, 2)}
					c.hist.begin(r, now())
				case 'e':
					c.endOp(nil)
				case 'E':
					c.endOp(errPeer)
				case 'f':
					c.hist.failRunning(errPeer)
				}
			}
			recs := c.FlightRecord()
			if len(recs) != len(tc.want) {
				t.Fatalf("%d records %+v, want %d", len(recs), recs, len(tc.want))
			}
			for i, rec := range recs {
				if rec.State != tc.want[i] {
					t.Errorf("op %d: state %s, want %s", rec.Seq, rec.State, tc.want[i])
				}
				if rec.State == OpFailed && rec.Error != errPeer.Error() {
					t.Errorf("op %d: error %q, want %q", rec.Seq, rec.Error, errPeer)
				}
			}
			if e, ok := c.hist.runningEntry(); ok && e.state != opStateEntry(tc.want[len(tc.want)-1]) {
				t.Errorf("running entry in state %s, want %s", e.state.OpState(), tc.want[len(tc.want)-1])
			}
		})
	}
}

// opStateEntry is s as an entry's state.
func opStateEntry(s OpState) entryState {
	for i, o := range opStates {
		if o == s {
			return entryState(i)
		}
	}
	return entryQueued
}
