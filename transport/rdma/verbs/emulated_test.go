package verbs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// end is one side of a connected pair of emulated queue pairs.
type end struct {
	dev *EmuDevice
	pd  ProtectionDomain
	cq  CompletionQueue
	qp  QueuePair
	gid int
}

func openDev(t testing.TB, cfg EmuConfig) *EmuDevice {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = fmt.Sprintf("test-%x", rand.Uint64())
	}
	d, err := OpenEmulated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newEnd(t testing.TB, d *EmuDevice, cqe int, cp QPCap) *end {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(cqe)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, Type: QPTypeRC, Cap: cp})
	if err != nil {
		t.Fatal(err)
	}
	e := &end{dev: d, pd: pd, cq: cq, qp: qp}
	if d.cfg.LinkLayer == LinkLayerEthernet {
		e.gid = 2
	}
	t.Cleanup(func() { qp.Close() })
	return e
}

func (e *end) init(t testing.TB) {
	t.Helper()
	if err := e.qp.Modify(&QPAttr{State: QPStateInit, PortNum: 1, AccessFlags: AccessLocalWrite | AccessRemoteWrite}, MaskResetToInit); err != nil {
		t.Fatal(err)
	}
}

func (e *end) rtr(t testing.TB, peer *end, rnrRetry uint8) {
	t.Helper()
	g, err := peer.dev.QueryGID(1, peer.gid)
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := peer.dev.QueryPort(1)
	a := QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPNum: peer.qp.Num(), RQPSN: 100, MinRNRTimer: 1,
		MaxDestRdAtomic: 1, AH: AHAttr{PortNum: 1, DLID: pa.LID}}
	if e.dev.cfg.LinkLayer == LinkLayerEthernet {
		a.AH.IsGlobal = true
		a.AH.GRH = GlobalRoute{DGID: g.GID, SGIDIndex: uint8(e.gid), HopLimit: 1}
	}
	if err := e.qp.Modify(&a, MaskInitToRTR); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Modify(&QPAttr{State: QPStateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: rnrRetry, MaxRdAtomic: 1}, MaskRTRToRTS); err != nil {
		t.Fatal(err)
	}
}

// connect makes two queue pairs on devices a and b and connects them.
func connect(t testing.TB, a, b *EmuDevice, cp QPCap, rnrRetry uint8) (*end, *end) {
	t.Helper()
	x, y := newEnd(t, a, 256, cp), newEnd(t, b, 256, cp)
	x.init(t)
	y.init(t)
	x.rtr(t, y, rnrRetry)
	y.rtr(t, x, rnrRetry)
	return x, y
}

var smallCap = QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// poll waits for n completions.
func poll(t testing.TB, cq CompletionQueue, n int) []WorkCompletion {
	t.Helper()
	out := make([]WorkCompletion, 0, n)
	wc := make([]WorkCompletion, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(wc[:min(len(wc), n-len(out))])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		out = append(out, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions: %+v", len(out), n, out)
			}
			select {
			case <-cq.(Notifier).Notify():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return out
}

func register(t testing.TB, pd ProtectionDomain, n int, acc Access) ([]byte, MemoryRegion) {
	t.Helper()
	b := make([]byte, n)
	mr, err := pd.RegisterMemory(b, acc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Deregister() })
	return b, mr
}

func sge(mr MemoryRegion, off, n int) []SGE {
	return []SGE{{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}}
}

func TestEmuWriteWithImm(t *testing.T) {
	for _, ll := range []LinkLayer{LinkLayerEthernet, LinkLayerInfiniBand} {
		t.Run(ll.String(), func(t *testing.T) {
			ns := fmt.Sprintf("t%x", rand.Uint64())
			da, db := openDev(t, EmuConfig{Namespace: ns, LinkLayer: ll}), openDev(t, EmuConfig{Namespace: ns, LinkLayer: ll})
			x, y := connect(t, da, db, smallCap, 7)
			src, smr := register(t, x.pd, 10000, 0)
			dst, dmr := register(t, y.pd, 20000, AccessLocalWrite|AccessRemoteWrite)
			for i := range src {
				src[i] = byte(i * 7)
			}
			if err := y.qp.PostRecv(&RecvWR{ID: 77}); err != nil {
				t.Fatal(err)
			}
			// A plain write, then a write with immediate: RC ordering
			// makes both visible once the second completes.
			if err := x.qp.PostSend(&SendWR{ID: 1, Op: WRRDMAWrite, SG: sge(smr, 0, 5000), RemoteAddr: dmr.Addr() + 100, RKey: dmr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if err := x.qp.PostSend(&SendWR{ID: 2, Op: WRRDMAWriteImm, Flags: SendSignaled, SG: sge(smr, 5000, 5000),
				RemoteAddr: dmr.Addr() + 5100, RKey: dmr.RKey(), Imm: 0xdeadbeef}); err != nil {
				t.Fatal(err)
			}
			wc := poll(t, y.cq, 1)[0]
			if wc.Status != WCSuccess || wc.Opcode != WCRecvRDMAWithImm || wc.Imm != 0xdeadbeef || wc.ByteLen != 5000 || wc.ID != 77 || wc.Flags&WCFlagWithImm == 0 {
				t.Fatalf("receive completion %+v", wc)
			}
			if !bytes.Equal(dst[100:10100], src) {
				t.Fatal("data not placed at the remote address")
			}
			// Only the signaled request completes at the sender.
			swc := poll(t, x.cq, 1)[0]
			if swc.ID != 2 || swc.Status != WCSuccess || swc.Opcode != WCRDMAWrite {
				t.Fatalf("send completion %+v", swc)
			}
		})
	}
}

func TestEmuSendRecvInline(t *testing.T) {
	ns := fmt.Sprintf("t%x", rand.Uint64())
	da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
	x, y := connect(t, da, db, smallCap, 7)
	rb, rmr := register(t, y.pd, 128, AccessLocalWrite)
	y.qp.PostRecv(&RecvWR{ID: 5, SG: sge(rmr, 0, 64)})
	y.qp.PostRecv(&RecvWR{ID: 6, SG: []SGE{{Addr: rmr.Addr() + 64, Length: 10, LKey: rmr.LKey()}, {Addr: rmr.Addr() + 80, Length: 30, LKey: rmr.LKey()}}})
	msg := []byte("hello, responder")
	if err := x.qp.PostSend(&SendWR{ID: 1, Op: WRSendImm, Flags: SendInline | SendSignaled, Inline: msg, Imm: 9}); err != nil {
		t.Fatal(err)
	}
	copy(msg, "XXXXX") // inline data is copied at post time
	sb, smr := register(t, x.pd, 64, 0)
	copy(sb, "0123456789abcdefghijklmnopqrstuvwxyz")
	if err := x.qp.PostSend(&SendWR{ID: 2, Op: WRSend, Flags: SendSignaled, SG: sge(smr, 0, 36)}); err != nil {
		t.Fatal(err)
	}
	w := poll(t, y.cq, 2)
	if w[0].ID != 5 || w[0].Opcode != WCRecv || w[0].ByteLen != 16 || w[0].Imm != 9 || string(rb[:16]) != "hello, responder" {
		t.Fatalf("first receive %+v %q", w[0], rb[:16])
	}
	if w[1].ID != 6 || w[1].ByteLen != 36 || w[1].Flags&WCFlagWithImm != 0 || string(rb[64:74])+string(rb[80:106]) != string(sb[:36]) {
		t.Fatalf("scattered receive %+v %q %q", w[1], rb[64:74], rb[80:106])
	}
	if s := poll(t, x.cq, 2); s[0].Opcode != WCSend || s[1].ID != 2 {
		t.Fatalf("send completions %+v", s)
	}
	if err := x.qp.PostSend(&SendWR{Op: WRSend, Flags: SendInline, Inline: make([]byte, 65)}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("oversized inline: %v", err)
	}
}

// A remote write with a bad key, outside the region, or into a region
// without REMOTE_WRITE is a remote access error: the requester's request
// fails, both queue pairs move to ERROR and everything else is flushed.
func TestEmuRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(dmr, ro MemoryRegion) (uint64, uint32)
	}{
		{"bad-rkey", func(d, _ MemoryRegion) (uint64, uint32) { return d.Addr(), d.RKey() ^ 0x5a5a }},
		{"past-end", func(d, _ MemoryRegion) (uint64, uint32) { return d.Addr() + uint64(d.Len()) - 10, d.RKey() }},
		{"before-start", func(d, _ MemoryRegion) (uint64, uint32) { return d.Addr() - 1, d.RKey() }},
		{"no-remote-write", func(_, ro MemoryRegion) (uint64, uint32) { return ro.Addr(), ro.RKey() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("t%x", rand.Uint64())
			da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
			x, y := connect(t, da, db, smallCap, 7)
			_, smr := register(t, x.pd, 100, 0)
			_, dmr := register(t, y.pd, 100, AccessLocalWrite|AccessRemoteWrite)
			_, ro := register(t, y.pd, 100, AccessLocalWrite)
			y.qp.PostRecv(&RecvWR{ID: 1})
			y.qp.PostRecv(&RecvWR{ID: 2})
			addr, key := tc.wr(dmr, ro)
			x.qp.PostSend(&SendWR{ID: 10, Op: WRRDMAWriteImm, SG: sge(smr, 0, 50), RemoteAddr: addr, RKey: key})
			x.qp.PostSend(&SendWR{ID: 11, Op: WRRDMAWriteImm, SG: sge(smr, 0, 50), RemoteAddr: dmr.Addr(), RKey: dmr.RKey()})
			s := poll(t, x.cq, 2)
			if s[0].ID != 10 || s[0].Status != WCRemAccessErr || s[1].ID != 11 || s[1].Status != WCWRFlushErr {
				t.Fatalf("requester completions %+v", s)
			}
			r := poll(t, y.cq, 2)
			for _, w := range r {
				if w.Status != WCWRFlushErr {
					t.Fatalf("responder completions %+v", r)
				}
			}
			if x.qp.State() != QPStateError || y.qp.State() != QPStateError {
				t.Fatalf("states %v %v, want ERROR", x.qp.State(), y.qp.State())
			}
			if db.Stats().AccessErrors != 1 {
				t.Fatalf("stats %+v", db.Stats())
			}
			// Posting to a queue pair in ERROR completes at once, flushed.
			x.qp.PostSend(&SendWR{ID: 12, Op: WRRDMAWrite, SG: sge(smr, 0, 1), RemoteAddr: dmr.Addr(), RKey: dmr.RKey()})
			if w := poll(t, x.cq, 1)[0]; w.ID != 12 || w.Status != WCWRFlushErr {
				t.Fatalf("post in ERROR: %+v", w)
			}
		})
	}
}

func TestEmuLocalProtection(t *testing.T) {
	ns := fmt.Sprintf("t%x", rand.Uint64())
	da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
	x, y := connect(t, da, db, smallCap, 7)
	_, smr := register(t, x.pd, 100, 0)
	_, dmr := register(t, y.pd, 100, AccessLocalWrite|AccessRemoteWrite)
	bad := sge(smr, 0, 101) // one byte past the region
	x.qp.PostSend(&SendWR{ID: 1, Op: WRRDMAWrite, SG: bad, RemoteAddr: dmr.Addr(), RKey: dmr.RKey()})
	if w := poll(t, x.cq, 1)[0]; w.Status != WCLocProtErr {
		t.Fatalf("completion %+v, want local protection error", w)
	}
	// A deregistered region is no longer usable.
	ns2 := fmt.Sprintf("t%x", rand.Uint64())
	dc, dd := openDev(t, EmuConfig{Namespace: ns2}), openDev(t, EmuConfig{Namespace: ns2})
	p, q := connect(t, dc, dd, smallCap, 7)
	_, s2 := register(t, p.pd, 100, 0)
	b := make([]byte, 100)
	d2, _ := q.pd.RegisterMemory(b, AccessLocalWrite|AccessRemoteWrite)
	d2.Deregister()
	p.qp.PostSend(&SendWR{ID: 1, Op: WRRDMAWrite, SG: sge(s2, 0, 10), RemoteAddr: d2.Addr(), RKey: d2.RKey()})
	if w := poll(t, p.cq, 1)[0]; w.Status != WCRemAccessErr {
		t.Fatalf("write to a deregistered region: %+v", w)
	}
	if err := d2.Deregister(); err == nil {
		t.Fatal("second deregistration succeeded")
	}
}

func TestEmuStateMachine(t *testing.T) {
	d := openDev(t, EmuConfig{})
	e := newEnd(t, d, 16, smallCap)
	inval := func(err error, what string) {
		t.Helper()
		if !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%s: %v, want EINVAL", what, err)
		}
	}
	inval(e.qp.PostSend(&SendWR{Op: WRSend}), "post_send in RESET")
	inval(e.qp.PostRecv(&RecvWR{}), "post_recv in RESET")
	inval(e.qp.Modify(&QPAttr{State: QPStateRTR}, MaskInitToRTR), "RESET to RTR")
	inval(e.qp.Modify(&QPAttr{State: QPStateInit, PortNum: 1}, QPAttrState|QPAttrPort), "INIT without all attributes")
	inval(e.qp.Modify(&QPAttr{State: QPStateInit, PortNum: 2}, MaskResetToInit), "INIT on port 2")
	inval(e.qp.Modify(&QPAttr{State: QPStateInit, PortNum: 1}, MaskResetToInit|QPAttrSQPSN), "INIT with an attribute it does not take")
	e.init(t)
	if err := e.qp.PostRecv(&RecvWR{ID: 1}); err != nil {
		t.Fatalf("post_recv in INIT: %v", err)
	}
	inval(e.qp.PostSend(&SendWR{Op: WRSend}), "post_send in INIT")
	inval(e.qp.Modify(&QPAttr{State: QPStateRTS}, MaskRTRToRTS), "INIT to RTS")
	// RoCE needs a global address.
	inval(e.qp.Modify(&QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPNum: 5, AH: AHAttr{DLID: 3}}, MaskInitToRTR), "RoCE without GRH")
	inval(e.qp.Modify(&QPAttr{State: QPStateRTR, PathMTU: 9, AH: AHAttr{IsGlobal: true}}, MaskInitToRTR), "bad MTU")
	inval(e.qp.Modify(&QPAttr{State: QPStateRTR, PathMTU: MTU1024, AH: AHAttr{IsGlobal: true, GRH: GlobalRoute{SGIDIndex: 9}}}, MaskInitToRTR), "bad GID index")
	if err := e.qp.Modify(&QPAttr{State: QPStateError}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if w := poll(t, e.cq, 1)[0]; w.ID != 1 || w.Status != WCWRFlushErr || w.Opcode != WCRecv {
		t.Fatalf("flushed receive %+v", w)
	}
	if err := e.qp.Modify(&QPAttr{State: QPStateReset}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	e.init(t) // usable again after RESET
	if e.qp.State() != QPStateInit {
		t.Fatalf("state %v", e.qp.State())
	}
	if err := e.pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dealloc_pd with a queue pair: %v", err)
	}
}

func TestEmuQueueLimits(t *testing.T) {
	ns := fmt.Sprintf("t%x", rand.Uint64())
	da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
	x, _ := connect(t, da, db, QPCap{MaxSendWR: 2, MaxRecvWR: 2}, 7)
	for i := 0; i < 2; i++ {
		if err := x.qp.PostRecv(&RecvWR{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.qp.PostRecv(&RecvWR{}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("third receive on a queue of 2: %v", err)
	}
	if _, err := da.CreateCQ(0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("empty CQ: %v", err)
	}
}

// More completions than the queue holds fail the queue.
func TestEmuCQOverflow(t *testing.T) {
	ns := fmt.Sprintf("t%x", rand.Uint64())
	da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
	x := newEnd(t, da, 4, smallCap)
	y := newEnd(t, db, 64, smallCap)
	x.init(t)
	y.init(t)
	x.rtr(t, y, 7)
	y.rtr(t, x, 7)
	_, smr := register(t, x.pd, 8, 0)
	_, dmr := register(t, y.pd, 8, AccessLocalWrite|AccessRemoteWrite)
	for i := 0; i < 6; i++ {
		x.qp.PostSend(&SendWR{ID: uint64(i), Op: WRRDMAWrite, Flags: SendSignaled, SG: sge(smr, 0, 8), RemoteAddr: dmr.Addr(), RKey: dmr.RKey()})
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := x.cq.Poll(make([]WorkCompletion, 0))
		if errors.Is(err, ErrCQOverflow) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no overflow reported")
		}
		time.Sleep(time.Millisecond)
	}
	if x.qp.State() != QPStateError {
		t.Fatalf("queue pair %v after its CQ overflowed", x.qp.State())
	}
}

// With rnr_retry 0 a message that finds no receive is refused; with 7 it
// waits until one is posted.
func TestEmuRNR(t *testing.T) {
	ns := fmt.Sprintf("t%x", rand.Uint64())
	da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
	x, y := connect(t, da, db, smallCap, 0)
	x.qp.PostSend(&SendWR{ID: 1, Op: WRRDMAWriteImm, Imm: 1})
	if w := poll(t, x.cq, 1)[0]; w.Status != WCRNRRetryExcErr {
		t.Fatalf("completion %+v, want RNR retry exceeded", w)
	}
	_ = y

	ns2 := fmt.Sprintf("t%x", rand.Uint64())
	dc, dd := openDev(t, EmuConfig{Namespace: ns2}), openDev(t, EmuConfig{Namespace: ns2})
	p, q := connect(t, dc, dd, smallCap, 7)
	p.qp.PostSend(&SendWR{ID: 1, Op: WRRDMAWriteImm, Flags: SendSignaled, Imm: 42})
	time.Sleep(20 * time.Millisecond)
	if n, _ := p.cq.Poll(make([]WorkCompletion, 1)); n != 0 {
		t.Fatal("completed without a receive posted")
	}
	q.qp.PostRecv(&RecvWR{ID: 3})
	if w := poll(t, q.cq, 1)[0]; w.Imm != 42 || w.ByteLen != 0 {
		t.Fatalf("%+v", w)
	}
	poll(t, p.cq, 1)
	if dd.Stats().RNRWaits != 1 {
		t.Fatalf("stats %+v", dd.Stats())
	}
}

// A dropped link and a removed device move queue pairs to ERROR at both
// ends, with RETRY_EXC_ERR for what was in flight.
func TestEmuLinkDropAndRemoval(t *testing.T) {
	for _, mode := range []string{"drop", "remove"} {
		t.Run(mode, func(t *testing.T) {
			ns := fmt.Sprintf("t%x", rand.Uint64())
			da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
			x, y := connect(t, da, db, smallCap, 7)
			y.qp.PostRecv(&RecvWR{ID: 9})
			// Wait until both directions are connected.
			x.qp.PostSend(&SendWR{ID: 1, Op: WRRDMAWriteImm, Flags: SendSignaled})
			poll(t, x.cq, 1)
			poll(t, y.cq, 1)
			y.qp.PostRecv(&RecvWR{ID: 10})
			if mode == "drop" {
				da.DropLinks()
			} else {
				db.Remove()
			}
			deadline := time.Now().Add(5 * time.Second)
			for x.qp.State() != QPStateError || (mode == "drop" && y.qp.State() != QPStateError) {
				if time.Now().After(deadline) {
					t.Fatalf("states %v %v", x.qp.State(), y.qp.State())
				}
				time.Sleep(time.Millisecond)
			}
			if mode == "remove" {
				if _, err := y.cq.Poll(make([]WorkCompletion, 1)); !errors.Is(err, ErrDeviceRemoved) {
					t.Fatalf("poll on a removed device: %v", err)
				}
				if !errors.Is(db.AsyncError(), ErrDeviceRemoved) {
					t.Fatal("no async error")
				}
				if _, err := db.AllocPD(); !errors.Is(err, ErrDeviceRemoved) {
					t.Fatalf("alloc_pd on a removed device: %v", err)
				}
				return
			}
			if w := poll(t, y.cq, 1)[0]; w.ID != 10 || w.Status != WCWRFlushErr {
				t.Fatalf("%+v", w)
			}
		})
	}
}

// Thousands of writes with immediate complete in order at both ends.
func TestEmuOrdering(t *testing.T) {
	ns := fmt.Sprintf("t%x", rand.Uint64())
	da, db := openDev(t, EmuConfig{Namespace: ns}), openDev(t, EmuConfig{Namespace: ns})
	x, y := connect(t, da, db, QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxInlineData: 16}, 7)
	_, smr := register(t, x.pd, 4096, 0)
	dst, dmr := register(t, y.pd, 4096, AccessLocalWrite|AccessRemoteWrite)
	const n = 2000
	done := make(chan error, 1)
	go func() {
		wc := make([]WorkCompletion, 16)
		posted, got := 0, 0
		for ; posted < 32; posted++ {
			y.qp.PostRecv(&RecvWR{ID: uint64(posted)})
		}
		for got < n {
			k, err := y.cq.Poll(wc)
			if err != nil {
				done <- err
				return
			}
			for _, w := range wc[:k] {
				if w.Status != WCSuccess || w.Imm != uint32(got) {
					done <- fmt.Errorf("completion %d: %+v", got, w)
					return
				}
				if dst[got%4096] != byte(got) {
					done <- fmt.Errorf("byte %d not placed before its completion", got)
					return
				}
				got++
				y.qp.PostRecv(&RecvWR{ID: uint64(posted)})
				posted++
			}
			if k == 0 {
				<-y.cq.(Notifier).Notify()
			}
		}
		done <- nil
	}()
	src := make([]byte, 1)
	inflight, completed := 0, 0
	wc := make([]WorkCompletion, 16)
	for i := 0; i < n; i++ {
		for inflight >= 32 {
			k, _ := x.cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != WCSuccess || w.ID != uint64(completed) {
					t.Fatalf("send completion %d: %+v", completed, w)
				}
				completed++
				inflight--
			}
			if k == 0 {
				<-x.cq.(Notifier).Notify()
			}
		}
		src[0] = byte(i)
		if err := x.qp.PostSend(&SendWR{ID: uint64(i), Op: WRRDMAWriteImm, Flags: SendSignaled | SendInline, Inline: src,
			RemoteAddr: dmr.Addr() + uint64(i%4096), RKey: dmr.RKey(), Imm: uint32(i)}); err != nil {
			t.Fatal(err)
		}
		inflight++
	}
	_ = smr
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
