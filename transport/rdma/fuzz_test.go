package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
)

// FuzzDecoders feeds arbitrary bytes to every decoder of data a peer
// sends: connection data (setup), clear-to-send messages, frame preambles
// and immediate data. None may panic; whatever decodes must re-encode to
// something that decodes to the same value.
func FuzzDecoders(f *testing.F) {
	var ci [infoSize]byte
	(&connInfo{qpn: 0x1234, psn: 77, lid: 0, port: 1, gidIndex: 3, mtu: verbs.MTU4096, linkLayer: verbs.LinkLayerEthernet,
		flags: flagGlobal | flagEmulated, winAddr: 1 << 40, winKey: 9, slots: 32, slotSize: 65536, rndvChunk: 4 << 20, text: "mlx5_0"}).encode(ci[:])
	f.Add(ci[:])
	var bad [infoSize]byte
	(&connInfo{status: infoError, text: "no device"}).encode(bad[:])
	f.Add(bad[:])
	var ct [ctsSize]byte
	(&cts{seq: 5, addr: 1 << 30, rkey: 3, length: 1 << 20}).encode(ct[:])
	f.Add(ct[:])
	(&cts{decline: true, seq: 6}).encode(ct[:])
	f.Add(ct[:])
	var pre [preambleSize]byte
	h := hdr(3, 1)
	encodePreamble(pre[:], &h, 9)
	f.Add(pre[:])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, infoSize))

	f.Fuzz(func(t *testing.T, b []byte) {
		var c connInfo
		if err := c.decode(b); err == nil {
			var re [infoSize]byte
			c.encode(re[:])
			var c2 connInfo
			if err := c2.decode(re[:]); err != nil || c2 != c {
				t.Fatalf("connection data does not round-trip: %+v / %+v (%v)", c, c2, err)
			}
		} else if !isFrameErr(err) {
			t.Fatalf("connection data: %T %v", err, err)
		}
		var x cts
		if err := x.decode(b); err == nil {
			var re [ctsSize]byte
			x.encode(re[:])
			var x2 cts
			if err := x2.decode(re[:]); err != nil || x2 != x {
				t.Fatalf("clear-to-send does not round-trip")
			}
		} else if !isFrameErr(err) {
			t.Fatalf("clear-to-send: %T %v", err, err)
		}
		for _, rts := range []bool{false, true} {
			if _, _, err := decodePreamble(b, rts); err != nil && !isFrameErr(err) {
				t.Fatalf("preamble: %T %v", err, err)
			}
		}
		if len(b) >= 4 {
			k, arg, err := decodeImm(binary.LittleEndian.Uint32(b))
			if err == nil && makeImm(k, arg) != binary.LittleEndian.Uint32(b) {
				t.Fatal("immediate does not round-trip")
			}
		}
	})
}

func isFrameErr(err error) bool {
	var fe *transport.FrameError
	return errors.As(err, &fe)
}

// Fake verbs for driving a Conn's protocol logic directly.
type fakeCQ struct {
	q []verbs.WorkCompletion
	n chan struct{}
}

func (f *fakeCQ) Poll(wc []verbs.WorkCompletion) (int, error) {
	n := copy(wc, f.q)
	f.q = f.q[n:]
	return n, nil
}
func (f *fakeCQ) Close() error            { return nil }
func (f *fakeCQ) Notify() <-chan struct{} { return f.n }

// fakeQP completes every send at once.
type fakeQP struct {
	cq           *fakeCQ
	sends, recvs int
}

func (q *fakeQP) Num() uint32                                        { return 1 }
func (q *fakeQP) State() verbs.QPState                               { return verbs.QPStateRTS }
func (q *fakeQP) Modify(*verbs.QPAttr, verbs.QPAttrMask) error       { return nil }
func (q *fakeQP) PostSend(*verbs.SendWR) error                       { q.sends++; return nil }
func (q *fakeQP) PostRecv(*verbs.RecvWR) error                       { q.recvs++; return nil }
func (q *fakeQP) Close() error                                       { return nil }
func (p *fakePD) CreateQP(verbs.QPInitAttr) (verbs.QueuePair, error) { return &fakeQP{}, nil }
func (p *fakePD) Close() error                                       { return nil }

type fakePD struct{}

func (p *fakePD) RegisterMemory(b []byte, _ verbs.Access) (verbs.MemoryRegion, error) {
	return &fakeMR{addr: addrOf(b), n: len(b)}, nil
}

type fakeMR struct {
	addr uint64
	n    int
}

func (m *fakeMR) Addr() uint64      { return m.addr }
func (m *fakeMR) Len() int          { return m.n }
func (m *fakeMR) LKey() uint32      { return 1 }
func (m *fakeMR) RKey() uint32      { return 2 }
func (m *fakeMR) Deregister() error { return nil }

type fakeDev struct{ verbs.Device }

func (fakeDev) AsyncError() error { return nil }

// fuzzConn builds a connection on fake verbs with a window of 4 slots of
// 256 bytes and the same window at the peer.
func fuzzConn() (*Conn, *fakeCQ, *fakeQP) {
	const slots, size = 4, 256
	cq := &fakeCQ{n: make(chan struct{})}
	qp := &fakeQP{cq: cq}
	pd := &fakePD{}
	c := &Conn{peer: 1, qp: qp, cq: cq, notify: cq.n, slots: slots, slotSize: size, pslots: slots, pslotSize: size,
		batch: creditBatch(slots), rqDepth: slots + rqExtra, rndvChunk: 1 << 20, peerChunk: 1 << 20,
		dev: &Device{dev: fakeDev{}, pd: pd, cache: NewRegCache(pd, 0, 0)}}
	c.eager = maxEager(slots, size)
	c.rndvMin = c.eager
	c.win = make([]byte, slots*size)
	c.stage = make([]byte, slots*size)
	c.rbufs = make([]byte, (c.rqDepth+1)*recvBufSize)
	c.ctsBuf = c.rbufs[c.rqDepth*recvBufSize:]
	c.winMR, _ = pd.RegisterMemory(c.win, 0)
	c.stageMR, _ = pd.RegisterMemory(c.stage, 0)
	c.rbufMR, _ = pd.RegisterMemory(c.rbufs, 0)
	c.arrivals = make([]arrival, slots)
	c.stageBusy = make([]bool, slots)
	c.credits = slots
	c.quit = make(chan struct{})
	c.wakeS, c.wakeR = make(chan struct{}, 1), make(chan struct{}, 1)
	c.timerS, c.timerR = time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	c.monitored = make(chan struct{})
	close(c.monitored)
	return c, cq, qp
}

// FuzzIncoming feeds arbitrary completions (immediate data, opcode, byte
// count, status, and the bytes the peer wrote into the slot and the
// receive buffer) to a connection and then receives and sends. The
// connection must report a FrameError, a MismatchError, ErrPeerClosed or
// the context's end, never panic, hang, read outside its window or use a
// value it did not check.
func FuzzIncoming(f *testing.F) {
	want := hdr(1, 0)
	frame := func(n int) []byte {
		var ev [12 + preambleSize + 8]byte
		binary.LittleEndian.PutUint32(ev[0:], makeImm(immFrame, 0))
		ev[4] = 1 // RDMA write with immediate
		binary.LittleEndian.PutUint32(ev[8:], uint32(preambleSize+n))
		h := want
		h.Len = uint64(n)
		encodePreamble(ev[12:], &h, 0)
		return ev[:]
	}
	f.Add(frame(8), 8)
	f.Add(frame(0), 0)
	f.Add(append(frame(8), frame(8)...), 8)
	cr := make([]byte, 12)
	binary.LittleEndian.PutUint32(cr, makeImm(immCredit, 2))
	cr[4] = 1
	f.Add(append(cr, frame(3)...), 3)
	var ctsEv [12 + ctsSize]byte
	binary.LittleEndian.PutUint32(ctsEv[0:], makeImm(immCTS, 0))
	binary.LittleEndian.PutUint32(ctsEv[8:], ctsSize)
	(&cts{seq: 0, addr: 4096, rkey: 1, length: 5000}).encode(ctsEv[12:])
	f.Add(ctsEv[:], 5000)
	bye := make([]byte, 12)
	binary.LittleEndian.PutUint32(bye, makeImm(immBye, 0))
	bye[4] = 1
	f.Add(bye, 4)
	f.Add([]byte{0, 0, 0, 0x70, 1, 5, 0, 0, 0xff, 0xff, 0xff, 0xff}, 1)

	f.Fuzz(func(t *testing.T, events []byte, n int) {
		c, cq, _ := fuzzConn()
		// Each event: imm u32, flags u8 (bit 0: RDMA write, else SEND;
		// bit 1: no immediate), status u8, 2 reserved, byte count u32,
		// then up to 64 bytes the peer wrote.
		for i := 0; len(events) >= 12 && i < 64; i++ {
			imm := binary.LittleEndian.Uint32(events)
			fl, st := events[4], events[5]
			bl := binary.LittleEndian.Uint32(events[8:])
			events = events[12:]
			k := min(len(events), 64)
			data := events[:k]
			events = events[k:]
			idx := i % c.rqDepth
			copy(c.rbufs[idx*recvBufSize:], data)
			copy(c.win[(i%c.slots)*c.slotSize:], data)
			wc := verbs.WorkCompletion{ID: wrID(wrRecv, idx), Imm: imm, ByteLen: bl, Status: verbs.WCStatus(st % 24),
				Opcode: verbs.WCRecv, Flags: verbs.WCFlagWithImm}
			if fl&1 != 0 {
				wc.Opcode = verbs.WCRecvRDMAWithImm
			}
			if fl&2 != 0 {
				wc.Flags = 0
			}
			if fl&4 != 0 {
				wc.ID = wrID(int(fl>>4), int(bl%8))
			}
			cq.q = append(cq.q, wc)
		}
		n = max(0, min(n, 8192))
		buf := make([]byte, n)
		check := func(what string, err error) bool {
			var me *transport.MismatchError
			switch {
			case err == nil:
				return true
			case isFrameErr(err), errors.As(err, &me), errors.Is(err, transport.ErrPeerClosed),
				errors.Is(err, context.DeadlineExceeded), errors.Is(err, transport.ErrClosed):
				return false
			}
			t.Fatalf("%s: unexpected error %T %v", what, err, err)
			return false
		}
		for i := 0; i < 3; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
			ok := check("Recv", c.Recv(ctx, want, buf))
			cancel()
			if !ok {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		check("Send", c.Send(ctx, want, buf))
		cancel()
		c.mu.Lock()
		if c.arrTail-c.arrHead > uint32(c.slots) || c.credits < 0 || c.credits > c.pslots {
			t.Fatalf("state out of bounds: arrivals %d..%d, credits %d", c.arrHead, c.arrTail, c.credits)
		}
		c.mu.Unlock()
	})
}
