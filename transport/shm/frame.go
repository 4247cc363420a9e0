package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/occl/occl/transport"
)

// Frames in the ring (see the package documentation, "Sealed frames").
const (
	// frameAlign: every frame ends at a multiple of frameAlign stream
	// bytes, padded as needed, so that the next one starts on a cache
	// line of its own and a frame of up to 8 payload bytes is one line.
	frameAlign = 64
	// smallFrame is the largest frame, header and payload, that Send
	// writes and Recv reads in one piece straight in the ring: the header
	// encoded into the ring and decoded from it rather than staged, and
	// no copy loop. A small operation's time is mostly the work around
	// its frames.
	smallFrame = 4 << 10
	// flagsOff and sealOff locate, in a frame's header, the two fields
	// that the wire format reserves (zero on the wire) and a ring frame
	// uses: a flags byte and the 32-bit seal.
	flagsOff = 7
	sealOff  = 36
	// flagArmed in a frame's flags says that the seal word of the frame
	// that follows it was cleared before this frame was published.
	flagArmed = 1
	// flagLent in a frame's flags says that a transfer descriptor
	// follows the header instead of the payload: the payload is lent
	// (see transport.Lender), and the receiver copies it out of the
	// sender's memory.
	flagLent = 2
	// flagSkip in a frame's flags says that the frame carries nothing and
	// ends where the ring's next lap starts: its producer rewound (see
	// hotWindow), and the next frame is at the start of the data area.
	// Its header's Len is the length of the bytes it skips after the
	// header, which the consumer checks against its position.
	flagSkip = 4
	// flagShort in a frame's flags says that the frame is short: one
	// line whose header, in place of the wire format's, carries the
	// fields that differ from one message to the next (kind, op, dtype,
	// redop, step, seq and length) and a digest of the others (comm,
	// epoch, root and count), with the payload in the same line (see
	// shortMax).
	flagShort = 8
	// armWindow is how far ahead of its tail a producer keeps the seal
	// words of the ring's lines cleared, after frames of at most sealMax
	// bytes. A larger frame gains nothing from its seal, since its
	// receiver waits for all its lines anyway, and clearing ahead of it
	// (a partial write to every line it will write) costs more than it
	// saves: after it the words run out, and frames are found by the
	// tail until small ones come again.
	armWindow = 8 << 10
	sealMax   = 2 * frameAlign
	// hotWindow: a producer about to write a small frame at this offset
	// of its ring or beyond (or, where the ring's eager limit is larger,
	// a little beyond that: see Conn.rewind), whose consumer has read
	// far enough into this lap, rewinds first: it writes a skip frame
	// (flagSkip) and starts the next lap, so that a run of small frames
	// cycles through the first hotWindow bytes of the ring, lines and
	// pages its processor and its consumer's have touched recently,
	// instead of a fresh line of a large ring each time. Larger frames
	// never rewind, so a large transfer still has the whole ring.
	hotWindow = 64 << 10
	// clearBatch is how many bytes' worth of lines ahead a producer
	// clears at a time (see Conn.clearAhead). Each clear is a store to a
	// line the consumer last read, which the producer's core must take
	// back first, and stores become visible in program order: the seal
	// of the frame after a batch waits until the whole batch has taken
	// its lines. A batch of 4 lines is taken while the producer waits
	// for its peer; one of half the window, 64 lines, was not (as the
	// latencies below show; the stalls themselves were not traced). On a
	// 2-core Intel Xeon virtual machine, 2 processes, 8 interleaved
	// rounds of 1M calls, medians: 8-byte AllReduce 0.476 us a call
	// against 0.513 with batches of 64 lines, 99th percentile 0.755
	// against 0.968; 32-byte AllToAll 0.482 against 0.542, 99th
	// percentile 0.748 against 0.996.
	clearBatch = 4 * frameAlign
)

// A short frame's line (flagShort): bytes 0 to 7 as in the wire format
// (magic, version, kind, op, dtype, redop, flags), then the step, the
// payload's length (32 bits), the seq, the digest (see digest) and 4 zero
// bytes; the seal at sealOff as in every frame; the payload from
// shortPayloadOff to the end of the line. A payload of more than 8 bytes (which a full header
// leaves in its first line) and at most shortMax goes in a short frame
// wherever the producer writes a small frame in place: in one line
// instead of two, so that the consumer waits for one line to arrive.
const (
	shortStepOff    = 8
	shortLenOff     = 12
	shortSeqOff     = 16
	shortDigestOff  = 24
	shortZeroOff    = 32 // 4 bytes, zero
	shortPayloadOff = 40
	shortMax        = frameAlign - shortPayloadOff
)

// shortFits reports whether a payload of n bytes goes in a short frame
// where a small frame is written in place.
func shortFits(n int) bool { return n > frameAlign-transport.HeaderSize && n <= shortMax }

// digest is what a short frame carries of h's Comm, Epoch, Root and Count,
// the fields that stay the same over the frames of an operation: the three
// words (Epoch and Root together) folded in one at a time, each through
// splitmix64's finalizer, a bijection. Two headers that differ in one of
// the words thus never share a digest, and two that differ in more share
// one by chance with odds of about 2^-64.
func digest(h *transport.Header) uint64 {
	return mix64(mix64(mix64(h.Comm)^h.Count) ^ (uint64(h.Epoch)<<32 | uint64(h.Root)))
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// encodeShort writes the short frame (flagShort) of h and payload, which
// is at most shortMax bytes, into the line b, all but its seal.
func encodeShort(b []byte, h *transport.Header, payload []byte) {
	_ = b[frameAlign-1]
	binary.LittleEndian.PutUint16(b[0:], transport.Magic)
	b[2] = transport.Version
	b[3] = byte(h.Kind)
	b[4] = h.Op
	b[5] = h.DType
	b[6] = h.RedOp
	b[flagsOff] = flagShort
	binary.LittleEndian.PutUint32(b[shortStepOff:], h.Step)
	binary.LittleEndian.PutUint32(b[shortLenOff:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(b[shortSeqOff:], h.Seq)
	binary.LittleEndian.PutUint64(b[shortDigestOff:], digest(h))
	binary.LittleEndian.PutUint32(b[shortZeroOff:], 0)
	copy(b[shortPayloadOff:], payload)
}

// leadMask keeps the bytes of a line's first word that
// transport.Header.LeadWord gives: all but the flags.
const leadMask = ^uint64(0xff << (8 * flagsOff))

// isShortOf reports whether b holds a short frame of want, whose digest is
// d: what decodeShort would accept. It compares the line's words with the
// wanted fields in place, as transport.Header.IsEncodedIn does a full
// header, and the error path decodes the frame to say how it differs.
func isShortOf(b []byte, want *transport.Header, d uint64) bool {
	_ = b[shortZeroOff+3]
	le := binary.LittleEndian
	return le.Uint64(b[0:])&leadMask == want.LeadWord() && want.Kind.Valid() &&
		le.Uint64(b[shortStepOff:]) == uint64(want.Step)|want.Len<<32 && shortFits(int(want.Len)) &&
		le.Uint64(b[shortSeqOff:]) == want.Seq && le.Uint64(b[shortDigestOff:]) == d &&
		le.Uint32(b[shortZeroOff:]) == 0
}

// decodeShort decodes and checks the short frame (flagShort) whose header
// is in b, at least transport.HeaderSize bytes, against want: the fields
// it carries as a header's, the others through their digest.
func decodeShort(b []byte, want *transport.Header) error {
	d := digest(want)
	if isShortOf(b, want, d) {
		return nil
	}
	return shortError(b, want, d)
}

// shortError is the error of the short frame in b, which isShortOf found
// is not one of want (digest d).
func shortError(b []byte, want *transport.Header, d uint64) error {
	if m := binary.LittleEndian.Uint16(b[0:]); m != transport.Magic || b[2] != transport.Version {
		return &transport.FrameError{Reason: fmt.Sprintf("shared ring: short frame with magic %#04x version %d", m, b[2])}
	}
	k := transport.Kind(b[3])
	if !k.Valid() {
		return &transport.FrameError{Reason: fmt.Sprintf("shared ring: short frame of unknown kind %d", b[3])}
	}
	n := binary.LittleEndian.Uint32(b[shortLenOff:])
	if !shortFits(int(n)) || binary.LittleEndian.Uint32(b[shortZeroOff:]) != 0 {
		return &transport.FrameError{Reason: fmt.Sprintf("shared ring: short frame of %d bytes (a short frame carries %d to %d)", n, frameAlign-transport.HeaderSize+1, shortMax)}
	}
	got := transport.Header{Kind: k, Op: b[4], DType: b[5], RedOp: b[6],
		Step: binary.LittleEndian.Uint32(b[shortStepOff:]), Seq: binary.LittleEndian.Uint64(b[shortSeqOff:]), Len: uint64(n)}
	if binary.LittleEndian.Uint64(b[shortDigestOff:]) != d {
		return &transport.MismatchError{Got: got, Want: *want, Digested: true}
	}
	got.Comm, got.Epoch, got.Root, got.Count = want.Comm, want.Epoch, want.Root, want.Count
	return transport.Check(&got, want)
}

// zeroPad is the padding written after a frame's body.
var zeroPad [frameAlign]byte

// alignUp rounds a stream position up to the next frame boundary.
func alignUp(pos uint64) uint64 { return (pos + frameAlign - 1) &^ (frameAlign - 1) }

// frameEnd returns where a frame with a body of n bytes that starts at
// stream position pos ends: header, body and padding.
func frameEnd(pos uint64, n int) uint64 {
	return alignUp(pos + transport.HeaderSize + uint64(n))
}

// sealOf is the seal of a frame that starts at stream position pos: never
// zero, and different for every line of a lap of the ring.
func sealOf(pos uint64) uint32 { return uint32(pos/frameAlign) | 1<<31 }

// markOf is the mark of a frame written by the general path that starts at
// stream position pos where the seal words were cleared (see Conn.putHeader):
// never zero and never the seal of the same position, it tells a consumer
// polling that word for a sealed frame to read the tail instead.
func markOf(pos uint64) uint32 { return sealOf(pos) ^ 1<<30 }

// sealWord returns the seal word of the frame line at data offset off,
// which is a multiple of frameAlign.
func (r *ring) sealWord(off uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.data[off+sealOff]))
}

// clearSeal clears the seal word of the line at data offset off with a
// plain store (see seal): the seal that later publishes a frame there is
// stored after it, so it is never seen before this.
func (r *ring) clearSeal(off uint64) { r.seal(off, 0) }

// smallSlot returns where a frame with a payload of n bytes that starts at
// stream position pos lies in r, and where it ends; ok if the frame is
// small (see smallFrame), starts on a frame boundary, does not travel by
// descriptor (desc: the direction's rule applies to n) and lies in one
// piece before the ring's end.
func smallSlot(r *ring, pos uint64, n int, desc bool) (off, end uint64, ok bool) {
	end = frameEnd(pos, n)
	off = pos & r.mask
	return off, end, end-pos <= smallFrame && !desc && pos%frameAlign == 0 && off+(end-pos) <= r.cap
}

// decodeFrame decodes and checks the header of a frame in the ring that
// starts at stream position pos of a ring of capacity bytes, returning its
// flags. The wire format's reserved fields carry the ring's flags and seal.
// A skip frame (flagSkip) is checked against what its producer writes
// (skipHeader) instead of want, a short frame (flagShort) as decodeShort
// reads it.
func decodeFrame(b []byte, want *transport.Header, pos, capacity uint64) (flags byte, err error) {
	if flags = b[flagsOff]; flags&flagShort != 0 {
		if flags&^(flagArmed|flagShort) != 0 {
			return 0, &transport.FrameError{Reason: fmt.Sprintf("shared ring: unknown short frame flags %#x", flags)}
		}
		return flags, decodeShort(b, want)
	}
	if flags&^flagArmed == 0 && want.IsEncodedIn(b) {
		return flags, nil
	}
	return decodeFull(b, want, pos, capacity)
}

// decodeFull is decodeFrame for a frame with a full header, decoded.
func decodeFull(b []byte, want *transport.Header, pos, capacity uint64) (flags byte, err error) {
	var got transport.Header
	flags, _, err = got.DecodeReserved(b)
	if err != nil {
		return 0, err
	}
	if flags&^(flagArmed|flagLent|flagSkip) != 0 || flags&(flagSkip|flagLent) == flagSkip|flagLent {
		return 0, &transport.FrameError{Reason: fmt.Sprintf("shared ring: unknown frame flags %#x", flags)}
	}
	if flags&flagSkip != 0 {
		if got != skipHeader(pos, capacity) {
			return 0, &transport.FrameError{Reason: fmt.Sprintf("shared ring: skip frame at %d is not one (length %d, kind %d)", pos, got.Len, got.Kind)}
		}
		return flags, nil
	}
	return flags, transport.Check(&got, want)
}

// skipHeader is the header of a skip frame (see flagSkip) that starts at
// stream position pos, a frame boundary, of a ring of capacity bytes: a
// control frame whose Len covers the bytes up to the next lap.
func skipHeader(pos, capacity uint64) transport.Header {
	return transport.Header{Kind: transport.KindControl, Len: capacity - pos&(capacity-1) - transport.HeaderSize}
}
