package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func samples() []Msg {
	return []Msg{
		{Type: Join, Rank: 3, Size: 8, Info: RankInfo{HostID: "h/boot", Addr: "127.0.0.1:4000", PID: 1234}},
		{Type: Table, Ranks: []RankInfo{{HostID: "a", Addr: "x:1", PID: 1}, {HostID: "b", Addr: "y:2", PID: 2}}, Nonce: [16]byte{1, 2, 15: 16}, Clock: 1_700_000_000_123_456_789},
		{Type: Table, Ranks: []RankInfo{}},
		{Type: Join, Rank: AnyRank, Size: 0, Info: RankInfo{HostID: "spare", Addr: "10.0.0.9:4100", PID: 99}},
		{Type: Table, Ranks: []RankInfo{{HostID: "a", Addr: "x:1", PID: 1}, {HostID: "b", Addr: "y:2", PID: 2}, {HostID: "c", Addr: "z:3", PID: 3}}, Nonce: [16]byte{7}, Clock: 5, Rank: 2},
		{Type: Reject, Text: "rank 3 joined twice"},
		{Type: Heartbeat},
		{Type: Report, Kind: 2, Peer: -1, Reporter: 4, Text: "mismatch"},
		{Type: Verdict, Kind: 1, Peer: 2, Reporter: 0, Text: "process exited"},
		{Type: Goodbye},
		{Type: Shutdown},
		{Type: Stalled, Seq: 1 << 40},
		{Type: Probe, Seq: 7},
		{Type: ProbeAnswer, Seq: 7, State: 1, Op: Fingerprint{Op: 2, DType: 7, RedOp: 0, Root: 3, Count: 1 << 33}, Current: 9},
		{Type: ProbeAnswer, Seq: 8, State: 1, Op: Fingerprint{Op: 13, Target: 1<<64 - 5}, Current: 8},
		{Type: ProbeAnswer, Seq: 204, State: 0, Current: 0, Done: 203, DoneOp: Fingerprint{Op: 1, DType: 7, Count: 1 << 19}, Waiting: -1},
		{Type: ProbeAnswer, Seq: 204, State: 1, Op: Fingerprint{Op: 1, DType: 7, Count: 1 << 19}, Current: 204, Done: 203, Waiting: 3},
		{Type: StallReport, Seq: 204, Text: "stall at AllReduce seq 204: rank 3 has not called it"},
		{Type: RewireStatus, Digest: 1<<64 - 1, OK: true},
		{Type: RewireStatus, Digest: 0xfeed, Rank: 7, Step: "verify", Text: "link to rank 3: closed"},
		{Type: RewireVerdict, Digest: 0xfeed, Rank: 2, Step: "connect", Text: "no light", Applied: true, RolledBack: true},
		{Type: RewireVerdict, Digest: 0xfeed, OK: true, Applied: true},
		{Type: LinkCheck, Rank: 5, Epoch: 1<<32 - 1},
		{Type: ShrinkPropose, Rank: 6, Ballot: 2, List: []int{0, 5}},
		{Type: ShrinkPropose, Rank: 1, Ballot: 1},
		{Type: ShrinkDecide, Rank: 1, Ballot: 2, Epoch: 3, List: []int{1, 2, 3, 4, 6, 7}, Nonce: [16]byte{9, 15: 1}, Text: "127.0.0.1:41234"},
		{Type: ShrinkDecide, Rank: 4, Ballot: 5, Epoch: 5},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		got, err := Decode(m.Append(nil))
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v want %+v", got, m)
		}
	}
}

func TestRejects(t *testing.T) {
	bad := [][]byte{
		nil,
		{0},
		{99},
		{byte(Join)},
		append((&Msg{Type: Heartbeat}).Append(nil), 0),
		{byte(Table), 0xff, 0xff, 0xff, 0x7f},                   // huge count, no data
		{byte(Reject), 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 'x'}, // huge string
		{byte(Join), 0x80},                                                  // truncated varint
		{byte(RewireVerdict), 1, 0x08, 0, 0, 0},                             // unknown flag
		{byte(LinkCheck), 2, 0xff, 0xff, 0xff, 0xff, 0x1f},                  // epoch above 32 bits
		{byte(ShrinkPropose), 2, 1, 0xff, 0xff, 0x3f},                       // huge list, no data
		{byte(ShrinkPropose), 2, 1, 2, 5, 3},                                // ranks not ascending
		{byte(ShrinkPropose), 1, 1, 0},                                      // proposer rank -1
		{byte(Join), 3, 0, 0, 0, 2},                                         // rank -2
		(&Msg{Type: Table, Ranks: []RankInfo{{}, {}}, Rank: 2}).Append(nil), // receiver beyond the table
	}
	for _, b := range bad {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%x) = %v, want ErrMalformed", b, err)
		}
	}
}

// FuzzDecode checks that the decoder never panics and that whatever it
// accepts survives a round trip.
func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		f.Add(m.Append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(m.Append(nil))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip of accepted %x: %+v vs %+v (%v)", b, m, again, err)
		}
	})
}

func TestFrame(t *testing.T) {
	long := strings.Repeat("x", 600)
	for _, m := range samples() {
		b := m.AppendFrame([]byte("prefix"), 512)
		if len(b) != 6+512 || string(b[:6]) != "prefix" {
			t.Fatalf("%+v: frame of %d bytes after the prefix", m, len(b)-6)
		}
		got, err := DecodeFrame(b[6:])
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("frame round trip: got %+v (%v), want %+v", got, err, m)
		}
	}
	// Too long: the reason, then the step, is cut to fit.
	m := Msg{Type: RewireVerdict, Digest: 1, Rank: 3, Step: "verify", Text: long}
	got, err := DecodeFrame(m.AppendFrame(nil, 512))
	if err != nil || got.Step != "verify" || len(got.Text) == 0 || !strings.HasPrefix(long, got.Text) {
		t.Fatalf("long reason: %+v, %v", got, err)
	}
	if len((&got).Append(nil)) != 512 {
		t.Errorf("cut reason leaves %d bytes, want a full frame", len((&got).Append(nil)))
	}
	m = Msg{Type: RewireStatus, Step: long, Text: long}
	if got, err := DecodeFrame(m.AppendFrame(nil, 64)); err != nil || got.Text != "" || len(got.Step) == 0 {
		t.Fatalf("long step: %+v, %v", got, err)
	}
	// Padding must be zeros.
	b := (&Msg{Type: LinkCheck, Rank: 1, Epoch: 2}).AppendFrame(nil, 32)
	b[31] = 1
	if _, err := DecodeFrame(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("non-zero padding: %v", err)
	}
}

// FuzzDecodeFrame: a rewire's message read off a data connection, whatever
// its bytes, decodes without panicking into one that encodes, in a frame
// of the same size, to the same message.
func FuzzDecodeFrame(f *testing.F) {
	for _, m := range samples() {
		f.Add(m.AppendFrame(nil, 512))
	}
	f.Add(make([]byte, 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeFrame(b)
		if err != nil {
			return
		}
		again, err := DecodeFrame(m.AppendFrame(nil, len(b)))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("frame round trip of accepted %x: %+v vs %+v (%v)", b, m, again, err)
		}
	})
}
