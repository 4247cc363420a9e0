// Package wire encodes the control messages of a communicator: the
// rendezvous (join, table, reject), the messages that keep ranks in
// agreement afterwards (heartbeats, failure reports and verdicts, goodbye,
// probes), those of a rewire (statuses, verdict, link checks) and those of
// a shrink's agreement (proposals and decisions). The control messages travel as the payload of transport.KindControl frames on
// the control connections; a rewire's travel on the data connections,
// whose receivers expect frames of a known length, so they are padded to
// a fixed size (AppendFrame, DecodeFrame). A shrink's travel as control
// frames on connections of their own, opened through the data listeners.
//
// Encoding: one type byte, then the fields of that type in order; integers
// are zig-zag varints (unsigned ones plain varints), flags one byte,
// strings and lists are prefixed with their varint length. The decoder
// bounds every length before it allocates and rejects trailing bytes.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Type is the kind of a control message.
type Type uint8

// Message types.
const (
	Join        Type = 1  // rank -> root: who I am (a joiner: rank AnyRank, size 0)
	Table       Type = 2  // root -> rank: every rank's info
	Reject      Type = 3  // root -> rank: join refused
	Heartbeat   Type = 4  // both ways: still alive
	Report      Type = 5  // rank -> root: something failed
	Verdict     Type = 6  // root -> every rank: the communicator has failed
	Goodbye     Type = 7  // rank -> root: closing cleanly
	Shutdown    Type = 8  // root -> rank: the root is closing cleanly
	Stalled     Type = 9  // rank -> root: an operation has been running long
	Probe       Type = 10 // root -> rank: describe operation Seq
	ProbeAnswer Type = 11 // rank -> root: the answer to a probe
	// A rewire's messages, on the data connections.
	RewireStatus  Type = 12 // rank -> rank 0: how this rank's new links went
	RewireVerdict Type = 13 // rank 0 -> every rank: the rewire's outcome
	LinkCheck     Type = 14 // both ends of a new link: who is here
	// On the control connections again.
	StallReport Type = 15 // root -> every rank: who holds up operation Seq
	// A shrink's agreement, on recovery connections.
	ShrinkPropose Type = 16 // survivor -> coordinator: the ranks it suspects
	ShrinkDecide  Type = 17 // coordinator -> survivor: who is left, where to meet
	maxType            = ShrinkDecide
)

// Flags of a RewireStatus or RewireVerdict.
const (
	flagOK         = 1 << 0
	flagApplied    = 1 << 1
	flagRolledBack = 1 << 2
	flagsKnown     = flagOK | flagApplied | flagRolledBack
)

// Limits enforced by the decoder.
const (
	MaxString = 4096
	MaxRanks  = 1 << 20
	// MaxMessage bounds the encoded size of any message a receiver
	// accepts (a rank table entry is about 100 bytes).
	MaxMessage = 64 << 20
)

// AnyRank in a Join asks the root for the next free rank of a communicator
// that takes joiners (comm.Join); such a join carries size 0, as the joiner
// learns the size from the Table.
const AnyRank = -1

// RankInfo is what the rendezvous learns about one rank.
type RankInfo struct {
	HostID string // host identity (equal ids share a host)
	Addr   string // data listener address
	PID    int    // process id, for messages
}

// Msg is one control message. Only the fields of its Type are encoded.
type Msg struct {
	Type Type
	// Join: the sender's rank, or AnyRank; Table: the receiver's rank;
	// RewireStatus, RewireVerdict: the rank where a step failed;
	// LinkCheck: the sender.
	Rank int
	// Join: the number of ranks, or 0 from a joiner (Rank AnyRank).
	Size int
	Info RankInfo
	// Table: every rank's info, the job nonce rank 0 chose, and rank 0's
	// wall clock (Unix nanoseconds) when it sent the table, from which a
	// rank estimates its clock's offset to rank 0's for its timeline.
	Ranks []RankInfo
	Nonce [16]byte
	Clock int64
	// Reject, Report, Verdict
	Text string
	// Report, Verdict: Kind says what failed; Peer is the rank blamed (-1
	// if none) and Reporter the rank that saw it.
	Kind     uint8
	Peer     int
	Reporter int
	// Stalled, Probe, ProbeAnswer: the collective sequence number asked about.
	Seq uint64
	// ProbeAnswer: State says whether the rank has reached Seq; Op is the
	// fingerprint of its operation there; Current is the sequence number
	// the rank is running now; Done is the last one it completed, DoneOp
	// that operation's fingerprint (if remembered), and Waiting the rank
	// its running operation waits on (-1: none known).
	// StallReport: Text is the report on operation Seq.
	State   uint8
	Op      Fingerprint
	Current uint64
	Done    uint64
	DoneOp  Fingerprint
	Waiting int
	// RewireStatus, RewireVerdict: Digest identifies the target topology;
	// OK says whether every step succeeded, and if not Step names the one
	// that failed on rank Rank and Text says why; Applied (verdict) says
	// the fabric switched and RolledBack that rank 0 restores the
	// previous circuits.
	Digest              uint64
	OK                  bool
	Step                string
	Applied, RolledBack bool
	// LinkCheck: the epoch the new link is for.
	// ShrinkDecide: the coordinator's ballot, which names the decision.
	Epoch uint32
	// ShrinkPropose: Rank is the proposer, Ballot its ballot and List the
	// ranks it suspects. ShrinkDecide: Rank is the coordinator, Ballot the
	// ballot of the proposal it answers, List the surviving ranks (empty:
	// no quorum), Nonce the decision's nonce and Text the address of the
	// new communicator's rendezvous.
	Ballot uint32
	List   []int
}

// Fingerprint identifies a collective call: what every rank must agree on.
type Fingerprint struct {
	Op, DType, RedOp uint8
	Root             uint32
	Count            uint64
	// Target is a rewire's target digest (0 for other operations).
	Target uint64
}

// Append encodes m onto b.
func (m *Msg) Append(b []byte) []byte {
	b = append(b, byte(m.Type))
	switch m.Type {
	case Join:
		b = binary.AppendVarint(b, int64(m.Rank))
		b = binary.AppendVarint(b, int64(m.Size))
		b = appendInfo(b, &m.Info)
	case Table:
		b = binary.AppendVarint(b, int64(len(m.Ranks)))
		for i := range m.Ranks {
			b = appendInfo(b, &m.Ranks[i])
		}
		b = append(b, m.Nonce[:]...)
		b = binary.AppendVarint(b, m.Clock)
		b = binary.AppendVarint(b, int64(m.Rank))
	case Reject:
		b = appendString(b, m.Text)
	case Report, Verdict:
		b = append(b, m.Kind)
		b = binary.AppendVarint(b, int64(m.Peer))
		b = binary.AppendVarint(b, int64(m.Reporter))
		b = appendString(b, m.Text)
	case Stalled, Probe:
		b = binary.AppendUvarint(b, m.Seq)
	case ProbeAnswer:
		b = binary.AppendUvarint(b, m.Seq)
		b = append(b, m.State)
		b = appendFingerprint(b, &m.Op)
		b = binary.AppendUvarint(b, m.Current)
		b = binary.AppendUvarint(b, m.Done)
		b = appendFingerprint(b, &m.DoneOp)
		b = binary.AppendVarint(b, int64(m.Waiting))
	case StallReport:
		b = binary.AppendUvarint(b, m.Seq)
		b = appendString(b, m.Text)
	case RewireStatus, RewireVerdict:
		b = binary.AppendUvarint(b, m.Digest)
		b = append(b, flag(m.OK, flagOK)|flag(m.Applied, flagApplied)|flag(m.RolledBack, flagRolledBack))
		b = binary.AppendVarint(b, int64(m.Rank))
		b = appendString(b, m.Step)
		b = appendString(b, m.Text)
	case LinkCheck:
		b = binary.AppendVarint(b, int64(m.Rank))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
	case ShrinkPropose:
		b = binary.AppendVarint(b, int64(m.Rank))
		b = binary.AppendUvarint(b, uint64(m.Ballot))
		b = appendList(b, m.List)
	case ShrinkDecide:
		b = binary.AppendVarint(b, int64(m.Rank))
		b = binary.AppendUvarint(b, uint64(m.Ballot))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = appendList(b, m.List)
		b = append(b, m.Nonce[:]...)
		b = appendString(b, m.Text)
	}
	return b
}

func appendList(b []byte, l []int) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, r := range l {
		b = binary.AppendUvarint(b, uint64(r))
	}
	return b
}

func flag(set bool, f uint8) uint8 {
	if set {
		return f
	}
	return 0
}

// AppendFrame encodes m onto b as exactly size bytes: zero-padded, its
// Text, then its Step, cut short if the whole would not fit. It panics if
// m does not fit even without them.
func (m *Msg) AppendFrame(b []byte, size int) []byte {
	c := *m
	n := len(b)
	for {
		b = c.Append(b[:n])
		over := len(b) - n - size
		switch {
		case over <= 0:
			return append(b, make([]byte, -over)...)
		case len(c.Text) > 0:
			c.Text = c.Text[:max(0, min(len(c.Text), MaxString)-over)]
		case len(c.Step) > 0:
			c.Step = c.Step[:max(0, min(len(c.Step), MaxString)-over)]
		default:
			panic(fmt.Sprintf("wire: a message of type %d does not fit a frame of %d bytes", m.Type, size))
		}
	}
}

func appendInfo(b []byte, r *RankInfo) []byte {
	b = appendString(b, r.HostID)
	b = appendString(b, r.Addr)
	return binary.AppendVarint(b, int64(r.PID))
}

func appendString(b []byte, s string) []byte {
	if len(s) > MaxString {
		s = s[:MaxString]
	}
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed control message")

// Decode parses one message that fills b exactly.
func Decode(b []byte) (Msg, error) {
	m, rest, err := decode(b)
	if err == nil && len(rest) > 0 {
		return Msg{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(rest))
	}
	return m, err
}

// DecodeFrame parses one message padded with zeros, as AppendFrame
// writes it.
func DecodeFrame(b []byte) (Msg, error) {
	m, rest, err := decode(b)
	if err != nil {
		return Msg{}, err
	}
	for i, x := range rest {
		if x != 0 {
			return Msg{}, fmt.Errorf("%w: byte %d of the padding is %#x", ErrMalformed, len(b)-len(rest)+i, x)
		}
	}
	return m, nil
}

// decode parses the message at the start of b and returns the bytes after
// it.
func decode(b []byte) (Msg, []byte, error) {
	d := decoder{b: b}
	var m Msg
	t := d.byte()
	if d.err == nil && (t == 0 || Type(t) > maxType) {
		return m, nil, fmt.Errorf("%w: unknown type %d", ErrMalformed, t)
	}
	m.Type = Type(t)
	switch m.Type {
	case Join:
		m.Rank = d.int(AnyRank, MaxRanks)
		m.Size = d.int(0, MaxRanks)
		m.Info = d.info()
	case Table:
		n := d.int(0, MaxRanks)
		// Each entry needs at least 3 bytes: bound n by what is left.
		if d.err == nil && n > len(d.b)/3 {
			d.fail("table of %d ranks in %d bytes", n, len(d.b))
		}
		if d.err == nil {
			m.Ranks = make([]RankInfo, n)
			for i := range m.Ranks {
				m.Ranks[i] = d.info()
			}
		}
		d.fixed(m.Nonce[:])
		m.Clock = int64(d.int(math.MinInt, math.MaxInt))
		m.Rank = d.int(0, MaxRanks)
		if d.err == nil && m.Rank >= max(len(m.Ranks), 1) {
			d.fail("receiver rank %d of a table of %d ranks", m.Rank, len(m.Ranks))
		}
	case Reject:
		m.Text = d.string()
	case Report, Verdict:
		m.Kind = d.byte()
		m.Peer = d.int(-1, MaxRanks)
		m.Reporter = d.int(-1, MaxRanks)
		m.Text = d.string()
	case Stalled, Probe:
		m.Seq = d.uvarint(1<<64 - 1)
	case ProbeAnswer:
		m.Seq = d.uvarint(1<<64 - 1)
		m.State = d.byte()
		m.Op = d.fingerprint()
		m.Current = d.uvarint(1<<64 - 1)
		m.Done = d.uvarint(1<<64 - 1)
		m.DoneOp = d.fingerprint()
		m.Waiting = d.int(-1, MaxRanks)
	case StallReport:
		m.Seq = d.uvarint(1<<64 - 1)
		m.Text = d.string()
	case RewireStatus, RewireVerdict:
		m.Digest = d.uvarint(1<<64 - 1)
		f := d.byte()
		if f&^flagsKnown != 0 {
			d.fail("unknown flags %#x", f)
		}
		m.OK, m.Applied, m.RolledBack = f&flagOK != 0, f&flagApplied != 0, f&flagRolledBack != 0
		m.Rank = d.int(-1, MaxRanks)
		m.Step = d.string()
		m.Text = d.string()
	case LinkCheck:
		m.Rank = d.int(-1, MaxRanks)
		m.Epoch = uint32(d.uvarint(1<<32 - 1))
	case ShrinkPropose:
		m.Rank = d.int(0, MaxRanks-1)
		m.Ballot = uint32(d.uvarint(1<<32 - 1))
		m.List = d.list()
	case ShrinkDecide:
		m.Rank = d.int(0, MaxRanks-1)
		m.Ballot = uint32(d.uvarint(1<<32 - 1))
		m.Epoch = uint32(d.uvarint(1<<32 - 1))
		m.List = d.list()
		d.fixed(m.Nonce[:])
		m.Text = d.string()
	}
	if d.err != nil {
		return Msg{}, nil, d.err
	}
	return m, d.b, nil
}

func appendFingerprint(b []byte, f *Fingerprint) []byte {
	b = append(b, f.Op, f.DType, f.RedOp)
	b = binary.AppendUvarint(b, uint64(f.Root))
	b = binary.AppendUvarint(b, f.Count)
	return binary.AppendUvarint(b, f.Target)
}

func (d *decoder) fingerprint() Fingerprint {
	var f Fingerprint
	f.Op = d.byte()
	f.DType = d.byte()
	f.RedOp = d.byte()
	f.Root = uint32(d.uvarint(1<<32 - 1))
	f.Count = d.uvarint(1<<64 - 1)
	f.Target = d.uvarint(1<<64 - 1)
	return f
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) byte() uint8 {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// fixed fills b from the next len(b) bytes.
func (d *decoder) fixed(b []byte) {
	if d.err != nil {
		return
	}
	if len(d.b) < len(b) {
		d.fail("truncated")
		return
	}
	copy(b, d.b)
	d.b = d.b[len(b):]
}

func (d *decoder) int(lo, hi int) int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	if v < int64(lo) || v > int64(hi) {
		d.fail("value %d out of range [%d, %d]", v, lo, hi)
		return 0
	}
	return int(v)
}

func (d *decoder) uvarint(hi uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	if v > hi {
		d.fail("value %d above %d", v, hi)
		return 0
	}
	return v
}

func (d *decoder) string() string {
	if d.err != nil {
		return ""
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > MaxString || n > uint64(len(d.b)-k) {
		d.fail("bad string length")
		return ""
	}
	s := string(d.b[k : k+int(n)])
	d.b = d.b[k+int(n):]
	return s
}

// list reads a list of ranks: ascending, each below MaxRanks. An empty
// list decodes as nil.
func (d *decoder) list() []int {
	n := d.uvarint(MaxRanks)
	if d.err != nil || n == 0 {
		return nil
	}
	// Each rank takes at least one byte: bound n by what is left.
	if n > uint64(len(d.b)) {
		d.fail("list of %d ranks in %d bytes", n, len(d.b))
		return nil
	}
	l := make([]int, n)
	for i := range l {
		l[i] = int(d.uvarint(MaxRanks - 1))
		if d.err == nil && i > 0 && l[i] <= l[i-1] {
			d.fail("ranks not ascending: %d after %d", l[i], l[i-1])
		}
	}
	return l
}

func (d *decoder) info() RankInfo {
	return RankInfo{HostID: d.string(), Addr: d.string(), PID: d.int(0, 1<<31)}
}
