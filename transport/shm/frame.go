package shm

import (
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
)

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
// (skipHeader) instead of want.
func decodeFrame(b []byte, want *transport.Header, pos, capacity uint64) (flags byte, err error) {
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
