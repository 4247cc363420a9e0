package comm

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/setup"
	"github.com/occl/occl/transport/shm"
	"github.com/occl/occl/transport/tcp"
)

// Defaults of the configuration.
const (
	DefaultTimeout          = 10 * time.Minute
	DefaultChunkSize        = 512 << 10
	DefaultHeartbeat        = time.Second
	DefaultHeartbeatTimeout = 20 * time.Second
)

// config is a communicator's configuration: defaults, then OCCL_*
// environment variables, then Options.
type config struct {
	timeout          time.Duration
	algo             algo.Algorithm
	chunk            int
	streams          int
	sockBuf          int
	congestion       string // OCCL_TCP_CONGESTION (tcp.Options.Congestion)
	oversubscribed   bool   // more local ranks than CPUs: waits do not poll
	cpus             int    // the CPUs a rank may keep busy (algo.CPUPeers); 0: GOMAXPROCS
	lazyRings        bool   // shm rings are mapped as first touched (a communicator made by Shrink)
	hostID           string
	listenHost       string
	socketIface      string // OCCL_SOCKET_IFNAME; listenHost wins
	heartbeat        time.Duration
	heartbeatTimeout time.Duration
	transport        string
	affinity         bool
	topology         *topo.Topology
	fabricRanks      []int // nil: this communicator is the fabric's
	emulate          bool
	cmaThreshold     int  // single copy of every message from this size; 0: of lent ones alone
	cmaOff           bool // no single copy at all
	cmaLend          bool // lend all-to-all blocks whatever the machine's rates (OCCL_SHM_CMA=lend)
	spin             time.Duration
	stall            time.Duration // 0: derived from timeout
	log              *slog.Logger
}

// Option configures Init, InitFromEnv and NewLocal.
type Option func(*config)

// WithTimeout sets the deadline applied to an operation whose context has
// none (OCCL_TIMEOUT). An operation that times out fails the communicator.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithAlgorithm forces a schedule (OCCL_ALGO: ring, rhd, rd, tree,
// pairwise, linear) for the collectives that have it; others keep the
// automatic choice.
func WithAlgorithm(a algo.Algorithm) Option { return func(c *config) { c.algo = a } }

// WithChunkSize sets the pipelining chunk of ring and tree schedules in
// bytes (OCCL_CHUNK_SIZE).
func WithChunkSize(n int) Option { return func(c *config) { c.chunk = n } }

// WithStreams sets the number of TCP sockets per pair of ranks
// (OCCL_NSOCKS_PERPEER); large messages are striped across them.
func WithStreams(n int) Option { return func(c *config) { c.streams = n } }

// WithHostID sets the identity of this rank's host (OCCL_HOSTID). Ranks with
// the same host id are treated as one host; by default it is derived from
// the hostname and boot id.
func WithHostID(id string) Option { return func(c *config) { c.hostID = id } }

// WithListenHost sets the address this rank's listeners bind
// (OCCL_SOCKET_ADDR): its data listener and, when it leads a group of
// Split, the group's rendezvous. Peers connect to it, so it chooses the
// interface data traffic to this rank arrives on. It takes precedence over
// WithSocketInterface. By default it is the local address of the
// connection to the rendezvous, which is the interface that reaches rank 0.
func WithListenHost(host string) Option { return func(c *config) { c.listenHost = host } }

// WithSocketInterface chooses the listeners' address by interface
// (OCCL_SOCKET_IFNAME), with the syntax of NCCL_SOCKET_IFNAME (see
// InterfaceAddr): "eth1", "=eth1", "ib,eth", "^docker,lo". An interface
// that does not exist or has no address makes Init fail. The rendezvous of
// rank 0 is bound where the unique id says (NewUniqueID picks its address
// the same way).
func WithSocketInterface(spec string) Option { return func(c *config) { c.socketIface = spec } }

// WithHeartbeat sets the control-plane heartbeat interval and the silence
// after which a rank is declared failed (OCCL_HEARTBEAT_TIMEOUT sets the
// latter).
func WithHeartbeat(interval, timeout time.Duration) Option {
	return func(c *config) { c.heartbeat, c.heartbeatTimeout = interval, timeout }
}

// Transports a communicator can use between two ranks.
const (
	// TransportAuto uses shared memory between ranks on the same host and
	// TCP between hosts.
	TransportAuto = setup.PolicyAuto
	// TransportTCP uses TCP between every pair.
	TransportTCP = setup.PolicyTCP
	// TransportSHM requires shared memory between every pair (all ranks
	// on one host).
	TransportSHM = setup.PolicySHM
	// TransportRDMA uses RDMA verbs between every pair (package
	// transport/rdma), set up over the TCP connection: the device comes
	// from OCCL_IB_HCA and OCCL_IB_GID_INDEX, and OCCL_IB_EMULATE=1 runs
	// over emulated verbs where there is none. Without a usable device
	// Init fails; there is no fallback.
	TransportRDMA = setup.PolicyRDMA
)

// WithTransport chooses the transport (OCCL_TRANSPORT): TransportAuto,
// TransportTCP, TransportSHM or TransportRDMA.
func WithTransport(name string) Option { return func(c *config) { c.transport = name } }

// WithSingleCopy makes the shared-memory transport copy every message of
// at least threshold bytes straight from the sender's buffer into the
// receiver's by cross-memory attach (OCCL_SHM_CMA=SIZE), each send
// waiting for the receiver's copy; smaller messages go through the rings.
// 0 (OCCL_SHM_CMA=off) sends everything through the rings.
//
// By default only the blocks of a large all-to-all go so, lent
// (transport.Lender): a rank posts all its blocks, copies its peers'
// blocks out of their memory, and then waits for its own to be taken, so
// that every byte is copied once and no send waits for its receiver.
// Blocks are lent when the local ranks outnumber the cores (from 64 KiB,
// and from 32 KiB those their receivers take whole), and otherwise
// where one process_vm_readv of a block is faster than the two memory
// copies of the rings (shm.MeasureSingleCopy, measured once per process,
// and shm.SingleCopyRate.Pays)
// or the blocks are too large to stay in the cache with the rings (1 MiB);
// OCCL_SHM_CMA=lend lends them in either case. Other
// collectives keep the rings, whose pipelined double copy lets a sender
// run ahead of its receiver: with every large message sent by descriptor,
// 64 MiB AllReduce at 2 processes took 20% longer (see package shm).
func WithSingleCopy(threshold int) Option {
	return func(c *config) { c.cmaThreshold, c.cmaOff, c.cmaLend = threshold, threshold == 0, false }
}

// WithLending lends the blocks of a large all-to-all over shared memory
// whatever this machine's measured rates (OCCL_SHM_CMA=lend): from 16 KiB
// when every local rank has a core, from 64 KiB when they share cores
// (blocks their receivers take whole from 32 KiB, see lendMinWholeShared).
// It replaces an earlier WithSingleCopy. Use it where process_vm_readv is
// known to beat the rings' two copies but the measurement says otherwise
// (see WithSingleCopy).
func WithLending() Option {
	return func(c *config) { c.cmaThreshold, c.cmaOff, c.cmaLend = 0, false, true }
}

// DefaultSpin is how long a rank waiting on shared memory polls before it
// sleeps, when the ranks of its machine have a core each.
const DefaultSpin = 500 * time.Microsecond

// WithSpin sets how long a rank waiting for a peer on shared memory keeps
// polling before it sleeps (OCCL_SHM_SPIN, DefaultSpin by default), when
// the machine has at least one core per local rank. Polling keeps small
// operations' latency low and stable (a sleeping waiter costs tens of
// microseconds to wake on a virtual machine); with more local ranks than
// cores waits do not poll whatever this says, since a polling rank would
// take the core from the rank it waits for: they poll briefly, yielding
// to other goroutines, then sleep. 0 does the same on any machine.
func WithSpin(d time.Duration) Option { return func(c *config) { c.spin = d } }

// WithStallTimeout sets how long a collective may run on a rank before the
// ranks compare what they are doing (OCCL_STALL_TIMEOUT; by default the
// smaller of 2 s and a quarter of the timeout): ranks that called
// different collectives fail with ErrMismatch, and otherwise every rank
// logs one report at WARN naming the ranks that have not called the
// operation and the peer each waiting rank is blocked on. The check
// repeats at doubling intervals while the operation goes on.
func WithStallTimeout(d time.Duration) Option { return func(c *config) { c.stall = d } }

// WithAffinity binds the process to its share of the host's CPUs when the
// communicator is created (OCCL_AFFINITY=auto): the ranks running on one
// machine (whatever emulated hosts a topology puts them on) split the CPUs
// the processes may use, and GOMAXPROCS follows, so that ranks do not
// compete for cores. It changes process-wide settings, so it
// is off by default; launchers that bind processes themselves (mpirun)
// make it unnecessary.
func WithAffinity(on bool) Option { return func(c *config) { c.affinity = on } }

// WithLogger sets the logger. By default occl logs warnings to stderr, and
// more with OCCL_DEBUG=INFO or OCCL_DEBUG=DEBUG.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// listenAddr returns the host this rank's listeners bind, or "" to bind
// the address that reached rank 0.
func (c *config) listenAddr() (string, error) {
	if c.listenHost != "" || c.socketIface == "" {
		return c.listenHost, nil
	}
	return InterfaceAddr(c.socketIface)
}

// tcpOptions returns the options of every TCP connection.
func (c *config) tcpOptions() tcp.Options {
	o := tcp.Options{SocketBuffer: c.sockBuf, Congestion: c.congestion}
	if c.oversubscribed {
		o.SpinReads = -1
	}
	return o
}

// shmSpin returns how long shared-memory waits poll (0: they yield).
func (c *config) shmSpin() time.Duration {
	if c.oversubscribed {
		return 0
	}
	return c.spin
}

// emuConfig returns the configuration of the emulated fabric under key.
func (c *config) emuConfig(key uint64, local bool) emu.Config {
	ec := emu.Config{Key: fmt.Sprintf("%016x", key), Local: local}
	if c.oversubscribed {
		ec.Spin = -1
	}
	return ec
}

func newConfig(opts []Option) (config, error) {
	c := config{
		timeout:          DefaultTimeout,
		chunk:            DefaultChunkSize,
		streams:          1,
		heartbeat:        DefaultHeartbeat,
		heartbeatTimeout: DefaultHeartbeatTimeout,
		transport:        TransportAuto,
		spin:             DefaultSpin,
	}
	if err := c.fromEnv(); err != nil {
		return c, err
	}
	for _, o := range opts {
		o(&c)
	}
	err := c.finish()
	return c, err
}

// finish completes a configuration that options were applied to: it
// fills in what they left to derive (the logger, the host id) and checks
// it (validate). newConfig and Grow (growConfig) finish every
// configuration they make, so that a communicator never runs with one
// that the other rejects.
func (c *config) finish() error {
	if c.log == nil {
		c.log = defaultLogger()
	}
	if c.hostID == "" {
		c.hostID = topo.LocalHostID()
	}
	return c.validate()
}

// validate checks the settings that do not depend on the communicator's
// size (checkTopology checks those), with an error wrapping
// ErrInvalidArgument.
func (c *config) validate() error {
	switch c.transport {
	case TransportAuto, TransportTCP, TransportSHM, TransportRDMA:
	default:
		return invalidf("transport %q: want auto, tcp, shm or rdma", c.transport)
	}
	if c.emulate && c.topology == nil {
		return invalidf("emulation needs a topology (OCCL_TOPO or WithTopology)")
	}
	if c.stall < 0 {
		return invalidf("stall timeout %v is negative", c.stall)
	}
	if c.spin < 0 {
		return invalidf("shared-memory spin %v is negative", c.spin)
	}
	if c.cmaThreshold < 0 {
		return invalidf("single-copy threshold %d is negative", c.cmaThreshold)
	}
	if c.timeout <= 0 || c.chunk <= 0 || c.streams <= 0 || c.heartbeat <= 0 || c.heartbeatTimeout <= c.heartbeat {
		return invalidf("configuration: timeout %v, chunk %d, streams %d, heartbeat %v/%v must be positive (and the heartbeat timeout longer than the interval)",
			c.timeout, c.chunk, c.streams, c.heartbeat, c.heartbeatTimeout)
	}
	return nil
}

func (c *config) fromEnv() error {
	var err error
	env := func(name string, parse func(string) error) {
		if v := os.Getenv(name); v != "" && err == nil {
			if e := parse(v); e != nil {
				err = fmt.Errorf("occl: %s=%q: %w", name, v, e)
			}
		}
	}
	env("OCCL_TIMEOUT", func(v string) (e error) { c.timeout, e = parseDuration(v); return })
	env("OCCL_ALGO", func(v string) (e error) { c.algo, e = algo.ParseAlgorithm(strings.ToLower(v)); return })
	env("OCCL_CHUNK_SIZE", func(v string) (e error) { c.chunk, e = ParseSize(v); return })
	env("OCCL_NSOCKS_PERPEER", func(v string) (e error) { c.streams, e = strconv.Atoi(v); return })
	env("OCCL_SOCKET_BUFFER", func(v string) (e error) { c.sockBuf, e = ParseSize(v); return })
	env("OCCL_TCP_CONGESTION", func(v string) error {
		// The kernel's names are at most 15 bytes (TCP_CA_NAME_MAX).
		if len(v) > 15 || strings.ContainsAny(v, " \t\n/") {
			return fmt.Errorf("want auto, system or a congestion control algorithm's name")
		}
		c.congestion = strings.ToLower(v)
		return nil
	})
	env("OCCL_HOSTID", func(v string) error { c.hostID = v; return nil })
	env("OCCL_SOCKET_ADDR", func(v string) error { c.listenHost = v; return nil })
	env("OCCL_SOCKET_IFNAME", func(v string) error { c.socketIface = v; return nil })
	env("OCCL_AFFINITY", func(v string) error {
		switch strings.ToLower(v) {
		case "auto", "1", "on":
			c.affinity = true
		case "off", "0", "none":
			c.affinity = false
		default:
			return fmt.Errorf("want auto or off")
		}
		return nil
	})
	env("OCCL_TOPO", func(v string) (e error) { c.topology, e = topo.FromSpec(v); return })
	env("OCCL_EMULATE", func(v string) error { c.emulate = v == "1" || strings.EqualFold(v, "true"); return nil })
	env("OCCL_TRANSPORT", func(v string) error { c.transport = strings.ToLower(v); return nil })
	env("OCCL_SHM_CMA", func(v string) (e error) {
		switch {
		case strings.EqualFold(v, "off"):
			c.cmaThreshold, c.cmaOff, c.cmaLend = 0, true, false
		case strings.EqualFold(v, "lend"):
			c.cmaThreshold, c.cmaOff, c.cmaLend = 0, false, true
		case strings.EqualFold(v, "auto"):
			c.cmaThreshold, c.cmaOff, c.cmaLend = 0, false, false
		default:
			c.cmaThreshold, e = ParseSize(v)
			c.cmaOff, c.cmaLend = c.cmaThreshold == 0, false
		}
		return
	})
	env("OCCL_STALL_TIMEOUT", func(v string) (e error) { c.stall, e = parseDuration(v); return })
	env("OCCL_SHM_SPIN", func(v string) (e error) { c.spin, e = parseDuration(v); return })
	env("OCCL_HEARTBEAT_TIMEOUT", func(v string) (e error) { c.heartbeatTimeout, e = parseDuration(v); return })
	return err
}

// parseDuration accepts Go durations ("30s", "2m") and plain seconds.
func parseDuration(v string) (time.Duration, error) {
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(s * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

// ParseSize parses a byte count with an optional K, M or G suffix (powers of
// 1024), as nccl-tests does: "8", "64K", "1M", "2G".
func ParseSize(v string) (int, error) { return transport.ParseSize(v) }

// defaultLogger is the logger of communicators without WithLogger: text on
// standard error, at the level of OCCL_DEBUG (default WARN) and for the
// subsystems of OCCL_DEBUG_SUBSYS (see internal/logx).
func defaultLogger() *slog.Logger {
	cfg, err := logx.FromEnv()
	l := logx.New(os.Stderr, cfg)
	if err != nil {
		l.Warn("occl: ignoring the debug settings", "err", err)
	}
	return l
}

// Smallest all-to-all blocks lent over shared memory by default (see
// WithSingleCopy), when every local rank has a core (lendMinCore, or
// lendMinUncached where single copies do not pay) and when the ranks
// outnumber the cores (lendMinShared; all-to-all blocks taken whole from
// lendMinWholeShared, or lendMinSharedUncached, see shmWhole). Measured on
// 2 cores, 3 rounds against the rings: at 2 processes 8 KiB blocks were
// slower lent (4.8-5.2 us against 4.3), 16 KiB faster (5.9-6.2 against
// 7.1), 32 KiB 7.9-9.0 against 12.6-13.2; at 4 processes, where a lender
// waits for peers that share its core, 16 and 32 KiB blocks were slower
// lent (49-54 us against 40-41, 89 against 76), 64 KiB even, 256 KiB much
// faster (380-465 us against 707-753). Since a wait of an operation of up
// to 256 KiB on shared memory gives the core away (see shortOpShm), a
// lender's wait for a peer on its core costs less, and 64 KiB blocks
// measured faster lent on a 2-core Sapphire Rapids (4 processes, 10
// interleaved rounds, medians, AllToAll of 256 KiB: 72 us lent against 87
// through the rings; with the waits giving the core away, 52 against 80;
// Open MPI's vader 56).
//
// Where one process_vm_readv does not beat two memory copies of a block
// that stays in the cache (shm.SingleCopyRate.Pays), blocks are lent from
// lendMinUncached, from where lending measured as fast as the rings or
// faster (a pair's blocks and the rings they pass through no longer fit
// the cache together: the likely reason, not measured). On a 2-core EPYC with a 32
// MiB L3, at 2 processes, 5 interleaved rounds, medians lent / rings /
// Open MPI's vader: AllToAll 2 MiB (1 MiB blocks) 189 / 216 / 178 us, 4
// MiB 453 / 714 / 514 us, 8 MiB 1.62 / 1.93 / 1.42 ms, 16 MiB 3.62 / 3.90
// / 3.75 ms, 32 MiB 7.75 / 7.37 / 6.93 ms; earlier, 64 MiB 15.4-16.0
// against 18.8-21.5 ms (vader 16.0-18.4), 32 MiB 9.0-10.4 against
// 8.1-9.2. Only 16 MiB blocks were faster through the rings, by 5 to 10%,
// against 1.2 to 1.6 times slower at 2 and 4 MiB blocks.
//
// Where the ranks outnumber the cores and one process_vm_readv does not
// beat two memory copies, all-to-all blocks taken whole are lent from
// lendMinSharedUncached (a ring's or a tree's chunks from lendMinShared
// still: Broadcast of 1 and 4 MiB at 4 processes was 10-15% slower with
// its chunks through the rings): below it the rings' copies beat
// lending's pinned reads. On the same EPYC (process_vm_readv of 256 KiB
// 13.6 us against 3.3 for a memory copy), 4 processes, 4 to 6 interleaved rounds, lent / rings / Open MPI's vader:
// AllToAll 128 KiB (32 KiB blocks) 57-71 / 29-35 / 49-52 us, 256 KiB
// 65-79 / 54-55 / 53-58, 512 KiB 111-153 / 107-167 / 108-125, 1 MiB
// (256 KiB blocks) median 223 / 206 / 213, 1.5 MiB (384 KiB blocks)
// 220-266 / 247-293 / 240-269, 2 MiB 290-325 / 339-374 / 352-408, 3 MiB
// 486-544 / 740-846 / 596-719.
const (
	lendMinCore           = 16 << 10
	lendMinShared         = 64 << 10
	lendMinSharedUncached = 384 << 10
	lendMinUncached       = 1 << 20
)

// lendMinWholeShared is the smallest all-to-all block lent over shared
// memory where the ranks outnumber the cores, among the blocks that their
// receivers take whole (up to algo.PairwisePiece; see
// transport.WholeLender): lendMinShared stays the threshold of a ring's or
// a tree's chunks, whose receivers read them as they come. Measured on 2
// cores, 4 processes, AllToAll from the heap, 8 rotating rounds, medians,
// blocks lent from 32 KiB / from 64 KiB (the rings below) / Open MPI's
// vader: 128 KiB (32 KiB blocks) 38.6 / 53.5 / 34.6 us, 192 KiB (48 KiB
// blocks) 49.3 / 78.9 / 50.9; 16 KiB blocks lent took 21 to 53 us (64
// KiB, median 42.5 against 31.8 through the rings). With every lending
// threshold at 32 KiB, AllGather of 256 KiB (64 KiB blocks, lent as 2 x
// 32 KiB, see algo.LendFirst) took 120 us against 91, 5 rounds.
const lendMinWholeShared = 32 << 10

// shmCMA returns the shared-memory transport's single-copy setting: off,
// the smallest message sent so, and whether every message from that size
// is (send) or only lent all-to-all blocks.
func (c *config) shmCMA() (off bool, threshold int, send bool) {
	switch {
	case c.cmaOff:
		return true, 0, false
	case c.cmaThreshold > 0:
		return false, c.cmaThreshold, true
	case c.transport == TransportTCP || c.transport == TransportRDMA:
		// No pair uses shared memory: nothing to measure.
		return true, 0, false
	case c.oversubscribed:
		return false, lendMinShared, false
	case !c.cmaLend && !singleCopyPays():
		return false, lendMinUncached, false
	}
	return false, lendMinCore, false
}

// The smallest message a group's send offers over shared memory (see
// transport.Offerer and shmOffer): where the local ranks have a core each,
// and where they share the cores. A Send and Recv pair with the previous
// and next rank, 3 rotating rounds on 2 cores, medians through the rings /
// by one process_vm_readv each (OCCL_SHM_CMA=8K, every message sent by
// descriptor) / Open MPI's vader: 2 processes, 16 KiB 3.95 / 3.68 / 3.57
// us, 32 KiB 5.94 / 4.97 / 5.12, 128 KiB 20.8 / 9.46 / 9.90, 1 MiB 93.5 /
// 92.2 / 86.0; 4 processes, 16 KiB 8.52 / 13.1 / 11.9, 64 KiB 21.0 / 21.9
// / 19.7, 256 KiB 82.4 / 53.7 / 48.7, 1 MiB 244 / 257 / 265. With offers
// (their sender's brief wait for the claim where the ranks share the
// cores, and the copy waits), 4 processes, 4 rotating rounds, offered from
// 32 KiB / from 128 KiB / vader: 32 KiB 15.1 / 13.2 / 14.2 us, 64 KiB 19.1
// / 24.8 / 13.9, 96 KiB 22.1 / 36.3 / 20.0.
const (
	offerMinCore   = 32 << 10
	offerMinShared = 64 << 10
)

// shmOffer returns the smallest message a group's send offers over shared
// memory, 0 for none: none where single copies are off or every large
// message is sent by descriptor (OCCL_SHM_CMA=SIZE), whose sends wait
// for the receiver anyway.
func (c *config) shmOffer() int {
	switch off, _, send := c.shmCMA(); {
	case off || send:
		return 0
	case c.oversubscribed:
		return offerMinShared
	}
	return offerMinCore
}

// shmWhole returns the smallest all-to-all block that shared memory lends
// where its receiver takes it whole (shm.Config.WholeLendThreshold), 0
// for shmCMA's threshold: where the local ranks outnumber the cores and
// blocks are lent by default, lendMinWholeShared, or lendMinSharedUncached
// where one process_vm_readv does not beat two memory copies (and the
// lending was not asked for).
func (c *config) shmWhole() int {
	if off, from, send := c.shmCMA(); off || send || !c.oversubscribed || from <= lendMinWholeShared {
		return 0
	}
	if !c.cmaLend && !singleCopyPays() {
		return lendMinSharedUncached
	}
	return lendMinWholeShared
}

// shmRing returns the smallest all-to-all block taken whole that shared
// memory sends through its ring instead of lending it, unless the block
// lies in a shared buffer (shm.Config.WholeRingThreshold), 0 for none:
// where blocks are lent from lendMinUncached (every local rank has a core
// and one process_vm_readv does not beat two memory copies), the blocks
// that do not stay in the cache (memcopy.Streams), which the receiver
// copies out of the ring with stores past the caches. On a 2-core EPYC,
// 2 processes, 4 interleaved rounds, out of place: AllToAll of 16 MiB
// (8 MiB blocks) 1.09-1.26 ms through the rings with such stores against
// 1.47-1.92 lent (Open MPI's vader 1.44-1.87), 64 MiB 5.96-6.48 against
// 8.12-11.8 ms (vader 8.72-12.3); the rings with the stores that read
// every destination line first took 6.83-7.12 ms at 64 MiB.
func (c *config) shmRing() int {
	if off, from, send := c.shmCMA(); off || send || from != lendMinUncached {
		return 0
	}
	return max(memcopy.StreamMin(), lendMinUncached+1)
}

// singleCopyPays reports whether one process_vm_readv of a block beats
// the rings' two memory copies on this machine; a variable so that tests
// can take either answer.
var singleCopyPays = func() bool { return shm.MeasureSingleCopy().Pays() }

// singleCopy describes the shared-memory single-copy setting: "off",
// "lend" (with the smallest block lent, and the smallest whole all-to-all
// block where that is lower), or the size from which every message goes
// so; by default, with the rates it was chosen from.
func (c *config) singleCopy() string {
	off, from, send := c.shmCMA()
	whole := c.shmWhole()
	switch {
	case off:
		return "off"
	case send:
		return strconv.Itoa(from)
	}
	s := "lend from " + strconv.Itoa(from)
	if whole > 0 {
		s += ", whole all-to-all blocks from " + strconv.Itoa(whole)
	}
	if c.cmaLend {
		return s
	}
	return s + " (" + shm.MeasureSingleCopy().String() + ")"
}
