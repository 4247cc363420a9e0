package shm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/internal/membarrier"
	"github.com/occl/occl/transport"
)

// ErrUnavailable is wrapped by the error Connect returns when shared memory
// cannot join the two ranks (a ring could not be created, opened or
// validated on either side) but the setup exchange itself completed. Both
// sides then return it, and the control connection is still in step and
// owned by the caller, which may go on using it as the data connection.
var ErrUnavailable = errors.New("shared memory transport unavailable")

// errCMATurnedOff is why a connection set up with Config.NoCMA moves no
// message with a single copy.
var errCMATurnedOff = errors.New("single copies are turned off on this side")

// Config describes one shared-memory connection.
type Config struct {
	// Comm and Epoch identify the communicator and topology epoch the
	// connection belongs to. They name the ring files and label the setup
	// messages, which the peer checks.
	Comm  uint64
	Epoch uint32
	// Self and Peer are the ranks of this side and of the other side.
	Self, Peer int
	// Capacity is the size in bytes of the ring this side writes: a power
	// of two between MinCapacity and MaxCapacity; 0 means
	// DefaultCapacity. The two directions may differ.
	Capacity int
	// Dir is where this side creates its ring file; "" means DefaultDir().
	Dir string
	// NoCMA turns off single-copy transfers by cross-memory attach in
	// both directions: this side neither offers its memory to the peer
	// nor reads the peer's, and every payload goes through the rings.
	// Without it they are used in each direction where setup finds that
	// the receiver can read the sender's memory.
	NoCMA bool
	// CMAThreshold is the smallest payload, in bytes, that this side
	// lends (Conn.Lend) or, with SendByDescriptor, sends by descriptor,
	// for the peer to copy out of this process's memory, when that
	// direction uses cross-memory attach; 0 means DefaultCMAThreshold.
	// The two directions may differ. Smaller payloads go through the
	// ring, and so do all payloads when the peer cannot read this
	// process.
	CMAThreshold int
	// SendByDescriptor makes Send, too, send payloads of CMAThreshold
	// bytes or more by descriptor, each Send waiting for the peer's copy.
	// Without it only Lend (transport.Lender) lends payloads, and Send
	// writes every payload into the ring.
	SendByDescriptor bool
	// OfferThreshold is the smallest payload this side offers (Conn.Offer)
	// where the peer can read this process's memory; 0 offers none.
	// Offers are independent of CMAThreshold: an offer is taken back,
	// into the ring, if the peer has not begun to copy it by Settle, so
	// it keeps the ring's promise that a send returns without the peer.
	OfferThreshold int
	// WholeLendThreshold is the smallest payload this side lends where
	// its receiver takes it whole (transport.WholeLender), when that
	// direction uses cross-memory attach, instead of CMAThreshold: the
	// blocks of an all-to-all, each copied once. Below CMAThreshold where
	// one process_vm_readv pays for whole blocks but not for a ring's
	// chunks; above it where the rings' two copies beat process_vm_readv
	// for blocks up to that size while a ring's chunks still gain by
	// lending. 0 lends them from CMAThreshold (and those in shared
	// buffers from SharedLendMin); otherwise it is at least
	// SharedLendMin, the smallest lent payload every receiver accepts.
	WholeLendThreshold int
	// WholeRingThreshold is the smallest payload taken whole that this
	// side sends through the ring instead of lending it, unless it lies
	// in a shared buffer the receiver maps (transport.WholeLender): where
	// one process_vm_readv does not pay, a block too large to stay in the
	// cache goes faster through the ring, whose receiver copies it to
	// its place with stores that go past the caches (memcopy.Stream),
	// than read from the sender's memory by the kernel. 0 sends none so;
	// otherwise it is above WholeLendThreshold and SharedLendMin.
	WholeRingThreshold int
	// Spin is how long a side that waits for the peer keeps polling
	// before it sleeps on the futex. Polling keeps latency low and stable
	// when every process has a core of its own (a futex wake-up costs tens
	// of microseconds on a virtual machine); it takes the core from other
	// processes when they outnumber the cores. With the default, 0, a
	// waiter polls only briefly, yielding to other goroutines, and then
	// sleeps.
	Spin time.Duration
	// Lazy maps the rings without populating them: their pages are
	// mapped as they are first touched. The connection is up sooner,
	// which matters when many are made at once to recover from a failure
	// (populating 42 rings of 4 MiB for 7 local ranks took most of a
	// shrunk communicator's start), and the first pass through each ring
	// takes a page fault per page.
	Lazy bool
}

// Setup messages travel over the control connection as KindVerify frames
// with this sequence number; Step says which message it is and Root carries
// the sender's rank.
const (
	setupSeq  = 0x73686d // "shm"
	stepOffer = 1
	stepAck   = 2
	stepWatch = 3 // never sent: the liveness monitor waits for it

	offerSize   = 512
	offerText   = 128 // offset of the path (or error text) in an offer
	ackSize     = 128
	ackText     = 8
	statusOK    = 0
	statusError = 1

	// flagCMA in an offer: the probe fields are valid and the sender
	// sends payloads of at least its threshold by descriptor if the peer
	// can read its memory. In an ack: the sender of the ack read the
	// probe, so the direction towards it uses descriptors.
	flagCMA = 1
	// flagPlain in an offer: the sender polls (Config.Spin) and can
	// fence (membarrier.GlobalReady); where both offers carry it the connection's
	// counters are published with plain stores (see Conn.plain).
	flagPlain = 2
)

func setupHeader(cfg *Config, step uint32, from int) transport.Header {
	return transport.SetupHeader(cfg.Comm, cfg.Epoch, setupSeq, step, from, uint64(ringVersion))
}

// offer is what each side announces about the ring it writes.
type offer struct {
	status   uint32
	pid      uint32
	capacity uint64
	nonce    [nonceSize]byte
	text     string // path of the ring file, or why there is none

	flags     uint16
	probeAddr uint64          // address of the probe in process pid
	threshold uint64          // smallest payload sent by descriptor
	pattern   [probeSize]byte // what the probe holds
	offerMin  uint64          // smallest payload offered, 0 if none
}

// Offer wire layout (offerSize bytes, little endian): magic u64, status
// u32, pid u32, capacity u64, nonce [16], text length u16, flags u16,
// 4 reserved bytes, probe address u64, probe length u32, 4 reserved
// bytes, descriptor threshold u64, probe pattern [32], offer threshold
// u64, 16 reserved bytes, text.
func (o *offer) encode(b []byte) {
	clear(b)
	putU64(b[0:], ringMagic)
	putU32(b[8:], o.status)
	putU32(b[12:], o.pid)
	putU64(b[16:], o.capacity)
	copy(b[24:40], o.nonce[:])
	n := copy(b[offerText:], o.text)
	putU16(b[40:], uint16(n))
	putU16(b[42:], o.flags)
	putU64(b[48:], o.probeAddr)
	putU32(b[56:], probeSize)
	putU64(b[64:], o.threshold)
	copy(b[72:72+probeSize], o.pattern[:])
	putU64(b[104:], o.offerMin)
}

func (o *offer) decode(b []byte) error {
	if getU64(b[0:]) != ringMagic {
		return errors.New("malformed offer: bad magic")
	}
	n := int(getU16(b[40:]))
	if n > len(b)-offerText {
		return errors.New("malformed offer: text too long")
	}
	o.status = getU32(b[8:])
	o.pid = getU32(b[12:])
	o.capacity = getU64(b[16:])
	copy(o.nonce[:], b[24:40])
	o.text = string(b[offerText : offerText+n])
	o.flags = getU16(b[42:])
	o.probeAddr = getU64(b[48:])
	o.threshold = getU64(b[64:])
	copy(o.pattern[:], b[72:72+probeSize])
	o.offerMin = getU64(b[104:])
	if o.flags&flagCMA != 0 && (getU32(b[56:]) != probeSize || o.threshold == 0 || o.threshold > transport.MaxLen) {
		o.flags &^= flagCMA // not an offer this side can take up
	}
	if o.flags&flagCMA == 0 || o.offerMin > transport.MaxLen {
		o.offerMin = 0
	}
	return nil
}

// Ack wire layout (ackSize bytes, little endian): status u32, text length
// u16, flags u16, text.
func encodeAck(b []byte, status uint32, flags uint16, text string) {
	clear(b)
	putU32(b[0:], status)
	n := copy(b[ackText:], text)
	putU16(b[4:], uint16(n))
	putU16(b[6:], flags)
}

func decodeAck(b []byte) (status uint32, flags uint16, text string) {
	n := min(int(getU16(b[4:])), len(b)-ackText)
	return getU32(b[0:]), getU16(b[6:]), string(b[ackText : ackText+n])
}

// Connect sets up a shared-memory connection with cfg.Peer, exchanging the
// setup messages over ctl, an established connection to the same peer
// (typically its authenticated TCP connection). Both ranks call Connect
// with mirrored configs; the protocol is symmetric:
//
//  1. each side creates, sizes and maps the ring it will write, in its own
//     file, and sends an offer with the file's path, capacity and nonce;
//  2. each side opens and maps the peer's file, checks it against the
//     offer, removes it from the directory and answers with an ack;
//  3. each side removes its own file (if the peer has not already).
//
// Unless cfg.NoCMA is set, the offer also carries the address of a probe,
// a page of random bytes in the offering process, with the same bytes and
// the offerer's descriptor threshold. Each side tries to read the peer's
// probe with process_vm_readv and says in its ack whether it could; where
// it could, the direction towards it moves payloads of at least the
// sender's threshold by descriptor (see the package documentation), and
// elsewhere through the ring. Both sides thus agree on every direction,
// and a failed probe (missing privileges, another pid namespace, a kernel
// without the system call) silently keeps the ring.
//
// Once Connect returns, successfully or not, no ring file of this pair is
// left in the directory: the rings live only as long as the mappings. A
// process killed in the middle of the exchange may leave its file behind;
// CleanStale removes such files.
//
// On success ctl belongs to the returned Conn: it is not used for data, but
// watched, so that a peer whose process dies is noticed at once (the kernel
// closes its end), and it is closed by Conn.Close. The caller must not use
// ctl afterwards. On failure ctl stays the caller's; if the error wraps
// ErrUnavailable both sides completed the exchange and ctl may still be
// used, otherwise its state is undefined and it should be closed.
//
// ctx bounds the setup only.
func Connect(ctx context.Context, ctl transport.Conn, cfg Config) (*Conn, error) {
	var local error // why this side cannot take part
	if cfg.Self == cfg.Peer || cfg.Self < 0 || cfg.Peer < 0 {
		local = fmt.Errorf("invalid ranks %d and %d", cfg.Self, cfg.Peer)
	}
	threshold := DefaultCMAThreshold
	if cfg.CMAThreshold != 0 {
		threshold = cfg.CMAThreshold
		if cfg.CMAThreshold < 0 {
			local = fmt.Errorf("invalid CMA threshold %d", cfg.CMAThreshold)
		}
	}
	if cfg.OfferThreshold < 0 || uint64(cfg.OfferThreshold) > transport.MaxLen {
		local = fmt.Errorf("invalid offer threshold %d", cfg.OfferThreshold)
	}
	if w := cfg.WholeLendThreshold; w != 0 && (w < SharedLendMin || uint64(w) > transport.MaxLen) {
		local = fmt.Errorf("invalid whole-payload lending threshold %d (0, or at least %d)", w, SharedLendMin)
	}
	if w := cfg.WholeRingThreshold; w != 0 && (w <= max(cfg.WholeLendThreshold, SharedLendMin) || uint64(w) > transport.MaxLen) {
		local = fmt.Errorf("invalid whole-payload ring threshold %d (0, or above %d)", w, max(cfg.WholeLendThreshold, SharedLendMin))
	}
	capacity := uint64(DefaultCapacity)
	if cfg.Capacity != 0 {
		capacity = uint64(cfg.Capacity)
		if cfg.Capacity < 0 || !validCapacity(capacity) {
			local = fmt.Errorf("invalid capacity %d: want a power of two in [%d, %d]", cfg.Capacity, MinCapacity, MaxCapacity)
		}
	}
	dir := cfg.Dir
	if dir == "" {
		dir = DefaultDir()
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	} else if local == nil {
		local = err
	}

	var (
		out, in *mapping
		pr      *probe
		reader  = cmaReader{pidfd: -1}
		// cmaOff is why single copies are off on the connection (the
		// first reason found), nil while they may be on.
		cmaOff error
	)
	if cfg.NoCMA {
		cmaOff = errCMATurnedOff
	}
	defer func() {
		// Reached on every path: the own file goes away now; on failure
		// the mappings go too. The probe is only needed during setup.
		if out != nil {
			unix.Unlink(out.path)
		}
		pr.release()
	}()
	fail := func(err error) (*Conn, error) {
		if out != nil {
			out.unmap()
		}
		if in != nil {
			in.unmap()
		}
		reader.close()
		return nil, err
	}

	mine := offer{pid: uint32(os.Getpid()), capacity: capacity}
	if local == nil {
		m, err := createRing(dir, cfg.Comm, cfg.Self, cfg.Peer, cfg.Epoch, capacity, !cfg.Lazy)
		if err != nil {
			local = err
		} else {
			out = m
			mine.nonce = m.nonce()
			mine.text = m.path
			if len(m.path) > offerSize-offerText {
				local = fmt.Errorf("ring path %q is too long", m.path)
			}
		}
	}
	if local != nil {
		mine.status, mine.text = statusError, local.Error()
	} else if !cfg.NoCMA {
		allowPeerReads() // EINVAL without Yama; the probe tells the rest
		// Without a probe this side just does not offer its memory.
		if p, err := newProbe(); err != nil {
			cmaOff = fmt.Errorf("no probe page to offer: %w", err)
		} else {
			pr = p
			mine.flags |= flagCMA
			mine.probeAddr = p.addr()
			mine.threshold = uint64(threshold)
			mine.pattern = p.pattern
			mine.offerMin = uint64(cfg.OfferThreshold)
		}
	}

	if local == nil && cfg.Spin > 0 && plainPublish && membarrier.GlobalReady() {
		mine.flags |= flagPlain
	}

	// Exchange offers.
	var sb, rb [offerSize]byte
	mine.encode(sb[:])
	if err := transport.Exchange(ctx, ctl, setupHeader(&cfg, stepOffer, cfg.Self), sb[:], setupHeader(&cfg, stepOffer, cfg.Peer), rb[:]); err != nil {
		return fail(fmt.Errorf("shm: setup with rank %d: %w", cfg.Peer, err))
	}
	var theirs offer
	var remote error // why the peer cannot take part
	if err := theirs.decode(rb[:]); err != nil {
		remote = err
	} else if theirs.status != statusOK {
		remote = errors.New(theirs.text)
	}

	// Map the peer's ring.
	if local == nil && remote == nil {
		if err := checkPath(theirs.text, cfg); err != nil {
			local = err
		} else if m, err := openRing(theirs.text, theirs.capacity, theirs.nonce, !cfg.Lazy); err != nil {
			local = err
		} else {
			in = m
			unix.Unlink(m.path)
		}
	}

	// Read the peer's probe.
	var cma cmaSetup
	if local == nil && remote == nil && !cfg.NoCMA {
		if theirs.flags&flagCMA == 0 {
			cmaOff = cmp.Or(cmaOff, fmt.Errorf("rank %d offers no single copies", cfg.Peer))
		} else if r, err := probePeer(theirs.pid, theirs.probeAddr, theirs.pattern[:]); err != nil {
			cmaOff = cmp.Or(cmaOff, fmt.Errorf("cannot read the memory of rank %d (pid %d): %w", cfg.Peer, theirs.pid, err))
		} else {
			reader = r
			cma.in, cma.inMin, cma.inOffer = true, int(theirs.threshold), int(theirs.offerMin)
		}
	}

	// Exchange acks.
	var sa, ra [ackSize]byte
	switch {
	case local != nil:
		encodeAck(sa[:], statusError, 0, local.Error())
	case cma.in:
		encodeAck(sa[:], statusOK, flagCMA, "")
	default:
		encodeAck(sa[:], statusOK, 0, "")
	}
	if err := transport.Exchange(ctx, ctl, setupHeader(&cfg, stepAck, cfg.Self), sa[:], setupHeader(&cfg, stepAck, cfg.Peer), ra[:]); err != nil {
		return fail(fmt.Errorf("shm: setup with rank %d: %w", cfg.Peer, err))
	}
	st, flags, text := decodeAck(ra[:])
	if st != statusOK && remote == nil {
		remote = errors.New(text)
	}
	if mine.flags&flagCMA != 0 && flags&flagCMA == 0 {
		cmaOff = cmp.Or(cmaOff, fmt.Errorf("rank %d cannot read this process's memory (its log says why)", cfg.Peer))
	}
	if mine.flags&flagCMA != 0 && flags&flagCMA != 0 {
		cma.out, cma.outMin, cma.send, cma.outOffer, cma.outWhole, cma.outRing = true, threshold, cfg.SendByDescriptor, cfg.OfferThreshold, cfg.WholeLendThreshold, cfg.WholeRingThreshold
	}
	switch {
	case local != nil:
		return fail(fmt.Errorf("shm: rank %d to rank %d: %w: %v", cfg.Self, cfg.Peer, ErrUnavailable, local))
	case remote != nil:
		return fail(fmt.Errorf("shm: rank %d to rank %d: %w: rank %d reports: %v", cfg.Self, cfg.Peer, ErrUnavailable, cfg.Peer, remote))
	}
	// The creator's descriptor held the stale-file lock; the file is about
	// to be unlinked, so it is no longer needed.
	unix.Close(out.fd)
	out.fd = -1
	cma.reader, cma.off = reader, cmaOff
	c := newConn(out, in, cfg.Peer, ctl, setupHeader(&cfg, stepWatch, cfg.Peer), cma)
	c.spin = cfg.Spin
	c.plain = mine.flags&flagPlain != 0 && theirs.flags&flagPlain != 0
	if !c.local {
		addOffCore(c)
	}
	return c, nil
}

// checkPath accepts only an absolute, clean path to a ring file written by
// the peer for this side, in this communicator and epoch.
func checkPath(path string, cfg Config) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("peer announced a bad ring path %q", path)
	}
	base := filepath.Base(path)
	if !strings.HasPrefix(base, namePrefix(cfg.Comm, cfg.Peer, cfg.Self, cfg.Epoch)) {
		return fmt.Errorf("peer announced ring %q, which is not named for rank %d to rank %d in communicator %#x epoch %d",
			path, cfg.Peer, cfg.Self, cfg.Comm, cfg.Epoch)
	}
	if _, ok := creatorPID(base); !ok {
		return fmt.Errorf("peer announced a bad ring name %q", base)
	}
	return nil
}
