package verbs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

type sendEntry struct {
	id        uint64
	op        WROpcode
	flags     SendFlags
	sg        [emuMaxSGE]SGE
	nsg       int
	inlineLen int
	length    uint32
	raddr     uint64
	rkey      uint32
	imm       uint32
	psn       uint32
}

type recvEntry struct {
	id  uint64
	sg  [emuMaxSGE]SGE
	nsg int
}

// emuQP is an emulated RC queue pair.
//
// Its send queue is a ring of entries between three counters: sqHead (the
// oldest not completed), sqTx (the next to transmit) and sqTail (the next
// free). The requester goroutine, started when the queue pair enters RTS,
// transmits entries in order on the connection it dialed to the peer's
// device; the ACK reader completes them as the peer acknowledges them. A
// responder goroutine serves the connection the peer dialed: it checks each
// request, places its data and answers.
type emuQP struct {
	dev      *EmuDevice
	pd       *emuPD
	num      uint32
	scq, rcq *emuCQ
	cap      QPCap
	sigAll   bool

	mu     sync.Mutex
	cond   sync.Cond
	state  QPState
	attr   QPAttr
	sq     []sendEntry
	inline []byte
	rq     []recvEntry

	sqHead, sqTx, sqTail uint64
	rqHead, rqTail       uint64
	sendPSN, expPSN      uint32

	out, in *net.UnixConn
	cause   error

	// The NIC is reading local memory for a request (txBusy) or writing
	// it for a receive (rxBusy): flushing the queues waits until it is
	// done, so that a flushed request's memory is no longer in use when
	// its completion is seen.
	txBusy, rxBusy bool
	flushPending   bool
	errIdx         uint64 // send entry that failed, when errStatus is set
	errStatus      WCStatus
	errHasIdx      bool
	recvErrStatus  WCStatus // status of the first flushed receive, if not a flush

	destroyed bool
	gen       uint64 // bumped when the queue pair leaves RTS, so old goroutines stop
	wg        sync.WaitGroup
}

// CreateQP implements ProtectionDomain.
func (p *emuPD) CreateQP(attr QPInitAttr) (QueuePair, error) {
	d := p.dev
	if err := d.check("ibv_create_qp"); err != nil {
		return nil, err
	}
	if attr.Type != QPTypeRC {
		return nil, errorf("ibv_create_qp", errInval, "only RC queue pairs are emulated (type %d)", attr.Type)
	}
	scq, ok1 := attr.SendCQ.(*emuCQ)
	rcq, ok2 := attr.RecvCQ.(*emuCQ)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, errorf("ibv_create_qp", errInval, "completion queues of another device")
	}
	c := attr.Cap
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if c.MaxSendWR < 1 || c.MaxSendWR > d.cfg.MaxQPWR || c.MaxRecvWR < 1 || c.MaxRecvWR > d.cfg.MaxQPWR ||
		c.MaxSendSGE > emuMaxSGE || c.MaxRecvSGE > emuMaxSGE || c.MaxInlineData < 0 || c.MaxInlineData > emuMaxInline {
		return nil, errorf("ibv_create_qp", errInval, "capabilities %+v exceed the device's", c)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errorf("ibv_create_qp", errInval, "protection domain deallocated")
	}
	p.nqp++
	p.mu.Unlock()
	for _, cq := range []*emuCQ{scq, rcq} {
		cq.mu.Lock()
		cq.refs++
		cq.mu.Unlock()
	}
	q := &emuQP{dev: d, pd: p, scq: scq, rcq: rcq, cap: c, sigAll: attr.SigAll,
		sq: make([]sendEntry, c.MaxSendWR), rq: make([]recvEntry, c.MaxRecvWR)}
	if c.MaxInlineData > 0 {
		q.inline = make([]byte, c.MaxSendWR*c.MaxInlineData)
	}
	q.cond.L = &q.mu
	d.mu.Lock()
	for d.qps[d.nextQPN] != nil || d.nextQPN < 0x100 {
		d.nextQPN = (d.nextQPN + 1) & psnMask
	}
	q.num = d.nextQPN
	d.nextQPN = (d.nextQPN + 1) & psnMask
	d.qps[q.num] = q
	d.mu.Unlock()
	return q, nil
}

func (q *emuQP) Num() uint32 { return q.num }

func (q *emuQP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Attributes each transition requires and allows (after ib_modify_qp_is_ok
// in the kernel, RC only).
var transitions = map[[2]QPState][2]QPAttrMask{
	{QPStateReset, QPStateInit}: {MaskResetToInit, 0},
	{QPStateInit, QPStateInit}:  {QPAttrState, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
	{QPStateInit, QPStateRTR}:   {MaskInitToRTR, QPAttrAccessFlags | QPAttrPKeyIndex},
	{QPStateRTR, QPStateRTS}:    {MaskRTRToRTS, QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPStateRTS, QPStateRTS}:    {QPAttrState, QPAttrAccessFlags | QPAttrMinRNRTimer},
}

// Modify implements QueuePair.
func (q *emuQP) Modify(a *QPAttr, mask QPAttrMask) error {
	if err := q.dev.check("ibv_modify_qp"); err != nil {
		return err
	}
	if mask&QPAttrState == 0 {
		return errorf("ibv_modify_qp", errInval, "IBV_QP_STATE not in the mask")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return errorf("ibv_modify_qp", errInval, "queue pair destroyed")
	}
	cur, next := q.state, a.State
	switch next {
	case QPStateReset:
		q.resetLocked()
		return nil
	case QPStateError:
		q.errorLocked(false, 0, WCWRFlushErr, errors.New("moved to ERROR by ibv_modify_qp"))
		return nil
	}
	rule, ok := transitions[[2]QPState{cur, next}]
	if !ok {
		return errorf("ibv_modify_qp", errInval, "no transition from %v to %v", cur, next)
	}
	if mask&rule[0] != rule[0] {
		return errorf("ibv_modify_qp", errInval, "%v to %v needs attribute mask %#x, got %#x", cur, next, uint32(rule[0]), uint32(mask))
	}
	if extra := mask &^ (rule[0] | rule[1]); extra != 0 {
		return errorf("ibv_modify_qp", errInval, "attributes %#x not allowed from %v to %v", uint32(extra), cur, next)
	}
	n := q.attr
	if mask&QPAttrPort != 0 {
		if a.PortNum != emuPort {
			return errorf("ibv_modify_qp", errInval, "port %d", a.PortNum)
		}
		n.PortNum = a.PortNum
	}
	if mask&QPAttrPKeyIndex != 0 {
		if a.PKeyIndex != 0 {
			return errorf("ibv_modify_qp", errInval, "pkey index %d (the table has one entry)", a.PKeyIndex)
		}
		n.PKeyIndex = a.PKeyIndex
	}
	if mask&QPAttrAccessFlags != 0 {
		n.AccessFlags = a.AccessFlags
	}
	if mask&QPAttrPathMTU != 0 {
		if !a.PathMTU.Valid() || a.PathMTU > q.dev.cfg.ActiveMTU {
			return errorf("ibv_modify_qp", errInval, "path MTU %d (port active MTU %d)", a.PathMTU.Bytes(), q.dev.cfg.ActiveMTU.Bytes())
		}
		n.PathMTU = a.PathMTU
	}
	if mask&QPAttrDestQPN != 0 {
		if a.DestQPNum > psnMask {
			return errorf("ibv_modify_qp", errInval, "destination QP number %#x", a.DestQPNum)
		}
		n.DestQPNum = a.DestQPNum
	}
	if mask&QPAttrRQPSN != 0 {
		if a.RQPSN > psnMask {
			return errorf("ibv_modify_qp", errInval, "rq_psn %#x", a.RQPSN)
		}
		n.RQPSN = a.RQPSN
	}
	if mask&QPAttrSQPSN != 0 {
		if a.SQPSN > psnMask {
			return errorf("ibv_modify_qp", errInval, "sq_psn %#x", a.SQPSN)
		}
		n.SQPSN = a.SQPSN
	}
	if mask&QPAttrAV != 0 {
		ah := a.AH
		if ah.PortNum == 0 {
			ah.PortNum = n.PortNum
		}
		if ah.PortNum != emuPort {
			return errorf("ibv_modify_qp", errInval, "address vector port %d", ah.PortNum)
		}
		if q.dev.cfg.LinkLayer == LinkLayerEthernet && !ah.IsGlobal {
			return errorf("ibv_modify_qp", errInval, "RoCE needs a global address vector (is_global and a GID)")
		}
		if ah.IsGlobal && int(ah.GRH.SGIDIndex) >= len(q.dev.gids) {
			return errorf("ibv_modify_qp", errInval, "source GID index %d (table of %d)", ah.GRH.SGIDIndex, len(q.dev.gids))
		}
		if !ah.IsGlobal && ah.DLID == 0 {
			return errorf("ibv_modify_qp", errInval, "no destination LID")
		}
		n.AH = ah
	}
	if mask&QPAttrMinRNRTimer != 0 {
		if a.MinRNRTimer > 31 {
			return errorf("ibv_modify_qp", errInval, "min_rnr_timer %d", a.MinRNRTimer)
		}
		n.MinRNRTimer = a.MinRNRTimer
	}
	if mask&QPAttrTimeout != 0 {
		if a.Timeout > 31 {
			return errorf("ibv_modify_qp", errInval, "timeout %d", a.Timeout)
		}
		n.Timeout = a.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		if a.RetryCnt > 7 {
			return errorf("ibv_modify_qp", errInval, "retry_cnt %d", a.RetryCnt)
		}
		n.RetryCnt = a.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		if a.RNRRetry > 7 {
			return errorf("ibv_modify_qp", errInval, "rnr_retry %d", a.RNRRetry)
		}
		n.RNRRetry = a.RNRRetry
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		n.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		n.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	n.State = next
	q.attr = n
	q.state = next
	switch {
	case cur == QPStateInit && next == QPStateRTR:
		q.expPSN = n.RQPSN
	case cur == QPStateRTR && next == QPStateRTS:
		q.sendPSN = n.SQPSN
		h, target := q.helloLocked()
		q.wg.Add(1)
		go q.requester(target, h, q.gen)
	}
	q.cond.Broadcast()
	return nil
}

// helloLocked builds the hello this queue pair's requester sends and the
// socket of the peer's device.
func (q *emuQP) helloLocked() (hello, string) {
	ah := q.attr.AH
	h := hello{srcQPN: q.num, dstQPN: q.attr.DestQPNum, slid: q.dev.lid, dlid: ah.DLID, global: ah.IsGlobal}
	if ah.IsGlobal {
		h.srcGID = q.dev.gids[ah.GRH.SGIDIndex].GID
		h.dstGID = ah.GRH.DGID
		return h, socketForID(q.dev.cfg.Namespace, ah.GRH.DGID[8:])
	}
	return h, q.dev.lidSocket(ah.DLID)
}

// resetLocked returns the queue pair to RESET: queues emptied without
// completions, connections closed.
func (q *emuQP) resetLocked() {
	q.gen++
	q.closeConnsLocked()
	q.state = QPStateReset
	q.attr = QPAttr{}
	q.sqHead, q.sqTx, q.sqTail = 0, 0, 0
	q.rqHead, q.rqTail = 0, 0
	q.flushPending, q.errHasIdx, q.errStatus, q.recvErrStatus = false, false, 0, 0
	q.cause = nil
	q.cond.Broadcast()
}

func (q *emuQP) closeConnsLocked() {
	if q.out != nil {
		q.out.Close()
		q.out = nil
	}
	if q.in != nil {
		q.in.Close()
		q.in = nil
	}
}

// errorLocked moves the queue pair to ERROR. If hasIdx, send entry idx
// completes first with status; every other outstanding request and every
// posted receive completes with WR_FLUSH_ERR (the first receive with
// recvErrStatus if it is set).
func (q *emuQP) errorLocked(hasIdx bool, idx uint64, status WCStatus, cause error) {
	if q.state == QPStateError || q.state == QPStateReset && q.sqTail == q.sqHead && q.rqTail == q.rqHead {
		q.state = QPStateError
		q.closeConnsLocked()
		q.cond.Broadcast()
		return
	}
	q.gen++
	q.state = QPStateError
	q.attr.State = QPStateError
	q.cause = cause
	if hasIdx && idx >= q.sqHead && idx < q.sqTail {
		q.errHasIdx, q.errIdx, q.errStatus = true, idx, status
	}
	q.closeConnsLocked()
	q.flushPending = true
	q.flushLocked()
	q.cond.Broadcast()
}

// flushLocked completes every outstanding request of a queue pair in
// ERROR, unless the NIC is still using local memory for one: then the
// goroutine doing so flushes when it is done.
func (q *emuQP) flushLocked() {
	if !q.flushPending || q.txBusy || q.rxBusy {
		return
	}
	q.flushPending = false
	if q.errHasIdx {
		e := &q.sq[q.errIdx%uint64(len(q.sq))]
		q.pushSend(WorkCompletion{ID: e.id, Status: q.errStatus, QPNum: q.num, VendorErr: uint32(q.errStatus)})
	}
	for i := q.sqHead; i < q.sqTail; i++ {
		if q.errHasIdx && i == q.errIdx {
			continue
		}
		e := &q.sq[i%uint64(len(q.sq))]
		q.pushSend(WorkCompletion{ID: e.id, Status: WCWRFlushErr, QPNum: q.num})
	}
	q.errHasIdx = false
	q.sqHead, q.sqTx = q.sqTail, q.sqTail
	first := true
	for i := q.rqHead; i < q.rqTail; i++ {
		st := WCWRFlushErr
		if first && q.recvErrStatus != 0 {
			st = q.recvErrStatus
		}
		first = false
		r := &q.rq[i%uint64(len(q.rq))]
		q.rcq.push(WorkCompletion{ID: r.id, Status: st, Opcode: WCRecv, QPNum: q.num})
	}
	q.recvErrStatus = 0
	q.rqHead = q.rqTail
}

func (q *emuQP) pushSend(wc WorkCompletion) {
	if !q.scq.push(wc) && q.state != QPStateError {
		q.errorLocked(false, 0, WCWRFlushErr, errorf("ibv_poll_cq", ErrCQOverflow, "send queue completions"))
	}
}

// linkFailed moves the queue pair to ERROR after its link broke: the
// oldest request in flight fails with RETRY_EXC_ERR, as it would after the
// transport retries ran out.
func (q *emuQP) linkFailed(cause error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.linkFailedLocked(cause)
}

func (q *emuQP) linkFailedLocked(cause error) {
	switch q.state {
	case QPStateInit, QPStateRTR, QPStateRTS:
		q.dev.stats.linkFailures.Add(1)
		q.errorLocked(q.sqHead < q.sqTx, q.sqHead, WCRetryExcErr, cause)
	default:
		q.closeConnsLocked()
		q.cond.Broadcast()
	}
}

// connFailed is linkFailed for a goroutine serving conn: nothing happens
// if conn is no longer the queue pair's (it was closed on purpose).
//
// When the connection the peer dialed breaks while requests of this side
// are in flight, the peer may have refused one of them just before it
// closed everything (a NAK, which moves both sides to ERROR): the ACK
// reader decides then, since it sees the NAK before the end of the other
// connection, which a peer always closes too.
func (q *emuQP) connFailed(conn *net.UnixConn, cause error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.out != conn && q.in != conn {
		return
	}
	if conn == q.in && q.out != nil && q.sqHead < q.sqTx {
		q.in.Close()
		q.in = nil
		return
	}
	q.linkFailedLocked(cause)
}

// Close implements QueuePair: the queue pair is destroyed without
// completions, its connections drop and its goroutines end before Close
// returns, so the NIC no longer touches any memory for it.
func (q *emuQP) Close() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return errorf("ibv_destroy_qp", errInval, "already destroyed")
	}
	q.destroyed = true
	q.state = QPStateReset
	q.closeConnsLocked()
	q.cond.Broadcast()
	q.mu.Unlock()
	q.wg.Wait()
	d := q.dev
	d.mu.Lock()
	delete(d.qps, q.num)
	d.mu.Unlock()
	for _, cq := range []*emuCQ{q.scq, q.rcq} {
		cq.mu.Lock()
		cq.refs--
		cq.mu.Unlock()
	}
	q.pd.mu.Lock()
	q.pd.nqp--
	q.pd.mu.Unlock()
	return nil
}

// PostSend implements QueuePair.
func (q *emuQP) PostSend(wr *SendWR) error {
	if err := q.dev.check("ibv_post_send"); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return errorf("ibv_post_send", errInval, "queue pair destroyed")
	}
	if q.state != QPStateRTS && q.state != QPStateError {
		return errorf("ibv_post_send", errInval, "queue pair in state %v", q.state)
	}
	if q.sqTail-q.sqHead >= uint64(len(q.sq)) {
		return errorf("ibv_post_send", errNoMem, "send queue full (%d requests)", len(q.sq))
	}
	if wr.Op > WRSendImm {
		return errorf("ibv_post_send", errInval, "opcode %v not supported", wr.Op)
	}
	i := q.sqTail % uint64(len(q.sq))
	e := &q.sq[i]
	*e = sendEntry{id: wr.ID, op: wr.Op, flags: wr.Flags, raddr: wr.RemoteAddr, rkey: wr.RKey, imm: wr.Imm}
	if wr.Flags&SendInline != 0 {
		if len(wr.Inline) > q.cap.MaxInlineData {
			return errorf("ibv_post_send", errInval, "%d bytes inline (max %d)", len(wr.Inline), q.cap.MaxInlineData)
		}
		e.inlineLen = copy(q.inline[int(i)*q.cap.MaxInlineData:], wr.Inline)
		e.length = uint32(e.inlineLen)
	} else {
		if len(wr.SG) > q.cap.MaxSendSGE {
			return errorf("ibv_post_send", errInval, "%d scatter/gather entries (max %d)", len(wr.SG), q.cap.MaxSendSGE)
		}
		var total uint64
		for k, s := range wr.SG {
			e.sg[k] = s
			total += uint64(s.Length)
		}
		if total > uint64(q.dev.cfg.MaxMsgSize) {
			return errorf("ibv_post_send", errInval, "%d bytes exceed the maximum message size", total)
		}
		e.nsg = len(wr.SG)
		e.length = uint32(total)
	}
	q.sqTail++
	if q.state == QPStateError {
		q.flushPending = true
		q.flushLocked()
	}
	q.cond.Broadcast()
	return nil
}

// PostRecv implements QueuePair.
func (q *emuQP) PostRecv(wr *RecvWR) error {
	if err := q.dev.check("ibv_post_recv"); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed || q.state == QPStateReset {
		return errorf("ibv_post_recv", errInval, "queue pair in state %v", q.state)
	}
	if q.rqTail-q.rqHead >= uint64(len(q.rq)) {
		return errorf("ibv_post_recv", errNoMem, "receive queue full (%d requests)", len(q.rq))
	}
	if len(wr.SG) > q.cap.MaxRecvSGE {
		return errorf("ibv_post_recv", errInval, "%d scatter/gather entries (max %d)", len(wr.SG), q.cap.MaxRecvSGE)
	}
	r := &q.rq[q.rqTail%uint64(len(q.rq))]
	r.id, r.nsg = wr.ID, copy(r.sg[:], wr.SG)
	q.rqTail++
	if q.state == QPStateError {
		q.flushPending = true
		q.flushLocked()
	}
	q.cond.Broadcast()
	return nil
}

func (q *emuQP) mtu() int { return q.attr.PathMTU.Bytes() }

// requester dials the peer's device, introduces itself and transmits the
// send queue in order.
func (q *emuQP) requester(target string, h hello, gen uint64) {
	defer q.wg.Done()
	conn, err := q.dial(target, h, gen)
	if err != nil {
		q.mu.Lock()
		if q.state == QPStateRTS && !q.destroyed && q.gen == gen {
			q.linkFailedLocked(fmt.Errorf("cannot reach queue pair %#x: %w", h.dstQPN, err))
		}
		q.mu.Unlock()
		return
	}
	q.mu.Lock()
	if q.state != QPStateRTS || q.destroyed || q.out != nil || q.gen != gen {
		q.mu.Unlock()
		conn.Close()
		return
	}
	q.out = conn
	q.wg.Add(1)
	go q.ackReader(conn)
	q.mu.Unlock()

	buf := make([]byte, pktSize+16<<10)
	inl := make([]byte, emuMaxInline)
	var cur sendEntry
	for {
		q.mu.Lock()
		for q.sqTx == q.sqTail && q.state == QPStateRTS && q.out == conn {
			q.cond.Wait()
		}
		if q.state != QPStateRTS || q.out != conn {
			q.mu.Unlock()
			return
		}
		idx := q.sqTx
		e := &q.sq[idx%uint64(len(q.sq))]
		e.psn = q.sendPSN
		cur = *e
		if cur.flags&SendInline != 0 {
			off := int(idx%uint64(len(q.sq))) * q.cap.MaxInlineData
			copy(inl, q.inline[off:off+cur.inlineLen])
		}
		q.sendPSN = (q.sendPSN + packets(cur.length, q.mtu())) & psnMask
		q.sqTx++
		q.txBusy = true
		q.mu.Unlock()

		st, werr := q.transmit(conn, &cur, inl[:cur.inlineLen], buf)

		q.mu.Lock()
		q.txBusy = false
		if st != WCSuccess && q.state == QPStateRTS && q.out == conn {
			q.errorLocked(true, idx, st, fmt.Errorf("local %v on work request %#x", st, cur.id))
		}
		q.flushLocked()
		q.mu.Unlock()
		if werr != nil {
			// The peer may have refused an earlier request and closed
			// everything just before this write (a NAK, then its ends
			// of the link): the ACK reader reads that NAK before the
			// end of the connection, so it decides, within ackDrain.
			if conn.SetReadDeadline(time.Now().Add(ackDrain)) != nil {
				q.connFailed(conn, werr)
			}
			return
		}
		if st != WCSuccess {
			return
		}
	}
}

// dial connects to the peer's device, retrying until the device listens
// or the connect timeout passes, and exchanges the hello.
func (q *emuQP) dial(target string, h hello, gen uint64) (*net.UnixConn, error) {
	deadline := time.Now().Add(q.dev.cfg.ConnectTimeout)
	addr := &net.UnixAddr{Name: target, Net: "unix"}
	for {
		q.mu.Lock()
		live := q.state == QPStateRTS && !q.destroyed && q.gen == gen
		q.mu.Unlock()
		if !live {
			return nil, errors.New("queue pair left RTS")
		}
		conn, err := net.DialUnix("unix", nil, addr)
		if err == nil {
			conn.SetDeadline(deadline.Add(time.Second))
			var b [helloSize]byte
			h.encode(b[:])
			if _, err = conn.Write(b[:]); err == nil {
				var r [replySize]byte
				if _, err = io.ReadFull(conn, r[:]); err == nil {
					ok, why, derr := decodeReply(r[:])
					switch {
					case derr != nil:
						err = derr
					case !ok:
						err = fmt.Errorf("peer device refused the connection: %s", why)
					}
				}
			}
			if err == nil {
				conn.SetDeadline(time.Time{})
				return conn, nil
			}
			conn.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
}

// transmit sends one request: header and payload, straight from the
// registered memory (held against deregistration while it is read).
func (q *emuQP) transmit(conn *net.UnixConn, e *sendEntry, inl, buf []byte) (WCStatus, error) {
	p := packet{op: e.op, hasImm: e.op == WRRDMAWriteImm || e.op == WRSendImm, psn: e.psn,
		raddr: e.raddr, rkey: e.rkey, length: e.length, imm: e.imm}
	p.encode(buf[:pktSize])
	q.dev.stats.packetsOut.Add(1)
	q.dev.stats.bytesOut.Add(uint64(e.length))
	if e.flags&SendInline != 0 {
		n := copy(buf[pktSize:], inl)
		_, err := conn.Write(buf[:pktSize+n])
		return WCSuccess, err
	}
	var (
		mrs  [emuMaxSGE]*emuMR
		segs [emuMaxSGE][]byte
	)
	for k := 0; k < e.nsg; k++ {
		s := e.sg[k]
		if s.Length == 0 {
			continue
		}
		m := q.dev.lookup(s.LKey, false, q.pd, 0)
		if m == nil {
			unlockMRs(&mrs)
			return WCLocProtErr, nil
		}
		if !dupMR(mrs[:k], m) {
			m.mu.RLock()
		}
		mrs[k] = m
		seg, ok := m.span(s.Addr, s.Length)
		if !ok {
			unlockMRs(&mrs)
			return WCLocProtErr, nil
		}
		segs[k] = seg
	}
	err := writeSegs(conn, buf, e.nsg, &segs)
	unlockMRs(&mrs)
	return WCSuccess, err
}

// writeSegs writes the header in buf[:pktSize] and the segments: in one
// write when they fit in buf, else straight from the registered memory.
func writeSegs(conn *net.UnixConn, buf []byte, nsg int, segs *[emuMaxSGE][]byte) error {
	total := 0
	for k := 0; k < nsg; k++ {
		total += len(segs[k])
	}
	if total <= len(buf)-pktSize {
		n := pktSize
		for k := 0; k < nsg; k++ {
			n += copy(buf[n:], segs[k])
		}
		_, err := conn.Write(buf[:n])
		return err
	}
	if _, err := conn.Write(buf[:pktSize]); err != nil {
		return err
	}
	for k := 0; k < nsg; k++ {
		if len(segs[k]) > 0 {
			if _, err := conn.Write(segs[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

func unlockMRs(mrs *[emuMaxSGE]*emuMR) {
	for k, m := range mrs {
		if m != nil && !dupMR(mrs[:k], m) {
			m.mu.RUnlock()
		}
	}
}

func dupMR(prev []*emuMR, m *emuMR) bool {
	for _, p := range prev {
		if p == m {
			return true
		}
	}
	return false
}

// ackDrain bounds how long the ACK reader may still read after a request
// could not be written: long enough for the answers the peer sent before
// its end of the link closed, which are already in the socket.
const ackDrain = time.Second

// ackReader completes requests as the peer acknowledges them.
func (q *emuQP) ackReader(conn *net.UnixConn) {
	defer q.wg.Done()
	b := make([]byte, ackSize)
	for {
		if _, err := io.ReadFull(conn, b); err != nil {
			q.connFailed(conn, fmt.Errorf("link to peer: %w", err))
			return
		}
		var a ack
		if err := a.decode(b); err != nil {
			q.connFailed(conn, fmt.Errorf("peer sent a bad ACK: %w", err))
			return
		}
		q.mu.Lock()
		if q.out != conn || q.state != QPStateRTS {
			q.mu.Unlock()
			return
		}
		if q.sqHead == q.sqTx {
			q.errorLocked(false, 0, WCWRFlushErr, fmt.Errorf("unexpected ACK for PSN %#x", a.psn))
			q.mu.Unlock()
			return
		}
		idx := q.sqHead
		e := &q.sq[idx%uint64(len(q.sq))]
		switch {
		case a.psn != e.psn:
			q.errorLocked(true, idx, WCBadRespErr, fmt.Errorf("ACK for PSN %#x, expected %#x", a.psn, e.psn))
		case a.nak:
			q.errorLocked(true, idx, a.status, fmt.Errorf("peer refused work request %#x: %v", e.id, a.status))
		default:
			if e.flags&SendSignaled != 0 || q.sigAll {
				op := WCRDMAWrite
				if e.op == WRSend || e.op == WRSendImm {
					op = WCSend
				}
				q.pushSend(WorkCompletion{ID: e.id, Status: WCSuccess, Opcode: op, QPNum: q.num})
			}
			if q.state == QPStateRTS {
				q.sqHead++
			}
			q.cond.Broadcast()
		}
		live := q.state == QPStateRTS
		q.mu.Unlock()
		if !live {
			return
		}
	}
}

// acceptLoop hands every connection to the device to a handshake.
func (d *EmuDevice) acceptLoop(ln *net.UnixListener) {
	defer d.acceptWG.Done()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go d.handshake(c)
	}
}

// handshake checks a requester's hello against the queue pair it names and
// attaches the connection to it.
func (d *EmuDevice) handshake(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(d.cfg.ConnectTimeout + time.Second))
	var b [helloSize]byte
	var h hello
	if _, err := io.ReadFull(c, b[:]); err != nil || h.decode(b[:]) != nil {
		c.Close()
		return
	}
	reject := func(reason byte) {
		var r [replySize]byte
		encodeReply(r[:], replyReject, reason)
		c.Write(r[:])
		c.Close()
	}
	d.mu.RLock()
	q := d.qps[h.dstQPN]
	d.mu.RUnlock()
	if q == nil {
		reject(rejectNoQP)
		return
	}
	// Wait for the queue pair to be ready to receive, as a requester
	// retries until the responder is.
	deadline := time.Now().Add(d.cfg.ConnectTimeout)
	q.mu.Lock()
	for q.state < QPStateRTR && q.state != QPStateReset && !q.destroyed && time.Now().Before(deadline) {
		q.mu.Unlock()
		time.Sleep(time.Millisecond)
		q.mu.Lock()
	}
	if q.destroyed || (q.state != QPStateRTR && q.state != QPStateRTS) {
		q.mu.Unlock()
		reject(rejectState)
		return
	}
	ah := q.attr.AH
	var why byte
	switch {
	case q.attr.DestQPNum != h.srcQPN:
		why = rejectPeer
	case h.global != ah.IsGlobal:
		why = rejectAddress
	case h.global && (h.dstGID != d.gids[ah.GRH.SGIDIndex].GID || h.srcGID != ah.GRH.DGID):
		why = rejectAddress
	case !h.global && (h.dlid != d.lid || h.slid != ah.DLID):
		why = rejectAddress
	case q.in != nil:
		why = rejectBusy
	}
	if why != 0 {
		q.mu.Unlock()
		reject(why)
		return
	}
	q.in = c
	q.wg.Add(1)
	q.mu.Unlock()
	var r [replySize]byte
	encodeReply(r[:], replyOK, 0)
	if _, err := c.Write(r[:]); err != nil {
		q.connFailed(c, err)
		q.wg.Done()
		return
	}
	c.SetDeadline(time.Time{})
	q.responder(c)
}

// errStale: the connection is no longer the queue pair's.
var errStale = errors.New("stale connection")

// responder serves the requests of the peer's requester.
func (q *emuQP) responder(c *net.UnixConn) {
	defer q.wg.Done()
	hb := make([]byte, pktSize)
	ab := make([]byte, ackSize)
	var wc WorkCompletion
	for {
		if _, err := io.ReadFull(c, hb); err != nil {
			q.connFailed(c, fmt.Errorf("link from peer: %w", err))
			return
		}
		var p packet
		if err := p.decode(hb, q.dev.cfg.MaxMsgSize); err != nil {
			q.connFailed(c, fmt.Errorf("peer sent a bad packet: %w", err))
			return
		}
		a, recv, err := q.respond(c, &p, &wc)
		if err != nil {
			if err != errStale {
				q.connFailed(c, err)
			}
			return
		}
		// The ACK leaves before the receive completes, as a NIC acknowledges
		// a request once it has placed it: a receiver that destroys its queue
		// pair as soon as it has seen the completion must not take the
		// sender's acknowledgement with it.
		a.encode(ab)
		_, werr := c.Write(ab)
		if recv {
			q.complete(c, wc)
		}
		if werr != nil {
			q.connFailed(c, werr)
			return
		}
		if a.nak {
			// The requester moves to ERROR on a NAK; so does this side.
			q.mu.Lock()
			if q.in == c {
				q.errorLocked(false, 0, WCWRFlushErr, fmt.Errorf("refused a request of the peer: %v", a.status))
			}
			q.mu.Unlock()
			return
		}
	}
}

// rnrDelay is the minimum RNR NAK timer of the given code, in the units of
// the InfiniBand specification.
func rnrDelay(code uint8) time.Duration {
	us := [...]float64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760,
		327680, 491520}
	return time.Duration(us[code&31] * float64(time.Microsecond))
}

// respond executes one request and says how to answer it, and whether the
// receive completion it stores in *wc is to be delivered once the answer is
// sent (see responder). Data that is not placed is read and dropped so that
// the stream stays in step.
func (q *emuQP) respond(c *net.UnixConn, p *packet, wc *WorkCompletion) (ack, bool, error) {
	d := q.dev
	q.mu.Lock()
	if q.in != c || (q.state != QPStateRTR && q.state != QPStateRTS) {
		q.mu.Unlock()
		return ack{}, false, errStale
	}
	if p.psn != q.expPSN {
		// A PSN out of sequence cannot happen on a reliable stream unless
		// the queue pairs were given inconsistent PSNs: refuse it.
		q.mu.Unlock()
		if err := discard(c, p.length); err != nil {
			return ack{}, false, err
		}
		return ack{nak: true, status: WCRemInvReqErr, psn: p.psn}, false, nil
	}
	q.expPSN = (q.expPSN + packets(p.length, q.mtu())) & psnMask
	needRecv := p.op != WRRDMAWrite
	if needRecv && q.rqHead == q.rqTail {
		d.stats.rnrWaits.Add(1)
		for tries := 0; q.rqHead == q.rqTail; tries++ {
			if q.attr.RNRRetry != 7 && tries >= int(q.attr.RNRRetry) {
				q.mu.Unlock()
				d.stats.rnrNaks.Add(1)
				if err := discard(c, p.length); err != nil {
					return ack{}, false, err
				}
				return ack{nak: true, status: WCRNRRetryExcErr, psn: p.psn}, false, nil
			}
			if q.attr.RNRRetry == 7 {
				q.cond.Wait()
			} else {
				q.mu.Unlock()
				time.Sleep(rnrDelay(q.attr.MinRNRTimer))
				q.mu.Lock()
			}
			if q.in != c || (q.state != QPStateRTR && q.state != QPStateRTS) {
				q.mu.Unlock()
				return ack{}, false, errStale
			}
		}
	}
	nak := ack{nak: true, psn: p.psn}
	switch p.op {
	case WRRDMAWrite, WRRDMAWriteImm:
		var m *emuMR
		if p.length > 0 && q.attr.AccessFlags&AccessRemoteWrite != 0 {
			m = d.lookup(p.rkey, true, q.pd, AccessRemoteWrite)
		}
		q.rxBusy = needRecv
		q.mu.Unlock()
		placed := p.length == 0
		if m != nil {
			m.mu.RLock()
			if dst, ok := m.span(p.raddr, p.length); ok {
				if _, err := io.ReadFull(c, dst); err != nil {
					m.mu.RUnlock()
					q.doneRx()
					return ack{}, false, err
				}
				placed = true
			}
			m.mu.RUnlock()
		}
		if !placed {
			d.stats.accessErrors.Add(1)
			q.doneRx()
			if err := discard(c, p.length); err != nil {
				return ack{}, false, err
			}
			nak.status = WCRemAccessErr
			return nak, false, nil
		}
		d.stats.writesIn.Add(1)
		d.stats.bytesIn.Add(uint64(p.length))
		if !needRecv {
			return ack{psn: p.psn}, false, nil
		}
		q.mu.Lock()
		q.rxBusy = false
		if q.in != c || (q.state != QPStateRTR && q.state != QPStateRTS) {
			q.flushLocked()
			q.mu.Unlock()
			return ack{}, false, errStale
		}
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.rqHead++
		*wc = WorkCompletion{ID: r.id, Status: WCSuccess, Opcode: WCRecvRDMAWithImm, Flags: WCFlagWithImm,
			ByteLen: p.length, Imm: p.imm, QPNum: q.num, SrcQP: q.attr.DestQPNum}
		q.mu.Unlock()
		return ack{psn: p.psn}, true, nil
	}
	// SEND: scatter into the posted receive.
	r := q.rq[q.rqHead%uint64(len(q.rq))]
	q.rxBusy = true
	q.mu.Unlock()
	var capacity uint64
	for k := 0; k < r.nsg; k++ {
		capacity += uint64(r.sg[k].Length)
	}
	status := WCSuccess
	left := p.length
	if uint64(p.length) > capacity {
		status = WCLocLenErr
	}
	for k := 0; k < r.nsg && left > 0 && status == WCSuccess; k++ {
		s := r.sg[k]
		n := min(s.Length, left)
		m := d.lookup(s.LKey, false, q.pd, AccessLocalWrite)
		if m == nil {
			status = WCLocProtErr
			break
		}
		m.mu.RLock()
		dst, ok := m.span(s.Addr, n)
		if !ok {
			m.mu.RUnlock()
			status = WCLocProtErr
			break
		}
		_, err := io.ReadFull(c, dst)
		m.mu.RUnlock()
		if err != nil {
			q.doneRx()
			return ack{}, false, err
		}
		left -= n
	}
	if status != WCSuccess {
		if err := discard(c, left); err != nil {
			q.doneRx()
			return ack{}, false, err
		}
		q.mu.Lock()
		q.rxBusy = false
		if q.in == c {
			q.recvErrStatus = status
			q.errorLocked(false, 0, WCWRFlushErr, fmt.Errorf("receive failed: %v", status))
		} else {
			q.flushLocked()
		}
		q.mu.Unlock()
		nak.status = WCRemInvReqErr
		if status == WCLocProtErr {
			nak.status = WCRemOpErr
		}
		return nak, false, nil
	}
	d.stats.sendsIn.Add(1)
	d.stats.bytesIn.Add(uint64(p.length))
	q.mu.Lock()
	q.rxBusy = false
	if q.in != c || (q.state != QPStateRTR && q.state != QPStateRTS) {
		q.flushLocked()
		q.mu.Unlock()
		return ack{}, false, errStale
	}
	q.rqHead++
	*wc = WorkCompletion{ID: r.id, Status: WCSuccess, Opcode: WCRecv, ByteLen: p.length, QPNum: q.num, SrcQP: q.attr.DestQPNum}
	if p.hasImm {
		wc.Flags, wc.Imm = WCFlagWithImm, p.imm
	}
	q.mu.Unlock()
	return ack{psn: p.psn}, true, nil
}

// complete delivers a receive completion of the connection c, unless the
// queue pair has left it since (destroyed, reset or failed: then its
// receives are flushed instead).
func (q *emuQP) complete(c *net.UnixConn, wc WorkCompletion) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.in != c || (q.state != QPStateRTR && q.state != QPStateRTS) {
		return
	}
	if !q.rcq.push(wc) {
		q.errorLocked(false, 0, WCWRFlushErr, errorf("ibv_poll_cq", ErrCQOverflow, "receive completions"))
	}
}

// doneRx ends a placement that failed on the connection.
func (q *emuQP) doneRx() {
	q.mu.Lock()
	q.rxBusy = false
	q.flushLocked()
	q.mu.Unlock()
}

func discard(c *net.UnixConn, n uint32) error {
	if n == 0 {
		return nil
	}
	_, err := io.CopyN(io.Discard, c, int64(n))
	return err
}

var _ QueuePair = (*emuQP)(nil)
