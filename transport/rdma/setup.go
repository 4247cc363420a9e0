package rdma

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
)

// Defaults of Config.
const (
	DefaultSlots           = 32
	DefaultSlotSize        = 64 << 10
	DefaultEagerLimit      = 256 << 10
	DefaultRendezvousChunk = 4 << 20
	DefaultTimeout         = 20 // 4.096 µs × 2^20 ≈ 4.3 s per transport retry, NCCL's default
	DefaultRetryCnt        = 7
)

// ErrUnavailable is wrapped by the error Connect returns when the RDMA
// connection could not be set up (no device, a setup step failed on
// either side) but the exchange itself completed: both sides then return
// it, and the bootstrap connection is still in step and the caller's.
var ErrUnavailable = errors.New("RDMA transport unavailable")

// Config describes one RDMA connection.
type Config struct {
	// Comm and Epoch identify the communicator and topology epoch; they
	// label the setup messages, which the peer checks.
	Comm  uint64
	Epoch uint32
	// Self and Peer are the ranks of this side and of the other side.
	Self, Peer int
	// Device is the device to use; nil opens the one DeviceConfigFromEnv
	// selects. The Conn holds its own reference.
	Device *Device
	// Slots and SlotSize shape this side's receive window, which the peer
	// writes into: Slots slots of SlotSize bytes (a multiple of 64), 0
	// meaning DefaultSlots and DefaultSlotSize.
	Slots, SlotSize int
	// EagerLimit bounds the payloads sent through the window without
	// waiting for the receiver (0: DefaultEagerLimit); it is lowered to
	// what the peer's window guarantees.
	EagerLimit int
	// RendezvousThreshold: larger payloads are written straight into the
	// receiver's buffer. 0 means the eager limit; a negative value turns
	// rendezvous off (everything streams through the window). It is never
	// below the eager limit.
	RendezvousThreshold int
	// RendezvousChunk is the largest single RDMA WRITE of a rendezvous
	// (0: DefaultRendezvousChunk).
	RendezvousChunk int
	// Timeout and RetryCnt are the queue pair's transport timer exponent
	// and retry count (0: DefaultTimeout, DefaultRetryCnt); ServiceLevel
	// and TrafficClass go into the address vector.
	Timeout, RetryCnt          int
	ServiceLevel, TrafficClass uint8
}

func (c Config) withDefaults() (Config, error) {
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.SlotSize == 0 {
		c.SlotSize = DefaultSlotSize
	}
	if c.EagerLimit == 0 {
		c.EagerLimit = DefaultEagerLimit
	}
	if c.RendezvousChunk == 0 {
		c.RendezvousChunk = DefaultRendezvousChunk
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RetryCnt == 0 {
		c.RetryCnt = DefaultRetryCnt
	}
	switch {
	case c.Self == c.Peer || c.Self < 0 || c.Peer < 0:
		return c, fmt.Errorf("invalid ranks %d and %d", c.Self, c.Peer)
	case c.Slots < MinSlots || c.Slots > MaxSlots:
		return c, fmt.Errorf("%d slots: want %d to %d", c.Slots, MinSlots, MaxSlots)
	case c.SlotSize < MinSlotSize || c.SlotSize > MaxSlotSize || c.SlotSize%64 != 0:
		return c, fmt.Errorf("slot size %d: want a multiple of 64 from %d to %d", c.SlotSize, MinSlotSize, MaxSlotSize)
	case c.Slots*c.SlotSize > maxWindow:
		return c, fmt.Errorf("window of %d bytes exceeds %d", c.Slots*c.SlotSize, maxWindow)
	case c.EagerLimit < 0 || c.RendezvousChunk < 0 || c.RendezvousChunk > 1<<30:
		return c, fmt.Errorf("eager limit %d, rendezvous chunk %d", c.EagerLimit, c.RendezvousChunk)
	case c.Timeout < 0 || c.Timeout > 31 || c.RetryCnt < 0 || c.RetryCnt > 7:
		return c, fmt.Errorf("timeout %d (0-31), retry count %d (0-7)", c.Timeout, c.RetryCnt)
	}
	return c, nil
}

// ConfigFromEnv overrides c with OCCL_IB_SLOTS, OCCL_IB_SLOT_SIZE,
// OCCL_IB_EAGER_LIMIT, OCCL_IB_RNDV_THRESHOLD ("off" disables rendezvous),
// OCCL_IB_RNDV_CHUNK, OCCL_IB_TIMEOUT, OCCL_IB_RETRY_CNT, OCCL_IB_SL and
// OCCL_IB_TC. Sizes take K, M and G suffixes.
func ConfigFromEnv(c Config) (Config, error) {
	var err error
	env := func(name string, set func(string) error) {
		if v := os.Getenv(name); v != "" && err == nil {
			if e := set(v); e != nil {
				err = fmt.Errorf("rdma: %s=%q: %w", name, v, e)
			}
		}
	}
	size := func(dst *int) func(string) error {
		return func(v string) (e error) { *dst, e = transport.ParseSize(v); return }
	}
	num := func(dst *int, lo, hi int) func(string) error {
		return func(v string) error {
			n, e := strconv.Atoi(v)
			if e != nil || n < lo || n > hi {
				return fmt.Errorf("want %d to %d", lo, hi)
			}
			*dst = n
			return nil
		}
	}
	sl, tc := int(c.ServiceLevel), int(c.TrafficClass)
	env("OCCL_IB_SLOTS", num(&c.Slots, MinSlots, MaxSlots))
	env("OCCL_IB_SLOT_SIZE", size(&c.SlotSize))
	env("OCCL_IB_EAGER_LIMIT", size(&c.EagerLimit))
	env("OCCL_IB_RNDV_THRESHOLD", func(v string) (e error) {
		if strings.EqualFold(v, "off") || v == "-1" {
			c.RendezvousThreshold = -1
			return nil
		}
		c.RendezvousThreshold, e = transport.ParseSize(v)
		return
	})
	env("OCCL_IB_RNDV_CHUNK", size(&c.RendezvousChunk))
	env("OCCL_IB_TIMEOUT", num(&c.Timeout, 1, 31))
	env("OCCL_IB_RETRY_CNT", num(&c.RetryCnt, 1, 7))
	env("OCCL_IB_SL", func(v string) error { return num(&sl, 0, 15)(v) })
	env("OCCL_IB_TC", func(v string) error { return num(&tc, 0, 255)(v) })
	c.ServiceLevel, c.TrafficClass = uint8(sl), uint8(tc)
	if err != nil {
		return c, err
	}
	_, err = c.withDefaultsNoRanks()
	return c, err
}

func (c Config) withDefaultsNoRanks() (Config, error) {
	c.Self, c.Peer = 0, 1
	return c.withDefaults()
}

// Setup messages travel over the bootstrap connection as KindVerify frames
// with this sequence number; Step says which message it is and Root
// carries the sender's rank.
const (
	setupSeq  = 0x616d6472 // "rdma"
	stepInfo  = 1
	stepReady = 2
	stepWatch = 3 // never sent: the liveness monitor waits for it
	readySize = 128
)

func setupHeader(cfg *Config, step uint32, from int) transport.Header {
	return transport.SetupHeader(cfg.Comm, cfg.Epoch, setupSeq, step, from, infoVersion)
}

// Connect sets up an RDMA connection with cfg.Peer, exchanging connection
// data over ctl, an established connection to the same peer (for a
// communicator, its authenticated TCP connection). Both ranks call it with
// mirrored configs; the protocol is symmetric:
//
//  1. each side opens its device, creates its completion queue and queue
//     pair (moved to INIT), maps and registers its receive window and its
//     receive buffers, posts its receives, and sends its connection data:
//     QP number, PSN, LID, GID and GID index, port, MTU, the window's
//     address, key and geometry;
//  2. each side checks the peer's data, registers a staging area shaped
//     like the peer's window, moves its queue pair to RTR (towards the
//     peer's QP number, LID or GID, PSN, at the smaller MTU) and RTS, and
//     says whether it succeeded;
//  3. when both did, traffic may flow: no request can reach a queue pair
//     that is not ready to receive.
//
// On success ctl belongs to the Conn: it carries nothing more but is
// watched, so that the death of the peer's process is noticed at once,
// and it is closed with the Conn (or when the connection fails, so that
// the peer notices). On failure ctl stays the caller's; if the error wraps
// ErrUnavailable both sides completed the exchange and ctl may go on being
// used, otherwise its state is undefined. ctx bounds the setup only.
func Connect(ctx context.Context, ctl transport.Conn, cfg Config) (*Conn, error) {
	cfg, local := cfg.withDefaults()
	c := &Conn{peer: cfg.Peer, ctl: ctl}
	var psn uint32
	var r [4]byte
	rand.Read(r[:])
	psn = binary.LittleEndian.Uint32(r[:]) & (1<<24 - 1)
	if local == nil {
		if cfg.Device != nil {
			cfg.Device.acquire()
			c.dev = cfg.Device
		} else if dc, err := DeviceConfigFromEnv(); err != nil {
			local = err
		} else {
			dc.Netdev = netdevOfConn(ctl)
			if d, err := OpenDevice(dc); err != nil {
				local = err
			} else {
				c.dev = d
			}
		}
	}
	if local == nil {
		local = c.setupLocal(&cfg)
	}
	fail := func(err error) (*Conn, error) {
		c.release()
		return nil, err
	}

	mine := connInfo{status: infoOK}
	if local != nil {
		mine = connInfo{status: infoError, text: local.Error()}
	} else {
		d := c.dev
		mine.qpn, mine.psn, mine.lid, mine.port = c.qp.Num(), psn, d.portAttr.LID, uint8(d.port)
		mine.gidIndex, mine.gid = uint8(d.gid.Index), d.gid.GID
		mine.mtu, mine.linkLayer = d.portAttr.ActiveMTU, d.portAttr.LinkLayer
		mine.winAddr, mine.winKey = c.winMR.Addr(), c.winMR.RKey()
		mine.slots, mine.slotSize, mine.rndvChunk = uint32(c.slots), uint32(c.slotSize), uint64(cfg.RendezvousChunk)
		mine.text = d.Name()
		if d.Emulated() {
			mine.flags |= flagEmulated
		}
		if d.portAttr.LinkLayer == verbs.LinkLayerEthernet {
			mine.flags |= flagGlobal
		}
	}
	var sb, rb [infoSize]byte
	mine.encode(sb[:])
	if err := transport.Exchange(ctx, ctl, setupHeader(&cfg, stepInfo, cfg.Self), sb[:], setupHeader(&cfg, stepInfo, cfg.Peer), rb[:]); err != nil {
		return fail(fmt.Errorf("rdma: setup with rank %d: %w", cfg.Peer, err))
	}
	var theirs connInfo
	var remote error
	if err := theirs.decode(rb[:]); err != nil {
		remote = err
	} else if theirs.status != infoOK {
		remote = errors.New(theirs.text)
	}
	if local == nil && remote == nil {
		local = c.setupPeer(&cfg, &theirs, psn)
	}

	var sr, rr [readySize]byte
	if local != nil {
		binary.LittleEndian.PutUint32(sr[0:], infoError)
		n := copy(sr[8:], local.Error())
		binary.LittleEndian.PutUint16(sr[4:], uint16(n))
	}
	if err := transport.Exchange(ctx, ctl, setupHeader(&cfg, stepReady, cfg.Self), sr[:], setupHeader(&cfg, stepReady, cfg.Peer), rr[:]); err != nil {
		return fail(fmt.Errorf("rdma: setup with rank %d: %w", cfg.Peer, err))
	}
	if binary.LittleEndian.Uint32(rr[0:]) != infoOK && remote == nil {
		n := min(int(binary.LittleEndian.Uint16(rr[4:])), readySize-8)
		remote = errors.New(string(rr[8 : 8+n]))
	}
	switch {
	case local != nil:
		return fail(fmt.Errorf("rdma: rank %d to rank %d: %w: %v", cfg.Self, cfg.Peer, ErrUnavailable, local))
	case remote != nil:
		return fail(fmt.Errorf("rdma: rank %d to rank %d: %w: rank %d reports: %v", cfg.Self, cfg.Peer, ErrUnavailable, cfg.Peer, remote))
	}
	c.quit = make(chan struct{})
	c.wakeS, c.wakeR = make(chan struct{}, 1), make(chan struct{}, 1)
	c.timerS, c.timerR = time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	c.timerS.Stop()
	c.timerR.Stop()
	c.monitored = make(chan struct{})
	go c.monitor(setupHeader(&cfg, stepWatch, cfg.Peer))
	return c, nil
}

// setupLocal creates this side's queue pair (in INIT), window and receive
// buffers, and posts the receives.
func (c *Conn) setupLocal(cfg *Config) error {
	d := c.dev
	c.slots, c.slotSize = cfg.Slots, cfg.SlotSize
	c.batch = creditBatch(c.slots)
	c.rqDepth = c.slots + rqExtra
	c.arrivals = make([]arrival, c.slots)
	sq := slotBudget + rndvWindow + ctlMax
	if d.attr.MaxQPWR > 0 && (sq > d.attr.MaxQPWR || c.rqDepth > d.attr.MaxQPWR) {
		return fmt.Errorf("%s allows %d work requests per queue, %d needed", d.Name(), d.attr.MaxQPWR, max(sq, c.rqDepth))
	}
	cq, err := d.dev.CreateCQ(sq + c.rqDepth + 8)
	if err != nil {
		return err
	}
	c.cq = cq
	if n, ok := cq.(verbs.Notifier); ok {
		c.notify = n.Notify()
	}
	qp, err := d.pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Type: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: c.rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	c.qp = qp
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: uint8(d.port), PKeyIndex: 0,
		AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, verbs.MaskResetToInit); err != nil {
		return err
	}
	if c.win, err = mapMem(c.slots * c.slotSize); err != nil {
		return err
	}
	if c.winMR, err = d.pd.RegisterMemory(c.win, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return err
	}
	if c.rbufs, err = mapMem((c.rqDepth + 1) * recvBufSize); err != nil {
		return err
	}
	if c.rbufMR, err = d.pd.RegisterMemory(c.rbufs, verbs.AccessLocalWrite); err != nil {
		return err
	}
	c.ctsBuf = c.rbufs[c.rqDepth*recvBufSize : c.rqDepth*recvBufSize+ctsSize]
	for i := 0; i < c.rqDepth; i++ {
		c.postRecvLocked(i)
		if c.fatal != nil {
			return c.fatal
		}
	}
	return nil
}

// setupPeer checks the peer's connection data, shapes the sending side to
// its window and moves the queue pair to RTR and RTS.
func (c *Conn) setupPeer(cfg *Config, th *connInfo, psn uint32) error {
	d := c.dev
	switch {
	case (th.flags&flagEmulated != 0) != d.Emulated():
		which := map[bool]string{true: "emulated verbs", false: "a real RDMA device"}
		return fmt.Errorf("rank %d uses %s, rank %d %s", cfg.Self, which[d.Emulated()], cfg.Peer, which[!d.Emulated()])
	case th.linkLayer != d.portAttr.LinkLayer:
		return fmt.Errorf("link layers differ: %v here, %v at rank %d", d.portAttr.LinkLayer, th.linkLayer, cfg.Peer)
	}
	c.pslots, c.pslotSize = int(th.slots), int(th.slotSize)
	c.pwinAddr, c.pwinKey, c.peerChunk = th.winAddr, th.winKey, int(th.rndvChunk)
	var err error
	if c.stage, err = mapMem(c.pslots * c.pslotSize); err != nil {
		return err
	}
	if c.stageMR, err = d.pd.RegisterMemory(c.stage, 0); err != nil {
		return err
	}
	c.stageBusy = make([]bool, c.pslots)
	c.credits = c.pslots
	c.eager = min(cfg.EagerLimit, maxEager(c.pslots, c.pslotSize))
	c.rndvChunk = cfg.RendezvousChunk
	if m := int(d.portAttr.MaxMsgSize); m > 0 {
		c.rndvChunk = min(c.rndvChunk, m)
	}
	switch {
	case cfg.RendezvousThreshold < 0:
		c.rndvMin = -1
	default:
		c.rndvMin = max(cfg.RendezvousThreshold, c.eager)
	}
	mtu := min(d.portAttr.ActiveMTU, th.mtu)
	ah := verbs.AHAttr{DLID: th.lid, SL: cfg.ServiceLevel, PortNum: uint8(d.port)}
	// RoCE always routes by GID; InfiniBand by LID within a subnet and by
	// GID across subnets.
	global := th.flags&flagGlobal != 0 || th.lid == 0 ||
		(!th.gid.IsZero() && [8]byte(th.gid[:8]) != [8]byte(d.gid.GID[:8]))
	if global {
		ah.IsGlobal = true
		ah.GRH = verbs.GlobalRoute{DGID: th.gid, SGIDIndex: uint8(d.gid.Index), HopLimit: 255, TrafficClass: cfg.TrafficClass}
	}
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: mtu, DestQPNum: th.qpn, RQPSN: th.psn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: ah}, verbs.MaskInitToRTR); err != nil {
		return err
	}
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: psn, Timeout: uint8(cfg.Timeout),
		RetryCnt: uint8(cfg.RetryCnt), RNRRetry: 7, MaxRdAtomic: 1}, verbs.MaskRTRToRTS); err != nil {
		return err
	}
	c.info = ConnInfo{Device: d.Name(), Port: d.port, GIDIndex: d.gid.Index, GID: d.gid.GID, LinkLayer: d.portAttr.LinkLayer,
		Emulated: d.Emulated(), QPN: c.qp.Num(), PeerQPN: th.qpn, PathMTU: mtu.Bytes(), Slots: c.slots, SlotSize: c.slotSize,
		PeerSlots: c.pslots, PeerSlotSize: c.pslotSize, EagerLimit: c.eager, Rendezvous: c.rndvMin}
	return nil
}

// netdevOfConn returns the network interface a bootstrap connection goes
// out of, whose RDMA device is the natural choice ("" if unknown).
func netdevOfConn(ctl transport.Conn) string {
	la, ok := ctl.(interface{ LocalAddr() net.Addr })
	if !ok {
		return ""
	}
	if ta, ok := la.LocalAddr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		return netdevOf(ta.IP)
	}
	return ""
}

// NetdevOf returns the network interface a bootstrap connection goes out
// of ("" if unknown or loopback): its RDMA device is the natural choice
// when OCCL_IB_HCA does not say.
func NetdevOf(ctl transport.Conn) string { return netdevOfConn(ctl) }
