//go:build rdma && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

// Wrappers for what libibverbs defines as macros or static inline
// functions, which cgo cannot call directly, and for building work
// requests on the C stack so that no Go pointer is kept.

static int occl_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}

static struct ibv_mr *occl_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

static int occl_errno(void) { return errno; }

static int occl_set_nonblock(int fd) {
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0) return -1;
	return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// occl_post_send posts one send work request. sge (nsge entries) describes
// registered memory; with IBV_SEND_INLINE, inline_data (len bytes) is
// copied by ibv_post_send instead.
static int occl_post_send(struct ibv_qp *qp, uint64_t wr_id, int opcode, int flags,
		struct ibv_sge *sge, int nsge, void *inline_data, uint32_t inline_len,
		uint64_t raddr, uint32_t rkey, uint32_t imm) {
	struct ibv_sge isge;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.opcode = (enum ibv_wr_opcode)opcode;
	wr.send_flags = (unsigned int)flags;
	if (flags & IBV_SEND_INLINE) {
		isge.addr = (uintptr_t)inline_data;
		isge.length = inline_len;
		isge.lkey = 0;
		wr.sg_list = inline_len ? &isge : NULL;
		wr.num_sge = inline_len ? 1 : 0;
	} else {
		wr.sg_list = nsge ? sge : NULL;
		wr.num_sge = nsge;
	}
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	wr.imm_data = htonl(imm);
	return ibv_post_send(qp, &wr, &bad);
}

static int occl_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sge, int nsge) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = nsge ? sge : NULL;
	wr.num_sge = nsge;
	return ibv_post_recv(qp, &wr, &bad);
}

struct occl_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len, imm, qp_num, src_qp, wc_flags;
};

// occl_poll_cq polls up to n completions into out (through wc, scratch of
// n entries), converting the immediate data to host order.
static int occl_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc, struct occl_wc *out) {
	int k = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < k; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].src_qp = wc[i].src_qp;
		out[i].wc_flags = wc[i].wc_flags;
	}
	return k;
}

// occl_async_event reads one pending asynchronous event without blocking
// (the fd is non-blocking): it returns the event type, or -1 if none.
static int occl_async_event(struct ibv_context *ctx) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev) != 0) return -1;
	int t = ev.event_type;
	ibv_ack_async_event(&ev);
	return t;
}
*/
import "C"

import (
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// Compiled reports whether this binary can use real RDMA devices through
// libibverbs: it was built with the rdma build tag and cgo.
const Compiled = true

func errnoErr(fn string, rc C.int, format string, args ...any) error {
	e := syscall.Errno(rc)
	if rc <= 0 {
		e = syscall.Errno(C.occl_errno())
	}
	if e == 0 {
		e = syscall.EIO
	}
	return errorf(fn, e, format, args...)
}

// Devices lists the RDMA devices of the machine (ibv_get_device_list). An
// empty list is not an error.
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list := C.ibv_get_device_list(&n)
	if list == nil {
		e := syscall.Errno(C.occl_errno())
		if e == syscall.ENOSYS || e == syscall.ENOENT {
			return nil, nil // no RDMA subsystem in this kernel
		}
		return nil, &Error{Func: "ibv_get_device_list", Err: e}
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	out := make([]DeviceInfo, 0, len(devs))
	for _, d := range devs {
		guid := uint64(C.ibv_get_device_guid(d))
		out = append(out, DeviceInfo{Name: C.GoString(C.ibv_get_device_name(d)), GUID: be64(guid)})
	}
	return out, nil
}

func be64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = v
	var r uint64
	for _, x := range b {
		r = r<<8 | uint64(x)
	}
	return r
}

// Open opens the device called name (ibv_open_device).
func Open(name string) (Device, error) {
	var n C.int
	list := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, &Error{Func: "ibv_get_device_list", Err: syscall.Errno(C.occl_errno())}
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		ctx := C.ibv_open_device(d)
		if ctx == nil {
			return nil, errnoErr("ibv_open_device", 0, "%s", name)
		}
		if C.occl_set_nonblock(ctx.async_fd) != 0 {
			C.ibv_close_device(ctx)
			return nil, errnoErr("fcntl", 0, "async event fd of %s", name)
		}
		return &ibDevice{ctx: ctx, name: name}, nil
	}
	return nil, errorf("ibv_open_device", ErrNoDevice, "no device named %q", name)
}

type ibDevice struct {
	ctx   *C.struct_ibv_context
	name  string
	mu    sync.Mutex
	fatal error
}

func (d *ibDevice) Name() string   { return d.name }
func (d *ibDevice) Emulated() bool { return false }

func (d *ibDevice) Query() (DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(d.ctx, &a); rc != 0 {
		return DeviceAttr{}, errnoErr("ibv_query_device", rc, "%s", d.name)
	}
	return DeviceAttr{MaxQPWR: int(a.max_qp_wr), MaxSGE: int(a.max_sge), MaxCQE: int(a.max_cqe),
		MaxMR: int(a.max_mr), MaxMRSize: uint64(a.max_mr_size), PhysPortCnt: int(a.phys_port_cnt),
		FWVersion: C.GoString(&a.fw_ver[0])}, nil
}

func (d *ibDevice) QueryPort(port int) (PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc := C.occl_query_port(d.ctx, C.uint8_t(port), &a); rc != 0 {
		return PortAttr{}, errnoErr("ibv_query_port", rc, "%s port %d", d.name, port)
	}
	return PortAttr{State: PortState(a.state), MaxMTU: MTU(a.max_mtu), ActiveMTU: MTU(a.active_mtu),
		LID: uint16(a.lid), LinkLayer: LinkLayer(a.link_layer), GIDTableLen: int(a.gid_tbl_len),
		MaxMsgSize: uint32(a.max_msg_sz)}, nil
}

func (d *ibDevice) QueryGID(port, index int) (GIDEntry, error) {
	var g C.union_ibv_gid
	if rc := C.ibv_query_gid(d.ctx, C.uint8_t(port), C.int(index), &g); rc != 0 {
		return GIDEntry{}, errnoErr("ibv_query_gid", rc, "%s port %d index %d", d.name, port, index)
	}
	e := GIDEntry{Index: index}
	copy(e.GID[:], C.GoBytes(unsafe.Pointer(&g), 16))
	if t, nd, ok := GIDAttrs(SysfsRoot, d.name, port, index); ok {
		e.Type, e.Netdev = t, nd
	} else if e.GID.IsIPv4Mapped() {
		e.Type = GIDTypeRoCEv2
	}
	return e, nil
}

// AsyncError drains the device's asynchronous events (the event fd is
// non-blocking) and reports a fatal one.
func (d *ibDevice) AsyncError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.fatal == nil {
		t := C.occl_async_event(d.ctx)
		if t < 0 {
			break
		}
		if t == C.IBV_EVENT_DEVICE_FATAL {
			d.fatal = errorf("ibv_get_async_event", ErrDeviceRemoved, "IBV_EVENT_DEVICE_FATAL on %s", d.name)
		}
	}
	return d.fatal
}

func (d *ibDevice) Close() error {
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		return errnoErr("ibv_close_device", rc, "%s", d.name)
	}
	return nil
}

func (d *ibDevice) AllocPD() (ProtectionDomain, error) {
	pd := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, errnoErr("ibv_alloc_pd", 0, "%s", d.name)
	}
	return &ibPD{pd: pd, dev: d}, nil
}

func (d *ibDevice) CreateCQ(entries int) (CompletionQueue, error) {
	cq := C.ibv_create_cq(d.ctx, C.int(entries), nil, nil, 0)
	if cq == nil {
		return nil, errnoErr("ibv_create_cq", 0, "%d entries on %s", entries, d.name)
	}
	const batch = 64
	c := &ibCQ{cq: cq, n: batch}
	c.wc = (*C.struct_ibv_wc)(C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
	c.out = (*C.struct_occl_wc)(C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_occl_wc{}))))
	if c.wc == nil || c.out == nil {
		c.free()
		C.ibv_destroy_cq(cq)
		return nil, errorf("ibv_create_cq", errNoMem, "completion buffers")
	}
	return c, nil
}

type ibPD struct {
	pd  *C.struct_ibv_pd
	dev *ibDevice
}

// RegisterMemory registers buf. Go memory is pinned with runtime.Pinner
// for as long as the region exists, as the cgo rules require of memory C
// keeps a pointer to (the HCA does); memory from mmap or C is not Go
// memory and is registered as it is.
func (p *ibPD) RegisterMemory(buf []byte, access Access) (MemoryRegion, error) {
	if len(buf) == 0 {
		return nil, errorf("ibv_reg_mr", errInval, "empty region")
	}
	m := &ibMR{buf: buf}
	m.pin.Pin(&buf[0])
	mr := C.occl_reg_mr(p.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		m.pin.Unpin()
		return nil, errnoErr("ibv_reg_mr", 0, "%d bytes", len(buf))
	}
	m.mr = mr
	return m, nil
}

func (p *ibPD) CreateQP(attr QPInitAttr) (QueuePair, error) {
	scq, ok1 := attr.SendCQ.(*ibCQ)
	rcq, ok2 := attr.RecvCQ.(*ibCQ)
	if !ok1 || !ok2 {
		return nil, errorf("ibv_create_qp", errInval, "completion queues of another implementation")
	}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.cq
	ia.recv_cq = rcq.cq
	ia.qp_type = C.IBV_QPT_RC
	if attr.SigAll {
		ia.sq_sig_all = 1
	}
	ia.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(max(attr.Cap.MaxSendSGE, 1))
	ia.cap.max_recv_sge = C.uint32_t(max(attr.Cap.MaxRecvSGE, 1))
	ia.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	qp := C.ibv_create_qp(p.pd, &ia)
	if qp == nil {
		return nil, errnoErr("ibv_create_qp", 0, "capabilities %+v", attr.Cap)
	}
	return &ibQP{qp: qp, maxSGE: int(ia.cap.max_send_sge), maxRSGE: int(ia.cap.max_recv_sge)}, nil
}

func (p *ibPD) Close() error {
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoErr("ibv_dealloc_pd", rc, "")
	}
	return nil
}

type ibMR struct {
	mr  *C.struct_ibv_mr
	buf []byte
	pin runtime.Pinner
}

func (m *ibMR) Addr() uint64 { return uint64(uintptr(m.mr.addr)) }
func (m *ibMR) Len() int     { return int(m.mr.length) }
func (m *ibMR) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *ibMR) RKey() uint32 { return uint32(m.mr.rkey) }

func (m *ibMR) Deregister() error {
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return errnoErr("ibv_dereg_mr", rc, "")
	}
	m.pin.Unpin()
	m.buf = nil
	return nil
}

type ibCQ struct {
	cq  *C.struct_ibv_cq
	n   int
	wc  *C.struct_ibv_wc
	out *C.struct_occl_wc
}

func (c *ibCQ) free() {
	C.free(unsafe.Pointer(c.wc))
	C.free(unsafe.Pointer(c.out))
	c.wc, c.out = nil, nil
}

func (c *ibCQ) Poll(wc []WorkCompletion) (int, error) {
	n := min(len(wc), c.n)
	if n == 0 {
		return 0, nil
	}
	k := C.occl_poll_cq(c.cq, C.int(n), c.wc, c.out)
	if k < 0 {
		return 0, errorf("ibv_poll_cq", syscall.EIO, "returned %d", int(k))
	}
	out := unsafe.Slice(c.out, int(k))
	for i := range out {
		o := &out[i]
		wc[i] = WorkCompletion{ID: uint64(o.wr_id), Status: WCStatus(o.status), Opcode: WCOpcode(o.opcode),
			Flags: WCFlags(o.wc_flags), VendorErr: uint32(o.vendor_err), ByteLen: uint32(o.byte_len),
			Imm: uint32(o.imm), QPNum: uint32(o.qp_num), SrcQP: uint32(o.src_qp)}
	}
	return int(k), nil
}

func (c *ibCQ) Close() error {
	if rc := C.ibv_destroy_cq(c.cq); rc != 0 {
		return errnoErr("ibv_destroy_cq", rc, "")
	}
	c.free()
	return nil
}

type ibQP struct {
	qp      *C.struct_ibv_qp
	maxSGE  int
	maxRSGE int
	mu      sync.Mutex
	state   QPState
	sge     [emuMaxSGE]C.struct_ibv_sge
	rsge    [emuMaxSGE]C.struct_ibv_sge
}

func (q *ibQP) Num() uint32 { return uint32(q.qp.qp_num) }

// State returns the state the queue pair was last moved to; a queue pair
// the device moved to ERROR shows it through error completions.
func (q *ibQP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *ibQP) Modify(a *QPAttr, mask QPAttrMask) error {
	var at C.struct_ibv_qp_attr
	at.qp_state = C.enum_ibv_qp_state(a.State)
	at.path_mtu = C.enum_ibv_mtu(a.PathMTU)
	at.rq_psn = C.uint32_t(a.RQPSN)
	at.sq_psn = C.uint32_t(a.SQPSN)
	at.dest_qp_num = C.uint32_t(a.DestQPNum)
	at.qp_access_flags = C.uint(a.AccessFlags)
	at.pkey_index = C.uint16_t(a.PKeyIndex)
	at.port_num = C.uint8_t(a.PortNum)
	at.max_rd_atomic = C.uint8_t(a.MaxRdAtomic)
	at.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	at.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	at.timeout = C.uint8_t(a.Timeout)
	at.retry_cnt = C.uint8_t(a.RetryCnt)
	at.rnr_retry = C.uint8_t(a.RNRRetry)
	ah := &at.ah_attr
	ah.dlid = C.uint16_t(a.AH.DLID)
	ah.sl = C.uint8_t(a.AH.SL)
	ah.port_num = C.uint8_t(a.AH.PortNum)
	if a.AH.IsGlobal {
		ah.is_global = 1
		dgid := (*[16]byte)(unsafe.Pointer(&ah.grh.dgid))
		*dgid = a.AH.GRH.DGID
		ah.grh.flow_label = C.uint32_t(a.AH.GRH.FlowLabel)
		ah.grh.sgid_index = C.uint8_t(a.AH.GRH.SGIDIndex)
		ah.grh.hop_limit = C.uint8_t(a.AH.GRH.HopLimit)
		ah.grh.traffic_class = C.uint8_t(a.AH.GRH.TrafficClass)
	}
	if rc := C.ibv_modify_qp(q.qp, &at, C.int(mask)); rc != 0 {
		return errnoErr("ibv_modify_qp", rc, "to %v (mask %#x)", a.State, uint32(mask))
	}
	q.mu.Lock()
	q.state = a.State
	q.mu.Unlock()
	return nil
}

func (q *ibQP) PostSend(wr *SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var rc C.int
	if wr.Flags&SendInline != 0 {
		var p unsafe.Pointer
		if len(wr.Inline) > 0 {
			p = unsafe.Pointer(&wr.Inline[0])
		}
		rc = C.occl_post_send(q.qp, C.uint64_t(wr.ID), C.int(wr.Op), C.int(wr.Flags), nil, 0,
			p, C.uint32_t(len(wr.Inline)), C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.Imm))
	} else {
		if len(wr.SG) > len(q.sge) || len(wr.SG) > q.maxSGE {
			return errorf("ibv_post_send", errInval, "%d scatter/gather entries", len(wr.SG))
		}
		for i, s := range wr.SG {
			q.sge[i] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
		}
		rc = C.occl_post_send(q.qp, C.uint64_t(wr.ID), C.int(wr.Op), C.int(wr.Flags), &q.sge[0], C.int(len(wr.SG)),
			nil, 0, C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.Imm))
	}
	if rc != 0 {
		return errnoErr("ibv_post_send", rc, "work request %#x", wr.ID)
	}
	return nil
}

func (q *ibQP) PostRecv(wr *RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(wr.SG) > len(q.rsge) || len(wr.SG) > q.maxRSGE {
		return errorf("ibv_post_recv", errInval, "%d scatter/gather entries", len(wr.SG))
	}
	for i, s := range wr.SG {
		q.rsge[i] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
	}
	if rc := C.occl_post_recv(q.qp, C.uint64_t(wr.ID), &q.rsge[0], C.int(len(wr.SG))); rc != 0 {
		return errnoErr("ibv_post_recv", rc, "work request %#x", wr.ID)
	}
	return nil
}

func (q *ibQP) Close() error {
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoErr("ibv_destroy_qp", rc, "")
	}
	return nil
}

// The numbering of the Go constants is libibverbs'; the build fails if a
// header ever disagrees.
var _ = [1]struct{}{}[int(C.IBV_WC_RETRY_EXC_ERR)-int(WCRetryExcErr)]
var _ = [1]struct{}{}[int(C.IBV_WC_GENERAL_ERR)-int(WCGeneralErr)]
var _ = [1]struct{}{}[int(C.IBV_WC_RECV_RDMA_WITH_IMM)-int(WCRecvRDMAWithImm)]
var _ = [1]struct{}{}[int(C.IBV_WR_SEND_WITH_IMM)-int(WRSendImm)]
var _ = [1]struct{}{}[int(C.IBV_QPS_ERR)-int(QPStateError)]
var _ = [1]struct{}{}[int(C.IBV_QP_DEST_QPN)-int(QPAttrDestQPN)]
var _ = [1]struct{}{}[int(C.IBV_QP_MAX_DEST_RD_ATOMIC)-int(QPAttrMaxDestRdAtomic)]
var _ = [1]struct{}{}[int(C.IBV_ACCESS_REMOTE_WRITE)-int(AccessRemoteWrite)]
var _ = [1]struct{}{}[int(C.IBV_SEND_INLINE)-int(SendInline)]
var _ = [1]struct{}{}[int(C.IBV_MTU_4096)-int(MTU4096)]
var _ = [1]struct{}{}[int(C.IBV_LINK_LAYER_ETHERNET)-int(LinkLayerEthernet)]

var (
	_ Device           = (*ibDevice)(nil)
	_ ProtectionDomain = (*ibPD)(nil)
	_ MemoryRegion     = (*ibMR)(nil)
	_ CompletionQueue  = (*ibCQ)(nil)
	_ QueuePair        = (*ibQP)(nil)
)
