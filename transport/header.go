package transport

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the encoded size of a Header in bytes.
const HeaderSize = 56

// Frame format constants.
const (
	// Magic starts every frame.
	Magic uint16 = 0x0CC1
	// Version is the frame format version.
	Version uint8 = 1
	// MaxLen is the largest payload a frame may declare. Receivers never
	// allocate from a declared length: data frames land in buffers the
	// receiver posted, and control frames are checked against a much
	// smaller per-call limit.
	MaxLen uint64 = 1 << 40
)

// Kind says what a frame carries.
type Kind uint8

// Frame kinds.
const (
	// KindCollective frames belong to a collective operation; Seq is the
	// communicator-wide operation sequence number.
	KindCollective Kind = 1
	// KindP2P frames belong to point-to-point traffic; Seq counts the
	// messages from the sender to this receiver.
	KindP2P Kind = 2
	// KindControl frames carry control-plane messages (bootstrap,
	// heartbeats, failure reports); their payload length varies.
	KindControl Kind = 3
	// KindVerify frames carry the exchange that checks a new link.
	KindVerify Kind = 4

	maxKind = KindVerify
)

// Valid reports whether k is one of the kinds above.
func (k Kind) Valid() bool { return k >= KindCollective && k <= maxKind }

func (k Kind) String() string {
	switch k {
	case KindCollective:
		return "collective"
	case KindP2P:
		return "p2p"
	case KindControl:
		return "control"
	case KindVerify:
		return "verify"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Header is the fixed part of every frame.
//
// Wire layout, little endian:
//
//	off size field
//	  0    2 magic (0x0CC1)
//	  2    1 version
//	  3    1 kind
//	  4    1 op      operation code (the communicator's, opaque here)
//	  5    1 dtype   element type of the operation
//	  6    1 redop   reduction of the operation
//	  7    1 flags   reserved, zero on the wire (see DecodeReserved)
//	  8    8 comm    communicator id
//	 16    4 epoch   topology epoch of the communicator
//	 20    4 step    message label within the operation
//	 24    8 seq     operation or point-to-point sequence number
//	 32    4 root    root rank of the operation
//	 36    4 -       reserved, zero on the wire (see DecodeReserved)
//	 40    8 count   element count of the operation
//	 48    8 len     payload length in bytes
type Header struct {
	Kind  Kind
	Op    uint8
	DType uint8
	RedOp uint8
	Comm  uint64
	Epoch uint32
	Step  uint32
	Seq   uint64
	Root  uint32
	Count uint64
	Len   uint64
	// Padding to 64 bytes, a multiple of 16: the compiler copies a
	// 56-byte struct in four 16-byte moves whose last two overlap, and a
	// copy read back right after it is made (a header is copied into
	// every call of a Conn, often through a temporary) then loads bytes
	// from two stores at once, which the processor cannot forward: a
	// stall of tens of cycles on every message.
	_ uint64
}

// Encode writes h into b, which must be at least HeaderSize bytes long.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(h.Kind)
	b[4] = h.Op
	b[5] = h.DType
	b[6] = h.RedOp
	b[7] = 0
	binary.LittleEndian.PutUint64(b[8:], h.Comm)
	binary.LittleEndian.PutUint32(b[16:], h.Epoch)
	binary.LittleEndian.PutUint32(b[20:], h.Step)
	binary.LittleEndian.PutUint64(b[24:], h.Seq)
	binary.LittleEndian.PutUint32(b[32:], h.Root)
	binary.LittleEndian.PutUint32(b[36:], 0)
	binary.LittleEndian.PutUint64(b[40:], h.Count)
	binary.LittleEndian.PutUint64(b[48:], h.Len)
}

// FrameError reports bytes that are not a valid frame header.
type FrameError struct {
	Reason string
}

func (e *FrameError) Error() string { return "malformed frame: " + e.Reason }

// Decode parses a header from b. It checks everything that can be checked
// without knowing what the receiver expects: length of b, magic, version,
// kind, reserved fields and the payload length bound.
func (h *Header) Decode(b []byte) error {
	_, _, err := h.decode(b, false)
	return err
}

// DecodeReserved parses a header from b as Decode does, but returns the
// two reserved fields (the flags byte at offset 7 and the word at offset
// 36) instead of requiring them to be zero: a transport that frames
// headers in a medium of its own (shared memory's sealed frames) carries
// its own flags and seal there. They are zero on every connection
// between ranks.
func (h *Header) DecodeReserved(b []byte) (flags uint8, word uint32, err error) {
	return h.decode(b, true)
}

// decode is Decode, which rejects set reserved fields, and DecodeReserved,
// which returns them (reserved).
func (h *Header) decode(b []byte, reserved bool) (flags uint8, word uint32, err error) {
	if len(b) < HeaderSize {
		return 0, 0, &FrameError{fmt.Sprintf("short header: %d of %d bytes", len(b), HeaderSize)}
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != Magic {
		return 0, 0, &FrameError{fmt.Sprintf("bad magic %#04x", m)}
	}
	if b[2] != Version {
		return 0, 0, &FrameError{fmt.Sprintf("unsupported version %d", b[2])}
	}
	k := Kind(b[3])
	if !k.Valid() {
		return 0, 0, &FrameError{fmt.Sprintf("unknown kind %d", b[3])}
	}
	flags, word = b[7], binary.LittleEndian.Uint32(b[36:])
	if !reserved && (flags != 0 || word != 0) {
		return 0, 0, &FrameError{"reserved bits set"}
	}
	n := binary.LittleEndian.Uint64(b[48:])
	if n > MaxLen {
		return 0, 0, &FrameError{fmt.Sprintf("payload length %d exceeds limit %d", n, MaxLen)}
	}
	h.Kind = k
	h.Op = b[4]
	h.DType = b[5]
	h.RedOp = b[6]
	h.Comm = binary.LittleEndian.Uint64(b[8:])
	h.Epoch = binary.LittleEndian.Uint32(b[16:])
	h.Step = binary.LittleEndian.Uint32(b[20:])
	h.Seq = binary.LittleEndian.Uint64(b[24:])
	h.Root = binary.LittleEndian.Uint32(b[32:])
	h.Count = binary.LittleEndian.Uint64(b[40:])
	h.Len = n
	return flags, word, nil
}

// LeadWord returns the first 8 bytes of h's encoding as a little-endian
// word, with the reserved flags byte (offset 7) zero: magic, version,
// kind, op, dtype and redop. A transport's own frame that starts as the
// wire format does (shared memory's short frames) compares it in place.
func (h *Header) LeadWord() uint64 {
	return uint64(Magic) | uint64(Version)<<16 | uint64(h.Kind)<<24 |
		uint64(h.Op)<<32 | uint64(h.DType)<<40 | uint64(h.RedOp)<<48
}

// IsEncodedIn reports whether b holds h as Encode writes it, whatever its
// reserved fields (the flags byte and the word DecodeReserved returns):
// whether DecodeReserved would decode b, without an error, into a header
// equal to h. It compares b's words with h's fields in place. A receiver
// that decodes a header and then compares it as a whole (Check) reads it
// back 16 bytes at a time from the narrower stores that just built it,
// which the processor cannot forward: a stall on every message.
func (h *Header) IsEncodedIn(b []byte) bool {
	if len(b) < HeaderSize {
		return false
	}
	b = b[:HeaderSize]
	le := binary.LittleEndian
	return le.Uint64(b[0:])&^(0xff<<56) == h.LeadWord() && h.Kind.Valid() &&
		le.Uint64(b[8:]) == h.Comm && le.Uint64(b[16:]) == uint64(h.Epoch)|uint64(h.Step)<<32 &&
		le.Uint64(b[24:]) == h.Seq && le.Uint32(b[32:]) == h.Root &&
		le.Uint64(b[40:]) == h.Count && le.Uint64(b[48:]) == h.Len && h.Len <= MaxLen
}

// MismatchError reports a frame that is well formed but is not the frame the
// receiver expected: it belongs to another communicator, epoch, operation or
// step, describes a different operation, or has a different length.
type MismatchError struct {
	Got, Want Header
	// Digested: the frame carried a digest of its Comm, Epoch, Root and
	// Count instead of the fields themselves (a transport's short frame,
	// see shared memory's), and it is not the digest of Want's. Got's
	// other fields are the frame's; those four are unknown (zero).
	Digested bool
}

func (e *MismatchError) Error() string {
	g, w := &e.Got, &e.Want
	switch {
	case e.Digested && (g.Kind != w.Kind || g.Seq != w.Seq):
		return fmt.Sprintf("%s frame (seq %d), expected a %s frame (seq %d) of communicator %#x epoch %d", g.Kind, g.Seq, w.Kind, w.Seq, w.Comm, w.Epoch)
	case e.Digested:
		return fmt.Sprintf("frame for seq %d step %d of another communicator, epoch, root or count than communicator %#x epoch %d root %d count %d",
			g.Seq, g.Step, w.Comm, w.Epoch, w.Root, w.Count)
	case g.Comm != w.Comm:
		return fmt.Sprintf("frame for communicator %#x, expected %#x", g.Comm, w.Comm)
	case g.Epoch != w.Epoch:
		return fmt.Sprintf("frame from epoch %d, expected epoch %d", g.Epoch, w.Epoch)
	case g.Kind != w.Kind:
		return fmt.Sprintf("%s frame (seq %d), expected a %s frame (seq %d)", g.Kind, g.Seq, w.Kind, w.Seq)
	case g.Seq != w.Seq:
		return fmt.Sprintf("frame for %s seq %d, expected seq %d", g.Kind, g.Seq, w.Seq)
	case g.Op != w.Op || g.DType != w.DType || g.RedOp != w.RedOp || g.Root != w.Root || g.Count != w.Count:
		return fmt.Sprintf("operation mismatch at seq %d: peer op=%d dtype=%d redop=%d root=%d count=%d, local op=%d dtype=%d redop=%d root=%d count=%d",
			w.Seq, g.Op, g.DType, g.RedOp, g.Root, g.Count, w.Op, w.DType, w.RedOp, w.Root, w.Count)
	case g.Step != w.Step:
		return fmt.Sprintf("frame for step %d of seq %d, expected step %d", g.Step, g.Seq, w.Step)
	default:
		return fmt.Sprintf("frame of %d bytes at seq %d step %d, expected %d bytes", g.Len, g.Seq, g.Step, w.Len)
	}
}

// Check compares a received header with the expected one. want.Len must be
// the number of bytes the receiver is ready to accept.
func Check(got, want *Header) error {
	if *got != *want {
		return &MismatchError{Got: *got, Want: *want}
	}
	return nil
}
