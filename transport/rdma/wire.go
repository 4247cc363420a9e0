package rdma

import (
	"encoding/binary"
	"fmt"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
)

// Everything a peer puts in this side's memory or completion queue is
// decoded here, and checked before use: the immediate data of every
// incoming write, the preamble of a frame's first slot, clear-to-send
// messages, and the connection data exchanged at setup. A value that fails
// a check is reported as a *transport.FrameError (FuzzDecoders, FuzzIncoming).

// Immediate data: the top 4 bits say what arrived, the low 28 bits carry
// an argument (a sequence number modulo 2^28, or a count).
type immKind uint8

const (
	immFrame  immKind = 1 // first slot of an eager frame: preamble + payload
	immCont   immKind = 2 // continuation slot of a frame: payload
	immRTS    immKind = 3 // first slot of a rendezvous frame: preamble only
	immCredit immKind = 4 // the peer consumed arg slots of its window
	immCTS    immKind = 5 // SEND of a clear-to-send message (arg: rendezvous seq)
	immDone   immKind = 6 // last RDMA WRITE of a rendezvous (arg: rendezvous seq)
	immBye    immKind = 7 // the peer is closing the connection

	immArgBits = 28
	immArgMask = 1<<immArgBits - 1
)

func (k immKind) String() string {
	switch k {
	case immFrame:
		return "frame"
	case immCont:
		return "continuation"
	case immRTS:
		return "rendezvous request"
	case immCredit:
		return "credit"
	case immCTS:
		return "clear-to-send"
	case immDone:
		return "rendezvous completion"
	case immBye:
		return "close"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func makeImm(k immKind, arg uint32) uint32 { return uint32(k)<<immArgBits | arg&immArgMask }

// decodeImm splits immediate data; an unknown kind is a frame error.
func decodeImm(imm uint32) (immKind, uint32, error) {
	k := immKind(imm >> immArgBits)
	if k < immFrame || k > immBye {
		return 0, 0, frameErr("unknown immediate kind %d (immediate %#08x)", k, imm)
	}
	return k, imm & immArgMask, nil
}

func frameErr(format string, args ...any) error {
	return &transport.FrameError{Reason: "rdma: " + fmt.Sprintf(format, args...)}
}

// The first slot of every frame starts with a preamble: the transport
// header, then the rendezvous sequence number (rendezvous requests only,
// zero otherwise) and four reserved zero bytes.
const preambleSize = transport.HeaderSize + 8

func encodePreamble(b []byte, h *transport.Header, rseq uint32) {
	h.Encode(b)
	binary.LittleEndian.PutUint32(b[transport.HeaderSize:], rseq)
	binary.LittleEndian.PutUint32(b[transport.HeaderSize+4:], 0)
}

// decodePreamble parses a frame's first slot.
func decodePreamble(b []byte, rts bool) (transport.Header, uint32, error) {
	var h transport.Header
	if len(b) < preambleSize {
		return h, 0, frameErr("first slot of a frame holds %d bytes, less than the %d-byte preamble", len(b), preambleSize)
	}
	if err := h.Decode(b); err != nil {
		return h, 0, err
	}
	rseq := binary.LittleEndian.Uint32(b[transport.HeaderSize:])
	if binary.LittleEndian.Uint32(b[transport.HeaderSize+4:]) != 0 || (!rts && rseq != 0) {
		return h, 0, frameErr("reserved preamble bytes set")
	}
	return h, rseq, nil
}

// A clear-to-send message answers a rendezvous request: the receiver's
// buffer (address, remote key, length), or a refusal that makes the sender
// stream the payload through the window instead.
//
// Wire layout (ctsSize bytes, little endian): magic u16 "CT", version u8,
// status u8, rendezvous sequence u32, address u64, rkey u32, reserved u32,
// length u64.
const (
	ctsSize    = 32
	ctsMagic   = 0x5443
	ctsVersion = 1
	ctsOK      = 0
	ctsDecline = 1
)

type cts struct {
	decline bool
	seq     uint32
	addr    uint64
	rkey    uint32
	length  uint64
}

func (c *cts) encode(b []byte) {
	_ = b[ctsSize-1]
	clear(b[:ctsSize])
	binary.LittleEndian.PutUint16(b[0:], ctsMagic)
	b[2] = ctsVersion
	if c.decline {
		b[3] = ctsDecline
	}
	binary.LittleEndian.PutUint32(b[4:], c.seq)
	binary.LittleEndian.PutUint64(b[8:], c.addr)
	binary.LittleEndian.PutUint32(b[16:], c.rkey)
	binary.LittleEndian.PutUint64(b[24:], c.length)
}

func (c *cts) decode(b []byte) error {
	if len(b) < ctsSize {
		return frameErr("clear-to-send of %d bytes", len(b))
	}
	if binary.LittleEndian.Uint16(b[0:]) != ctsMagic || b[2] != ctsVersion {
		return frameErr("clear-to-send with bad magic or version")
	}
	if b[3] > ctsDecline || binary.LittleEndian.Uint32(b[20:]) != 0 {
		return frameErr("clear-to-send with bad status %d or reserved bits", b[3])
	}
	*c = cts{decline: b[3] == ctsDecline, seq: binary.LittleEndian.Uint32(b[4:]),
		addr: binary.LittleEndian.Uint64(b[8:]), rkey: binary.LittleEndian.Uint32(b[16:]),
		length: binary.LittleEndian.Uint64(b[24:])}
	switch {
	case c.decline && (c.addr != 0 || c.rkey != 0 || c.length != 0):
		return frameErr("declining clear-to-send carries a buffer")
	case !c.decline && (c.length == 0 || c.length > transport.MaxLen):
		return frameErr("clear-to-send for %d bytes", c.length)
	case !c.decline && c.addr+c.length < c.addr:
		return frameErr("clear-to-send buffer wraps the address space")
	}
	return nil
}

// Connection data, exchanged over the bootstrap connection at setup: what
// each side's peer needs to move its queue pair to RTR and RTS and to
// write into this side's receive window.
//
// Wire layout (infoSize bytes, little endian):
//
//	 0 magic "OCCLRDM1"    8 version u16      10 status u16
//	12 flags u32 (1: emulated verbs, 2: global address needed)
//	16 QP number u32      20 PSN u32          24 LID u16
//	26 port u8            27 GID index u8     28 MTU u8 (enum ibv_mtu)
//	29 link layer u8      30 reserved u16     32 GID [16]
//	48 window addr u64    56 window rkey u32  60 slots u32
//	64 slot size u32      68 reserved u32     72 rendezvous chunk u64
//	80 text length u16    82 reserved [14]    96 text [160]
//
// The text is the device name, or why this side cannot take part.
const (
	infoSize    = 256
	infoMagic   = 0x314d4452_4c43434f // "OCCLRDM1"
	infoVersion = 1
	infoText    = 96
	infoOK      = 0
	infoError   = 1

	flagEmulated = 1
	flagGlobal   = 2

	// Limits of a receive window either side accepts.
	MinSlots    = 2
	MaxSlots    = 1024
	MinSlotSize = 256
	MaxSlotSize = 4 << 20
	maxWindow   = 256 << 20
)

type connInfo struct {
	status    uint16
	flags     uint32
	qpn, psn  uint32
	lid       uint16
	port      uint8
	gidIndex  uint8
	mtu       verbs.MTU
	linkLayer verbs.LinkLayer
	gid       verbs.GID
	winAddr   uint64
	winKey    uint32
	slots     uint32
	slotSize  uint32
	rndvChunk uint64
	text      string
}

func (ci *connInfo) encode(b []byte) {
	_ = b[infoSize-1]
	clear(b[:infoSize])
	binary.LittleEndian.PutUint64(b[0:], infoMagic)
	binary.LittleEndian.PutUint16(b[8:], infoVersion)
	binary.LittleEndian.PutUint16(b[10:], ci.status)
	binary.LittleEndian.PutUint32(b[12:], ci.flags)
	binary.LittleEndian.PutUint32(b[16:], ci.qpn)
	binary.LittleEndian.PutUint32(b[20:], ci.psn)
	binary.LittleEndian.PutUint16(b[24:], ci.lid)
	b[26], b[27], b[28], b[29] = ci.port, ci.gidIndex, byte(ci.mtu), byte(ci.linkLayer)
	copy(b[32:48], ci.gid[:])
	binary.LittleEndian.PutUint64(b[48:], ci.winAddr)
	binary.LittleEndian.PutUint32(b[56:], ci.winKey)
	binary.LittleEndian.PutUint32(b[60:], ci.slots)
	binary.LittleEndian.PutUint32(b[64:], ci.slotSize)
	binary.LittleEndian.PutUint64(b[72:], ci.rndvChunk)
	n := copy(b[infoText:infoSize], ci.text)
	binary.LittleEndian.PutUint16(b[80:], uint16(n))
}

// decode parses and checks connection data. Geometry and addresses are
// checked only when the status says the peer can take part.
func (ci *connInfo) decode(b []byte) error {
	if len(b) < infoSize {
		return frameErr("connection data of %d bytes", len(b))
	}
	if binary.LittleEndian.Uint64(b[0:]) != infoMagic {
		return frameErr("connection data with bad magic")
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != infoVersion {
		return frameErr("connection data version %d, this side speaks %d", v, infoVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[80:]))
	if n > infoSize-infoText {
		return frameErr("connection data text of %d bytes", n)
	}
	if binary.LittleEndian.Uint16(b[30:]) != 0 || binary.LittleEndian.Uint32(b[68:]) != 0 || !allZero(b[82:infoText]) || !allZero(b[infoText+n:infoSize]) {
		return frameErr("reserved bytes of the connection data set")
	}
	*ci = connInfo{status: binary.LittleEndian.Uint16(b[10:]), flags: binary.LittleEndian.Uint32(b[12:]),
		qpn: binary.LittleEndian.Uint32(b[16:]), psn: binary.LittleEndian.Uint32(b[20:]),
		lid: binary.LittleEndian.Uint16(b[24:]), port: b[26], gidIndex: b[27], mtu: verbs.MTU(b[28]),
		linkLayer: verbs.LinkLayer(b[29]), winAddr: binary.LittleEndian.Uint64(b[48:]),
		winKey: binary.LittleEndian.Uint32(b[56:]), slots: binary.LittleEndian.Uint32(b[60:]),
		slotSize: binary.LittleEndian.Uint32(b[64:]), rndvChunk: binary.LittleEndian.Uint64(b[72:]),
		text: string(b[infoText : infoText+n])}
	copy(ci.gid[:], b[32:48])
	switch {
	case ci.status > infoError:
		return frameErr("connection data status %d", ci.status)
	case ci.status == infoError:
		return nil
	case ci.flags&^(flagEmulated|flagGlobal) != 0:
		return frameErr("unknown connection data flags %#x", ci.flags)
	case ci.qpn == 0 || ci.qpn > 1<<24-1 || ci.psn > 1<<24-1:
		return frameErr("queue pair number %#x or PSN %#x out of range", ci.qpn, ci.psn)
	case !ci.mtu.Valid():
		return frameErr("path MTU code %d", ci.mtu)
	case ci.linkLayer != verbs.LinkLayerInfiniBand && ci.linkLayer != verbs.LinkLayerEthernet:
		return frameErr("link layer %d", ci.linkLayer)
	case ci.port == 0:
		return frameErr("port 0")
	case ci.flags&flagGlobal == 0 && ci.lid == 0:
		return frameErr("neither a LID nor a global address")
	case ci.slots < MinSlots || ci.slots > MaxSlots:
		return frameErr("window of %d slots (want %d to %d)", ci.slots, MinSlots, MaxSlots)
	case ci.slotSize < MinSlotSize || ci.slotSize > MaxSlotSize || ci.slotSize%64 != 0:
		return frameErr("slot size %d (want a multiple of 64 from %d to %d)", ci.slotSize, MinSlotSize, MaxSlotSize)
	case uint64(ci.slots)*uint64(ci.slotSize) > maxWindow:
		return frameErr("window of %d bytes exceeds %d", uint64(ci.slots)*uint64(ci.slotSize), maxWindow)
	case ci.winAddr+uint64(ci.slots)*uint64(ci.slotSize) < ci.winAddr:
		return frameErr("window wraps the address space")
	case ci.rndvChunk == 0 || ci.rndvChunk > 1<<31:
		return frameErr("rendezvous chunk of %d bytes", ci.rndvChunk)
	}
	return nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// creditBatch is how many consumed slots of a window of n slots a receiver
// returns at once: a quarter of the window, rounded up, so that at most 4
// credit messages are ever in flight. Both sides compute it from the
// window size.
func creditBatch(n int) int { return (n + 3) / 4 }

// maxEager is the largest payload that fits in the window of n slots of
// size bytes whatever credits the receiver still holds back: a frame
// whose receiver has consumed every earlier frame can then always be sent
// without waiting for it.
func maxEager(n, size int) int {
	return size - preambleSize + (n-creditBatch(n))*size
}
