package verbs

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// EmuConfig describes an emulated device.
type EmuConfig struct {
	// Name is the device name; "" gives "emu0", "emu1", ... in the order
	// devices are opened in the process.
	Name string
	// Namespace separates emulated fabrics: a device reaches only devices
	// opened with the same namespace (on the same machine, in the same
	// network namespace). "" means "default".
	Namespace string
	// LinkLayer is the link layer of the device's single port: Ethernet
	// (RoCE, the default) or InfiniBand. On Ethernet the GID table holds a
	// RoCE v1 and a RoCE v2 link-local entry and a routable RoCE v2 entry,
	// the LID is 0 and every address vector must be global; on InfiniBand
	// the port has a LID and one GID.
	LinkLayer LinkLayer
	// ActiveMTU of the port; 0 means MTU4096.
	ActiveMTU MTU
	// Limits; 0 means the default (16384 work requests per queue, 1<<20
	// completion queue entries, 1<<16 memory regions, 1 GiB messages).
	MaxQPWR    int
	MaxCQE     int
	MaxMR      int
	MaxMsgSize uint32
	// ConnectTimeout bounds how long a queue pair entering RTS keeps
	// trying to reach its peer, and how long a responder waits for its
	// queue pair to reach RTR: the emulation's stand-in for the transport
	// retry counter. 0 means 10 seconds.
	ConnectTimeout time.Duration
}

const (
	emuMaxSGE    = 4
	emuMaxInline = 256
	emuPort      = 1
)

// EmuStats counts what an emulated device did.
type EmuStats struct {
	WritesIn     uint64 // RDMA WRITEs placed in this device's memory
	SendsIn      uint64 // SENDs received
	BytesIn      uint64 // payload bytes received
	PacketsOut   uint64 // requests transmitted
	BytesOut     uint64 // payload bytes transmitted
	RNRWaits     uint64 // requests that found no receive posted (receiver not ready)
	RNRNaks      uint64 // requests refused after the RNR retries ran out
	AccessErrors uint64 // remote writes refused for a bad key, bounds or rights
	LinkFailures uint64 // connections to peers that failed
}

type emuStats struct {
	writesIn, sendsIn, bytesIn, packetsOut, bytesOut atomic.Uint64
	rnrWaits, rnrNaks, accessErrors, linkFailures    atomic.Uint64
}

// EmuDevice is an emulated RDMA device with one port. It implements
// Device. Its queue pairs reach the queue pairs of other emulated devices
// (in this process or in others on the machine) through a Unix socket in
// the abstract namespace that the device listens on, named after the
// device's unique id, which every GID of the device carries in its low 8
// bytes (on InfiniBand a second socket is named after the LID).
//
// What the emulation preserves: RDMA WRITEs land in the remote registered
// region at the remote address, after the remote key, the region's
// protection domain and REMOTE_WRITE right and the bounds are checked; a
// failed check is a remote access error (REM_ACCESS_ERR at the requester)
// and moves both queue pairs to ERROR. WRITE WITH IMMEDIATE and SEND
// consume a posted receive and complete it with the immediate data and
// byte count; a message without a posted receive waits (rnr_retry 7) or is
// refused after rnr_retry attempts (RNR_RETRY_EXC_ERR). Requests execute
// and complete in order (RC ordering), a send completes once the responder
// acknowledged it, PSNs are checked against the ones the queue pairs were
// given, state transitions require the attributes libibverbs requires,
// posting in a state that does not allow it fails with EINVAL, a queue in
// ERROR flushes its work requests (WR_FLUSH_ERR), and a completion queue
// that overflows fails.
//
// What it does not emulate: timing, packet loss and retransmission (a
// connection is a reliable byte stream; a broken one is a link failure
// that moves the queue pair to ERROR with RETRY_EXC_ERR), RDMA READ and
// atomics, SRQs, memory windows, unreliable services.
type EmuDevice struct {
	cfg   EmuConfig
	name  string
	id    [8]byte
	lid   uint16
	gids  []GIDEntry
	lns   []*net.UnixListener
	stats emuStats

	mu      sync.RWMutex
	qps     map[uint32]*emuQP
	byLKey  map[uint32]*emuMR
	byRKey  map[uint32]*emuMR
	nextQPN uint32
	nmr     int
	closed  bool

	removed  atomic.Bool
	acceptWG sync.WaitGroup
}

var emuSeq atomic.Int32

// OpenEmulated opens a new emulated device.
func OpenEmulated(cfg EmuConfig) (*EmuDevice, error) {
	n := emuSeq.Add(1) - 1
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("emu%d", n)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.LinkLayer == LinkLayerUnspecified {
		cfg.LinkLayer = LinkLayerEthernet
	}
	if cfg.ActiveMTU == 0 {
		cfg.ActiveMTU = MTU4096
	}
	if !cfg.ActiveMTU.Valid() {
		return nil, errorf("emu_open_device", errInval, "MTU %d", cfg.ActiveMTU)
	}
	if cfg.MaxQPWR <= 0 {
		cfg.MaxQPWR = 16384
	}
	if cfg.MaxCQE <= 0 {
		cfg.MaxCQE = 1 << 20
	}
	if cfg.MaxMR <= 0 {
		cfg.MaxMR = 1 << 16
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 1 << 30
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	d := &EmuDevice{cfg: cfg, name: cfg.Name, qps: map[uint32]*emuQP{},
		byLKey: map[uint32]*emuMR{}, byRKey: map[uint32]*emuMR{}}
	if _, err := rand.Read(d.id[:]); err != nil {
		return nil, err
	}
	var r [4]byte
	rand.Read(r[:])
	d.nextQPN = 0x100 + binary.LittleEndian.Uint32(r[:])%0x800000
	netdev := "emu-" + cfg.Name
	var linkLocal, ula GID
	linkLocal[0], linkLocal[1] = 0xfe, 0x80
	ula[0], ula[1], ula[2] = 0xfd, 0x0c, 0xc1
	copy(linkLocal[8:], d.id[:])
	copy(ula[8:], d.id[:])
	names := []string{d.gidSocket()}
	if cfg.LinkLayer == LinkLayerEthernet {
		d.gids = []GIDEntry{
			{Index: 0, GID: linkLocal, Type: GIDTypeRoCEv1, Netdev: netdev},
			{Index: 1, GID: linkLocal, Type: GIDTypeRoCEv2, Netdev: netdev},
			{Index: 2, GID: ula, Type: GIDTypeRoCEv2, Netdev: netdev},
		}
	} else {
		d.gids = []GIDEntry{{Index: 0, GID: linkLocal, Type: GIDTypeIB}}
	}
	for attempt := 0; ; attempt++ {
		if cfg.LinkLayer == LinkLayerInfiniBand {
			rand.Read(r[:2])
			d.lid = 1 + binary.LittleEndian.Uint16(r[:])%0xbffe
			names = []string{d.gidSocket(), d.lidSocket(d.lid)}
		}
		err := d.listen(names)
		if err == nil {
			break
		}
		if cfg.LinkLayer != LinkLayerInfiniBand || attempt > 8 {
			return nil, errorf("emu_open_device", err, "listen")
		}
	}
	for _, ln := range d.lns {
		d.acceptWG.Add(1)
		go d.acceptLoop(ln)
	}
	return d, nil
}

func (d *EmuDevice) listen(names []string) error {
	for _, name := range names {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			for _, l := range d.lns {
				l.Close()
			}
			d.lns = nil
			return err
		}
		d.lns = append(d.lns, ln)
	}
	return nil
}

func (d *EmuDevice) gidSocket() string { return socketForID(d.cfg.Namespace, d.id[:]) }

func (d *EmuDevice) lidSocket(lid uint16) string {
	return fmt.Sprintf("@occl-verbs/%s/lid-%04x", d.cfg.Namespace, lid)
}

func socketForID(ns string, id []byte) string {
	return fmt.Sprintf("@occl-verbs/%s/dev-%s", ns, hex.EncodeToString(id))
}

// Name implements Device.
func (d *EmuDevice) Name() string { return d.name }

// Emulated implements Device.
func (d *EmuDevice) Emulated() bool { return true }

// Query implements Device.
func (d *EmuDevice) Query() (DeviceAttr, error) {
	if d.removed.Load() {
		return DeviceAttr{}, errorf("ibv_query_device", ErrDeviceRemoved, "%s", d.name)
	}
	return DeviceAttr{MaxQPWR: d.cfg.MaxQPWR, MaxSGE: emuMaxSGE, MaxCQE: d.cfg.MaxCQE, MaxMR: d.cfg.MaxMR,
		MaxMRSize: 1 << 40, PhysPortCnt: 1, FWVersion: "emulated"}, nil
}

// QueryPort implements Device.
func (d *EmuDevice) QueryPort(port int) (PortAttr, error) {
	if d.removed.Load() {
		return PortAttr{}, errorf("ibv_query_port", ErrDeviceRemoved, "%s", d.name)
	}
	if port != emuPort {
		return PortAttr{}, errorf("ibv_query_port", errInval, "%s has no port %d", d.name, port)
	}
	return PortAttr{State: PortActive, MaxMTU: MTU4096, ActiveMTU: d.cfg.ActiveMTU, LID: d.lid,
		LinkLayer: d.cfg.LinkLayer, GIDTableLen: len(d.gids), MaxMsgSize: d.cfg.MaxMsgSize}, nil
}

// QueryGID implements Device.
func (d *EmuDevice) QueryGID(port, index int) (GIDEntry, error) {
	if d.removed.Load() {
		return GIDEntry{}, errorf("ibv_query_gid", ErrDeviceRemoved, "%s", d.name)
	}
	if port != emuPort || index < 0 || index >= len(d.gids) {
		return GIDEntry{}, errorf("ibv_query_gid", errInval, "%s port %d index %d", d.name, port, index)
	}
	return d.gids[index], nil
}

// AsyncError implements Device.
func (d *EmuDevice) AsyncError() error {
	if d.removed.Load() {
		return errorf("ibv_get_async_event", ErrDeviceRemoved, "IBV_EVENT_DEVICE_FATAL on %s", d.name)
	}
	return nil
}

// Close implements Device. It stops the device's listeners; queue pairs,
// completion queues and regions still open keep working until closed.
func (d *EmuDevice) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	for _, ln := range d.lns {
		ln.Close()
	}
	d.acceptWG.Wait()
	return nil
}

// Stats returns the device's counters.
func (d *EmuDevice) Stats() EmuStats {
	s := &d.stats
	return EmuStats{WritesIn: s.writesIn.Load(), SendsIn: s.sendsIn.Load(), BytesIn: s.bytesIn.Load(),
		PacketsOut: s.packetsOut.Load(), BytesOut: s.bytesOut.Load(), RNRWaits: s.rnrWaits.Load(),
		RNRNaks: s.rnrNaks.Load(), AccessErrors: s.accessErrors.Load(), LinkFailures: s.linkFailures.Load()}
}

// Remove emulates hot removal of the device (or a fatal device error):
// every queue pair moves to ERROR and its connections drop, completion
// queues fail with ErrDeviceRemoved, every later call fails, and
// AsyncError reports it.
func (d *EmuDevice) Remove() {
	if d.removed.Swap(true) {
		return
	}
	for _, ln := range d.lns {
		ln.Close()
	}
	for _, q := range d.snapshotQPs() {
		q.linkFailed(fmt.Errorf("device %s removed", d.name))
	}
}

// DropLinks emulates a link failure of the port: every connection of
// every queue pair drops, and the queue pairs at both ends move to ERROR
// (RETRY_EXC_ERR for requests in flight, WR_FLUSH_ERR for the rest).
func (d *EmuDevice) DropLinks() {
	for _, q := range d.snapshotQPs() {
		q.linkFailed(fmt.Errorf("link of %s dropped", d.name))
	}
}

// DropLink drops the connections of one queue pair, like DropLinks.
func (d *EmuDevice) DropLink(qpn uint32) error {
	d.mu.RLock()
	q := d.qps[qpn]
	d.mu.RUnlock()
	if q == nil {
		return errorf("emu_drop_link", errInval, "no queue pair %#x", qpn)
	}
	q.linkFailed(fmt.Errorf("link of queue pair %#x dropped", qpn))
	return nil
}

func (d *EmuDevice) snapshotQPs() []*emuQP {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]*emuQP, 0, len(d.qps))
	for _, q := range d.qps {
		out = append(out, q)
	}
	return out
}

func (d *EmuDevice) check(fn string) error {
	if d.removed.Load() {
		return errorf(fn, ErrDeviceRemoved, "%s", d.name)
	}
	return nil
}

// AllocPD implements Device.
func (d *EmuDevice) AllocPD() (ProtectionDomain, error) {
	if err := d.check("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	return &emuPD{dev: d}, nil
}

// CreateCQ implements Device.
func (d *EmuDevice) CreateCQ(entries int) (CompletionQueue, error) {
	if err := d.check("ibv_create_cq"); err != nil {
		return nil, err
	}
	if entries < 1 || entries > d.cfg.MaxCQE {
		return nil, errorf("ibv_create_cq", errInval, "%d entries (max %d)", entries, d.cfg.MaxCQE)
	}
	return &emuCQ{dev: d, ring: make([]WorkCompletion, entries), notify: make(chan struct{}, 1)}, nil
}

// emuPD is a protection domain.
type emuPD struct {
	dev    *EmuDevice
	mu     sync.Mutex
	nmr    int
	nqp    int
	closed bool
}

func (p *emuPD) RegisterMemory(buf []byte, access Access) (MemoryRegion, error) {
	d := p.dev
	if err := d.check("ibv_reg_mr"); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, errorf("ibv_reg_mr", errInval, "empty region")
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, errorf("ibv_reg_mr", errInval, "remote write or atomic access needs local write")
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errorf("ibv_reg_mr", errInval, "protection domain deallocated")
	}
	p.nmr++
	p.mu.Unlock()
	mr := &emuMR{pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access: access}
	d.mu.Lock()
	if d.nmr >= d.cfg.MaxMR {
		d.mu.Unlock()
		p.mu.Lock()
		p.nmr--
		p.mu.Unlock()
		return nil, errorf("ibv_reg_mr", errNoMem, "%d regions registered (max %d)", d.nmr, d.cfg.MaxMR)
	}
	for {
		var k [8]byte
		rand.Read(k[:])
		l, r := binary.LittleEndian.Uint32(k[:4]), binary.LittleEndian.Uint32(k[4:])
		if l == 0 || r == 0 || d.byLKey[l] != nil || d.byRKey[r] != nil {
			continue
		}
		mr.lkey, mr.rkey = l, r
		break
	}
	d.byLKey[mr.lkey] = mr
	d.byRKey[mr.rkey] = mr
	d.nmr++
	d.mu.Unlock()
	return mr, nil
}

func (p *emuPD) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errorf("ibv_dealloc_pd", errInval, "already deallocated")
	}
	if p.nmr > 0 || p.nqp > 0 {
		return errorf("ibv_dealloc_pd", errBusy, "%d regions and %d queue pairs still use it", p.nmr, p.nqp)
	}
	p.closed = true
	return nil
}

// emuMR is a registered region. mu is held shared while the NIC reads or
// writes the memory, and exclusively by Deregister, so that once
// Deregister returns the memory is no longer touched.
type emuMR struct {
	pd         *emuPD
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	access     Access
	mu         sync.RWMutex
	dead       bool
}

func (m *emuMR) Addr() uint64 { return m.addr }
func (m *emuMR) Len() int     { return len(m.buf) }
func (m *emuMR) LKey() uint32 { return m.lkey }
func (m *emuMR) RKey() uint32 { return m.rkey }

func (m *emuMR) Deregister() error {
	d := m.pd.dev
	d.mu.Lock()
	if d.byLKey[m.lkey] != m {
		d.mu.Unlock()
		return errorf("ibv_dereg_mr", errInval, "region not registered")
	}
	delete(d.byLKey, m.lkey)
	delete(d.byRKey, m.rkey)
	d.nmr--
	d.mu.Unlock()
	m.mu.Lock()
	m.dead = true
	m.buf = nil
	m.mu.Unlock()
	m.pd.mu.Lock()
	m.pd.nmr--
	m.pd.mu.Unlock()
	return nil
}

// span returns the bytes [addr, addr+n) of the region, or false if they
// are not all inside it. The caller holds m.mu shared.
func (m *emuMR) span(addr uint64, n uint32) ([]byte, bool) {
	if m.dead || addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// lookup finds the region of a key for a queue pair of pd with the rights
// need; it returns nil if there is none.
func (d *EmuDevice) lookup(key uint32, remote bool, pd *emuPD, need Access) *emuMR {
	d.mu.RLock()
	m := d.byLKey[key]
	if remote {
		m = d.byRKey[key]
	}
	d.mu.RUnlock()
	if m == nil || m.pd != pd || m.access&need != need {
		return nil
	}
	return m
}

// emuCQ is a completion queue: a ring of completions.
type emuCQ struct {
	dev      *EmuDevice
	mu       sync.Mutex
	ring     []WorkCompletion
	head, n  int
	overflow bool
	closed   bool
	refs     int // queue pairs using it
	notify   chan struct{}
}

// push adds a completion; it reports false (and marks the queue failed)
// when the queue is full.
func (c *emuCQ) push(wc WorkCompletion) bool {
	c.mu.Lock()
	if c.closed || c.overflow {
		ok := !c.overflow
		c.mu.Unlock()
		return ok
	}
	if c.n == len(c.ring) {
		c.overflow = true
		c.mu.Unlock()
		c.wake()
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = wc
	c.n++
	c.mu.Unlock()
	c.wake()
	return true
}

func (c *emuCQ) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *emuCQ) Poll(wc []WorkCompletion) (int, error) {
	if c.dev.removed.Load() {
		return 0, errorf("ibv_poll_cq", ErrDeviceRemoved, "%s", c.dev.name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.overflow {
		return 0, errorf("ibv_poll_cq", ErrCQOverflow, "more than %d completions", len(c.ring))
	}
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	return k, nil
}

// Notify implements Notifier.
func (c *emuCQ) Notify() <-chan struct{} { return c.notify }

func (c *emuCQ) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errorf("ibv_destroy_cq", errInval, "already destroyed")
	}
	if c.refs > 0 {
		return errorf("ibv_destroy_cq", errBusy, "%d queue pairs still use it", c.refs)
	}
	c.closed = true
	return nil
}

var (
	_ Device           = (*EmuDevice)(nil)
	_ ProtectionDomain = (*emuPD)(nil)
	_ MemoryRegion     = (*emuMR)(nil)
	_ CompletionQueue  = (*emuCQ)(nil)
	_ Notifier         = (*emuCQ)(nil)
)
