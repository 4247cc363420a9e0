package verbs

import (
	"encoding/binary"
	"fmt"
)

// The emulated NIC's wire protocol. A requester (the queue pair that posts
// sends) dials the responder's device, sends a hello naming both queue
// pairs and both addresses, and then streams packets; the responder answers
// each packet with an ACK or a NAK on the same connection. Everything read
// from a connection goes through the decoders below, which check every
// field before it is used (FuzzEmuWire).

const (
	pktSize     = 32
	ackSize     = 8
	helloSize   = 64
	replySize   = 8
	pktMagic    = 0x5645 // "EV"
	ackMagic    = 0x4b41 // "AK"
	replyMagic  = 0x5052 // "RP"
	helloMagic  = 0x31564d45_4c43434f
	pktFlagImm  = 1 << 0
	ackOK       = 0
	ackNAK      = 1
	replyOK     = 0
	replyReject = 1
	psnMask     = 1<<24 - 1
)

// packet is the header of one request: an RDMA WRITE or a SEND.
type packet struct {
	op     WROpcode
	hasImm bool
	psn    uint32
	raddr  uint64
	rkey   uint32
	length uint32
	imm    uint32
}

func (p *packet) encode(b []byte) {
	_ = b[pktSize-1]
	binary.LittleEndian.PutUint16(b[0:], pktMagic)
	b[2] = byte(p.op)
	b[3] = 0
	if p.hasImm {
		b[3] = pktFlagImm
	}
	binary.LittleEndian.PutUint32(b[4:], p.psn)
	binary.LittleEndian.PutUint64(b[8:], p.raddr)
	binary.LittleEndian.PutUint32(b[16:], p.rkey)
	binary.LittleEndian.PutUint32(b[20:], p.length)
	binary.LittleEndian.PutUint32(b[24:], p.imm)
	binary.LittleEndian.PutUint32(b[28:], 0)
}

func (p *packet) decode(b []byte, maxLen uint32) error {
	if len(b) < pktSize {
		return fmt.Errorf("short packet header: %d bytes", len(b))
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != pktMagic {
		return fmt.Errorf("bad packet magic %#04x", m)
	}
	op := WROpcode(b[2])
	if op > WRSendImm {
		return fmt.Errorf("unknown opcode %d", b[2])
	}
	if b[3]&^pktFlagImm != 0 || binary.LittleEndian.Uint32(b[28:]) != 0 {
		return fmt.Errorf("reserved bits set")
	}
	hasImm := b[3]&pktFlagImm != 0
	if hasImm != (op == WRRDMAWriteImm || op == WRSendImm) {
		return fmt.Errorf("immediate flag does not match opcode %v", op)
	}
	psn := binary.LittleEndian.Uint32(b[4:])
	if psn > psnMask {
		return fmt.Errorf("PSN %#x exceeds 24 bits", psn)
	}
	n := binary.LittleEndian.Uint32(b[20:])
	if n > maxLen {
		return fmt.Errorf("length %d exceeds the maximum message size %d", n, maxLen)
	}
	*p = packet{op: op, hasImm: hasImm, psn: psn, raddr: binary.LittleEndian.Uint64(b[8:]),
		rkey: binary.LittleEndian.Uint32(b[16:]), length: n, imm: binary.LittleEndian.Uint32(b[24:])}
	return nil
}

// ack acknowledges (or refuses) the request with the given PSN.
type ack struct {
	nak    bool
	status WCStatus // why, for a NAK
	psn    uint32
}

func (a *ack) encode(b []byte) {
	_ = b[ackSize-1]
	binary.LittleEndian.PutUint16(b[0:], ackMagic)
	b[2], b[3] = ackOK, byte(WCSuccess)
	if a.nak {
		b[2], b[3] = ackNAK, byte(a.status)
	}
	binary.LittleEndian.PutUint32(b[4:], a.psn)
}

func (a *ack) decode(b []byte) error {
	if len(b) < ackSize {
		return fmt.Errorf("short ACK: %d bytes", len(b))
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != ackMagic {
		return fmt.Errorf("bad ACK magic %#04x", m)
	}
	psn := binary.LittleEndian.Uint32(b[4:])
	if psn > psnMask {
		return fmt.Errorf("ACK PSN %#x exceeds 24 bits", psn)
	}
	switch b[2] {
	case ackOK:
		if b[3] != 0 {
			return fmt.Errorf("ACK with status %d", b[3])
		}
		*a = ack{psn: psn}
	case ackNAK:
		st := WCStatus(b[3])
		if st == WCSuccess || int(st) >= len(wcStatusText) {
			return fmt.Errorf("NAK with invalid status %d", b[3])
		}
		*a = ack{nak: true, status: st, psn: psn}
	default:
		return fmt.Errorf("unknown ACK kind %d", b[2])
	}
	return nil
}

// hello opens a requester connection: who is calling whom.
type hello struct {
	srcGID, dstGID GID
	srcQPN, dstQPN uint32
	slid, dlid     uint16
	global         bool
}

func (h *hello) encode(b []byte) {
	_ = b[helloSize-1]
	clear(b[:helloSize])
	binary.LittleEndian.PutUint64(b[0:], helloMagic)
	copy(b[8:24], h.srcGID[:])
	copy(b[24:40], h.dstGID[:])
	binary.LittleEndian.PutUint32(b[40:], h.srcQPN)
	binary.LittleEndian.PutUint32(b[44:], h.dstQPN)
	binary.LittleEndian.PutUint16(b[48:], h.slid)
	binary.LittleEndian.PutUint16(b[50:], h.dlid)
	if h.global {
		b[52] = 1
	}
}

func (h *hello) decode(b []byte) error {
	if len(b) < helloSize {
		return fmt.Errorf("short hello: %d bytes", len(b))
	}
	if binary.LittleEndian.Uint64(b[0:]) != helloMagic {
		return fmt.Errorf("bad hello magic")
	}
	if b[52] > 1 {
		return fmt.Errorf("bad global flag %d", b[52])
	}
	for _, x := range b[53:helloSize] {
		if x != 0 {
			return fmt.Errorf("reserved bytes set")
		}
	}
	src, dst := binary.LittleEndian.Uint32(b[40:]), binary.LittleEndian.Uint32(b[44:])
	if src > psnMask || dst > psnMask {
		return fmt.Errorf("queue pair number exceeds 24 bits")
	}
	*h = hello{srcQPN: src, dstQPN: dst, slid: binary.LittleEndian.Uint16(b[48:]),
		dlid: binary.LittleEndian.Uint16(b[50:]), global: b[52] == 1}
	copy(h.srcGID[:], b[8:24])
	copy(h.dstGID[:], b[24:40])
	return nil
}

// Reasons a responder refuses a hello.
const (
	rejectNoQP = iota + 1
	rejectState
	rejectPeer
	rejectAddress
	rejectBusy
)

var rejectText = map[byte]string{
	rejectNoQP:    "no such queue pair",
	rejectState:   "queue pair not ready to receive",
	rejectPeer:    "queue pair is connected to another peer",
	rejectAddress: "addressed to another GID or LID",
	rejectBusy:    "queue pair already has a requester",
}

func encodeReply(b []byte, status, reason byte) {
	_ = b[replySize-1]
	clear(b[:replySize])
	binary.LittleEndian.PutUint16(b[0:], replyMagic)
	b[2], b[3] = status, reason
}

func decodeReply(b []byte) (ok bool, reason string, err error) {
	if len(b) < replySize {
		return false, "", fmt.Errorf("short reply: %d bytes", len(b))
	}
	if binary.LittleEndian.Uint16(b[0:]) != replyMagic || binary.LittleEndian.Uint32(b[4:]) != 0 {
		return false, "", fmt.Errorf("bad reply")
	}
	switch b[2] {
	case replyOK:
		return true, "", nil
	case replyReject:
		r, known := rejectText[b[3]]
		if !known {
			r = fmt.Sprintf("reason %d", b[3])
		}
		return false, r, nil
	}
	return false, "", fmt.Errorf("bad reply status %d", b[2])
}

// packets is how many PSNs a message of n bytes uses at the given MTU.
func packets(n uint32, mtu int) uint32 {
	if n == 0 || mtu <= 0 {
		return 1
	}
	return uint32((uint64(n) + uint64(mtu) - 1) / uint64(mtu))
}
