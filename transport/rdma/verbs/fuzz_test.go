package verbs

import "testing"

// FuzzEmuWire feeds arbitrary bytes to the decoders of the emulated NIC's
// wire protocol (what a peer device sends): request headers, ACKs,
// hellos and hello replies. None may panic, and whatever decodes must
// re-encode to the same bytes' meaning.
func FuzzEmuWire(f *testing.F) {
	var b [helloSize]byte
	(&packet{op: WRRDMAWriteImm, hasImm: true, psn: 7, raddr: 1 << 33, rkey: 5, length: 4096, imm: 9}).encode(b[:])
	f.Add(append([]byte(nil), b[:pktSize]...))
	(&ack{nak: true, status: WCRemAccessErr, psn: 3}).encode(b[:])
	f.Add(append([]byte(nil), b[:ackSize]...))
	(&hello{srcQPN: 0x100, dstQPN: 0x101, global: true, srcGID: GID{1}, dstGID: GID{2}}).encode(b[:])
	f.Add(append([]byte(nil), b[:]...))
	encodeReply(b[:], replyReject, rejectPeer)
	f.Add(append([]byte(nil), b[:replySize]...))
	f.Fuzz(func(t *testing.T, in []byte) {
		var p packet
		if p.decode(in, 1<<30) == nil {
			var re [pktSize]byte
			p.encode(re[:])
			var p2 packet
			if err := p2.decode(re[:], 1<<30); err != nil || p2 != p {
				t.Fatalf("packet does not round-trip: %+v %+v %v", p, p2, err)
			}
		}
		var a ack
		if a.decode(in) == nil {
			var re [ackSize]byte
			a.encode(re[:])
			var a2 ack
			if err := a2.decode(re[:]); err != nil || a2 != a {
				t.Fatalf("ack does not round-trip")
			}
		}
		var h hello
		if h.decode(in) == nil {
			var re [helloSize]byte
			h.encode(re[:])
			var h2 hello
			if err := h2.decode(re[:]); err != nil || h2 != h {
				t.Fatalf("hello does not round-trip")
			}
		}
		decodeReply(in)
	})
}
