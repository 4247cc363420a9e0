// Package verbs is the small slice of the RDMA verbs API (libibverbs, from
// rdma-core) that occl's RDMA transport is written against, with two
// implementations behind the same interfaces:
//
//   - the real one, cgo over libibverbs (ibverbs.go), compiled only with the
//     build tag rdma (and cgo): go build -tags rdma. Devices lists the HCAs
//     of the machine and Open opens one;
//   - an emulated one (OpenEmulated), in pure Go, that works across
//     processes of one machine: each process runs an emulated NIC that
//     carries RDMA WRITEs and SENDs to the peer NIC over a Unix socket and
//     places them in the peer's registered memory with the checks a real HCA
//     makes. It is what the tests run on, and what OCCL_IB_EMULATE=1 selects
//     where no RDMA device exists.
//
// The names, numbering and semantics follow libibverbs: reliable-connected
// queue pairs with the RESET → INIT → RTR → RTS state machine and the
// ERROR state, protection domains, memory regions with local and remote
// keys, completion queues polled for work completions whose status and
// opcode values are those of enum ibv_wc_status and enum ibv_wc_opcode.
// Immediate data is given and returned in host byte order; the cgo
// implementation converts to and from the network order of the wire.
//
// Only what the transport needs is exposed: one or a few scatter/gather
// entries per work request, RDMA WRITE, RDMA WRITE WITH IMMEDIATE, SEND and
// SEND WITH IMMEDIATE (no RDMA READ or atomics), RC queue pairs only.
package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// Access flags of a memory region or queue pair (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// QPState is the state of a queue pair (enum ibv_qp_state).
type QPState uint8

// Queue pair states.
const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateError
)

func (s QPState) String() string {
	switch s {
	case QPStateReset:
		return "RESET"
	case QPStateInit:
		return "INIT"
	case QPStateRTR:
		return "RTR"
	case QPStateRTS:
		return "RTS"
	case QPStateSQD:
		return "SQD"
	case QPStateSQE:
		return "SQE"
	case QPStateError:
		return "ERROR"
	}
	return fmt.Sprintf("qpstate(%d)", uint8(s))
}

// QPType is the transport service of a queue pair (enum ibv_qp_type).
type QPType uint8

// QPTypeRC is the reliable-connected service, the only one supported.
const QPTypeRC QPType = 2

// MTU is a path MTU (enum ibv_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the defined MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// LinkLayer is the link layer of a port (IBV_LINK_LAYER_*).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "unspecified"
}

// PortState is the logical state of a port (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("portstate(%d)", uint8(s))
}

// DeviceInfo names a device found by Devices.
type DeviceInfo struct {
	Name     string
	GUID     uint64 // node GUID, host order
	Emulated bool
}

// DeviceAttr are the limits of a device (struct ibv_device_attr, in part).
type DeviceAttr struct {
	MaxQPWR     int
	MaxSGE      int
	MaxCQE      int
	MaxMR       int
	MaxMRSize   uint64
	PhysPortCnt int
	FWVersion   string
}

// PortAttr describes a port (struct ibv_port_attr, in part).
type PortAttr struct {
	State       PortState
	MaxMTU      MTU
	ActiveMTU   MTU
	LID         uint16
	LinkLayer   LinkLayer
	GIDTableLen int
	MaxMsgSize  uint32
}

// GID is a 128-bit global identifier; for RoCE it is an IPv6 address (an
// IPv4-mapped one for IPv4).
type GID [16]byte

// String formats the GID as an IPv6 address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// IsZero reports whether every byte is zero (an unused table entry).
func (g GID) IsZero() bool { return g == GID{} }

// IsIPv4Mapped reports whether the GID is an IPv4-mapped IPv6 address
// (::ffff:a.b.c.d), the form RoCE v2 uses for IPv4.
func (g GID) IsIPv4Mapped() bool { return netip.AddrFrom16(g).Is4In6() }

// IsLinkLocal reports whether the GID is in fe80::/10 (the default,
// MAC-derived GID of a port).
func (g GID) IsLinkLocal() bool { return g[0] == 0xfe && g[1]&0xc0 == 0x80 }

// GIDType is the kind of a GID table entry.
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = iota // InfiniBand (or RoCE v1 on Ethernet)
	GIDTypeRoCEv1                // RoCE v1: Ethernet, no IP header
	GIDTypeRoCEv2                // RoCE v2: UDP/IP, routable
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("gidtype(%d)", uint8(t))
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    GID
	Type   GIDType
	Netdev string // network interface the entry belongs to ("" if unknown)
}

// Device is an open device context (struct ibv_context).
type Device interface {
	// Name is the kernel name of the device, such as mlx5_0.
	Name() string
	// Emulated reports whether the device is the emulated one.
	Emulated() bool
	// Query returns the device's limits (ibv_query_device).
	Query() (DeviceAttr, error)
	// QueryPort describes a port, numbered from 1 (ibv_query_port).
	QueryPort(port int) (PortAttr, error)
	// QueryGID returns an entry of a port's GID table (ibv_query_gid and
	// the entry's type and network device from sysfs).
	QueryGID(port, index int) (GIDEntry, error)
	// AllocPD allocates a protection domain (ibv_alloc_pd).
	AllocPD() (ProtectionDomain, error)
	// CreateCQ creates a completion queue of at least entries entries
	// (ibv_create_cq).
	CreateCQ(entries int) (CompletionQueue, error)
	// AsyncError returns a non-nil error once the device reported a fatal
	// asynchronous event (IBV_EVENT_DEVICE_FATAL) or was removed. It
	// never blocks.
	AsyncError() error
	// Close closes the context (ibv_close_device). Every object made
	// from it must be destroyed first.
	Close() error
}

// ProtectionDomain groups memory regions and queue pairs (struct ibv_pd).
type ProtectionDomain interface {
	// RegisterMemory registers buf for access by the device
	// (ibv_reg_mr). The memory must not move or be freed until the
	// region is deregistered: implementations keep buf referenced (and
	// the cgo one pins it with runtime.Pinner when it is Go memory), so
	// the Go garbage collector neither frees nor moves it.
	RegisterMemory(buf []byte, access Access) (MemoryRegion, error)
	// CreateQP creates a queue pair (ibv_create_qp).
	CreateQP(attr QPInitAttr) (QueuePair, error)
	// Close deallocates the domain (ibv_dealloc_pd).
	Close() error
}

// MemoryRegion is registered memory (struct ibv_mr).
type MemoryRegion interface {
	// Addr is the virtual address of the first byte.
	Addr() uint64
	// Len is the length in bytes.
	Len() int
	// LKey is the key local work requests use.
	LKey() uint32
	// RKey is the key a peer uses to access the region remotely.
	RKey() uint32
	// Deregister releases the registration (ibv_dereg_mr). Once it
	// returns the device no longer reads or writes the memory.
	Deregister() error
}

// CompletionQueue collects work completions (struct ibv_cq).
type CompletionQueue interface {
	// Poll moves up to len(wc) completions into wc and returns how many
	// (ibv_poll_cq). It never blocks. An error means the queue itself
	// failed (overflow, device removed), not a work request.
	Poll(wc []WorkCompletion) (int, error)
	// Close destroys the queue (ibv_destroy_cq).
	Close() error
}

// Notifier is implemented by completion queues that can wake a poller
// instead of being polled in a loop, like a completion channel armed with
// ibv_req_notify_cq. The channel receives a value after completions were
// added; a receiver must poll again, since a value may be stale.
type Notifier interface {
	Notify() <-chan struct{}
}

// QPCap sizes a queue pair (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr describes a queue pair to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	SendCQ, RecvCQ CompletionQueue
	Cap            QPCap
	Type           QPType
	// SigAll makes every send work request generate a completion.
	SigAll bool
}

// GlobalRoute is the global routing header part of an address (struct
// ibv_global_route). RoCE always needs it.
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (struct ibv_ah_attr).
type AHAttr struct {
	GRH      GlobalRoute
	DLID     uint16
	SL       uint8
	IsGlobal bool
	PortNum  uint8
}

// QPAttr carries the attributes of a queue pair transition (struct
// ibv_qp_attr, in part).
type QPAttr struct {
	State           QPState
	PathMTU         MTU
	RQPSN           uint32
	SQPSN           uint32
	DestQPNum       uint32
	AccessFlags     Access
	PKeyIndex       uint16
	PortNum         uint8
	AH              AHAttr
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	Timeout         uint8 // local ACK timeout: 4.096 µs × 2^Timeout
	RetryCnt        uint8
	RNRRetry        uint8 // 7 means retry forever
}

// QPAttrMask says which QPAttr fields a Modify sets (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits.
const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic   QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// Masks each transition of an RC queue pair requires (the attributes
// ibv_modify_qp(3) lists as required).
const (
	MaskResetToInit = QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	MaskInitToRTR   = QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN |
		QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	MaskRTRToRTS = QPAttrState | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN |
		QPAttrMaxQPRdAtomic
)

// QueuePair is a reliable-connected queue pair (struct ibv_qp).
type QueuePair interface {
	// Num is the queue pair number (24 bits) the peer addresses.
	Num() uint32
	// State is the current state as the implementation knows it.
	State() QPState
	// Modify moves the queue pair to attr.State, setting the attributes
	// mask selects (ibv_modify_qp).
	Modify(attr *QPAttr, mask QPAttrMask) error
	// PostSend queues a send work request (ibv_post_send). wr may be
	// reused as soon as the call returns; the memory its entries point
	// to may not until the request completes (except inline data).
	PostSend(wr *SendWR) error
	// PostRecv queues a receive work request (ibv_post_recv).
	PostRecv(wr *RecvWR) error
	// Close destroys the queue pair (ibv_destroy_qp).
	Close() error
}

// SGE is a scatter/gather entry (struct ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send opcodes.
const (
	WRRDMAWrite    WROpcode = 0
	WRRDMAWriteImm WROpcode = 1
	WRSend         WROpcode = 2
	WRSendImm      WROpcode = 3
)

func (o WROpcode) String() string {
	switch o {
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMAWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendImm:
		return "SEND_WITH_IMM"
	}
	return fmt.Sprintf("wr_opcode(%d)", uint8(o))
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint8

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// SendWR is a send work request (struct ibv_send_wr). SG lists the local
// memory; for RDMA WRITE RemoteAddr and RKey say where it lands.
//
// With SendInline the payload is Inline instead (SG is ignored): it is
// copied into the work request when PostSend is called, needs no
// registration, and may be reused at once. It must not exceed the queue
// pair's MaxInlineData. (libibverbs takes inline data through the
// scatter/gather list; a separate slice is the memory-safe Go form.)
type SendWR struct {
	ID         uint64
	Op         WROpcode
	Flags      SendFlags
	SG         []SGE
	Inline     []byte
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32 // host byte order
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID uint64
	SG []SGE
}

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint8

// Completion statuses, numbered as in libibverbs.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var wcStatusText = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
}

// String returns the text ibv_wc_status_str gives.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusText) {
		return wcStatusText[s]
	}
	return fmt.Sprintf("unknown (%d)", uint8(s))
}

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("wc_opcode(%d)", uint8(o))
}

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags uint8

// Completion flags.
const (
	WCFlagGRH     WCFlags = 1 << 0
	WCFlagWithImm WCFlags = 1 << 1
)

// WorkCompletion is a work completion (struct ibv_wc). For a failed
// request only ID, Status, QPNum and VendorErr are meaningful, and the
// queue pair is in the ERROR state.
type WorkCompletion struct {
	ID        uint64
	Status    WCStatus
	Opcode    WCOpcode
	Flags     WCFlags
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // host byte order, valid with WCFlagWithImm
	QPNum     uint32
	SrcQP     uint32
}

// Errors of the verbs calls. Implementations wrap them, or a
// syscall.Errno as libibverbs returns it, in an *Error.
var (
	// ErrNoDevice: no RDMA device is present (or none passed the
	// selection).
	ErrNoDevice = errors.New("no RDMA device")
	// ErrNotCompiled: this binary has no libibverbs support (it was built
	// without the rdma build tag or without cgo).
	ErrNotCompiled = errors.New("built without libibverbs support (go build -tags rdma, with cgo and libibverbs-dev)")
	// ErrDeviceRemoved: the device was removed or reported a fatal error.
	ErrDeviceRemoved = errors.New("RDMA device removed or failed")
	// ErrCQOverflow: more completions arrived than the queue holds.
	ErrCQOverflow = errors.New("completion queue overflow")
)

// Error is a failed verbs call.
type Error struct {
	Func string // the libibverbs function, such as "ibv_modify_qp"
	Err  error  // a syscall.Errno, or one of the errors above
	Msg  string // details
}

func (e *Error) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s: %v: %s", e.Func, e.Err, e.Msg)
	}
	return fmt.Sprintf("%s: %v", e.Func, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(fn string, err error, format string, args ...any) error {
	return &Error{Func: fn, Err: err, Msg: fmt.Sprintf(format, args...)}
}

// Errno values the calls return, as libibverbs does.
const (
	errInval = syscall.EINVAL
	errNoMem = syscall.ENOMEM
	errBusy  = syscall.EBUSY
	errNoDev = syscall.ENODEV
)
