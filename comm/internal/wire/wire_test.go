package wire

import (
	"errors"
	"reflect"
	"testing"
)

func samples() []Msg {
	return []Msg{
		{Type: Join, Rank: 3, Size: 8, Info: RankInfo{HostID: "h/boot", Addr: "127.0.0.1:4000", PID: 1234}},
		{Type: Table, Ranks: []RankInfo{{HostID: "a", Addr: "x:1", PID: 1}, {HostID: "b", Addr: "y:2", PID: 2}}, Nonce: [16]byte{1, 2, 15: 16}},
		{Type: Table, Ranks: []RankInfo{}},
		{Type: Reject, Text: "rank 3 joined twice"},
		{Type: Heartbeat},
		{Type: Report, Kind: 2, Peer: -1, Reporter: 4, Text: "mismatch"},
		{Type: Verdict, Kind: 1, Peer: 2, Reporter: 0, Text: "process exited"},
		{Type: Goodbye},
		{Type: Shutdown},
		{Type: Stalled, Seq: 1 << 40},
		{Type: Probe, Seq: 7},
		{Type: Status, Seq: 7, State: 1, Op: Fingerprint{Op: 2, DType: 7, RedOp: 0, Root: 3, Count: 1 << 33}, Current: 9},
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
		{byte(Join), 0x80}, // truncated varint
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
