package comm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/setup"
	"github.com/occl/occl/transport/tcp"
)

// Init joins the communicator identified by id as rank rank of size ranks.
// Every rank calls it with the same id and size; rank 0 serves the
// rendezvous at id.Addr, so it must run on the host that address names. The
// call returns when every rank has joined and all connections are open and
// authenticated, or fails when ctx ends (the configured timeout applies if
// ctx has no deadline).
//
// Bootstrap: each rank connects to rank 0 (retrying until rank 0 listens),
// proves it holds the secret, opens a data listener on the interface that
// reached rank 0, and sends its rank, host identity and listener address.
// Rank 0 answers with the table of all ranks. Ranks then connect pairwise
// (the lower rank dials), authenticating every connection. The connections
// to rank 0 stay open as the control plane.
func Init(ctx context.Context, id UniqueID, rank, size int, opts ...Option) (*Communicator, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return initTCP(ctx, id, rank, size, cfg, nil, cfg.fabricRanks)
}

// commIDOf derives the communicator id every rank computes from the id's
// secret (random, so ids of different communicators differ).
func commIDOf(id UniqueID) uint64 {
	h := sha256.Sum256(append([]byte("occl-comm-id"), id.Secret[:]...))
	return binary.LittleEndian.Uint64(h[:])
}

// listenFilter accepts the hellos of communicator comm for purpose p. A
// data listener (p is tcp.PurposeData) also serves a shrink's recovery
// connections and probes.
func listenFilter(p tcp.Purpose, comm uint64) func(tcp.Hello) error {
	return func(h tcp.Hello) error {
		recovery := h.Purpose == tcp.PurposeRecovery || h.Purpose == tcp.PurposeProbe
		if h.Purpose != p && !(p == tcp.PurposeData && recovery) {
			return fmt.Errorf("purpose %d, this listener serves %d", h.Purpose, p)
		}
		if h.Comm != comm {
			return fmt.Errorf("communicator %016x, this listener serves %016x", h.Comm, comm)
		}
		return nil
	}
}

// initTCP bootstraps a communicator over TCP, in three steps, each with
// one role: rendezvous (join rank 0 and learn every rank), connect (open
// the data connections, with the transport chosen for each pair, under the
// emulated fabric if one is configured) and start (the control plane and
// the communicator). rootLn, if not nil, is an already bound rendezvous
// listener for rank 0 (Split binds it before it publishes the address).
// fabricRanks are the ranks' fabric ranks (nil: this is the fabric-wide
// communicator).
func initTCP(ctx context.Context, id UniqueID, rank, size int, cfg config, rootLn *tcp.Listener, fabricRanks []int) (c *Communicator, err error) {
	b, err := newTCPBootstrap(id, rank, size, cfg)
	if err != nil {
		if rootLn != nil {
			rootLn.Close()
		}
		return nil, err
	}
	return b.run(ctx, rootLn, fabricRanks)
}

// run runs the steps of the bootstrap b (see initTCP).
func (b *tcpBootstrap) run(ctx context.Context, rootLn *tcp.Listener, fabricRanks []int) (c *Communicator, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cfg.timeout)
		defer cancel()
	}
	if b.gone != nil {
		// The bootstrap of a shrunk communicator ends as soon as a member
		// is found gone, with the error naming it.
		outer := ctx
		wctx, cancel := context.WithCancelCause(ctx)
		ctx = wctx
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			b.gone.watch(wctx, cancel)
		}()
		defer func() {
			cancel(nil)
			<-watched
			if err == nil {
				return
			}
			pe, ok := context.Cause(wctx).(*PeerError)
			if !ok && outer.Err() == nil {
				// It failed on its own (rank 0 refused the join, a
				// connection broke): a member gone is the likely cause.
				pe = b.gone.check(outer, goneCheckTimeout)
			}
			if pe != nil {
				err = fmt.Errorf("%w (the bootstrap stopped: %v)", pe, err)
			}
		}()
	}
	defer func() {
		if err != nil {
			b.abandon()
		}
	}()
	if err = b.rendezvous(ctx, rootLn); err != nil {
		return nil, err
	}
	b.placeProcess()
	if err = b.connect(ctx); err != nil {
		return nil, err
	}
	return b.start(ctx, fabricRanks)
}

// tcpBootstrap is one rank's bootstrap over TCP (see initTCP). Each step
// records what it opened; abandon releases it all if a later step fails,
// and start hands it to the communicator.
type tcpBootstrap struct {
	id     UniqueID
	commID uint64
	// rank and size are -1 and 0 for a joiner until rank 0's table
	// assigns them.
	rank, size int
	// members is the number of ranks that join by number (0..members-1);
	// the ranks from members to size-1 go to joiners in the order they
	// arrive (Grow). It is size for Init.
	members int
	// rvEnd, if set, is when rank 0 gives up waiting for the ranks to
	// join: a Grow ends its rendezvous before any member's deadline, so
	// that every rank hears how many joiners came.
	rvEnd      time.Time
	what       string // "init", "grow" or "join", for errors
	cfg        config
	listenHost string       // the data listener's host, if configured
	base       *slog.Logger // the communicator's logger
	log        *slog.Logger // subsystem INIT

	// rendezvous
	rv       *rendezvous // rank 0 only
	ctrlConn *tcp.Conn   // to rank 0; becomes the control connection
	dataLn   *tcp.Listener
	nonce    [16]byte
	hostIDs  []string // by rank
	// clockOffset is rank 0's clock minus this rank's, up to the rank
	// table's one-way latency (for timelines).
	clockOffset time.Duration
	addrs       []string // every rank's data listener

	// gone, if set, watches the members of a shrunk communicator for
	// processes that are gone.
	gone *goneWatch

	// connect
	links  map[int]transport.Conn // by peer rank
	fabric *emu.Fabric            // the emulated fabric, if any
}

// newTCPBootstrap checks the arguments and the configuration.
func newTCPBootstrap(id UniqueID, rank, size int, cfg config) (*tcpBootstrap, error) {
	if size < 1 || rank < 0 || rank >= size || size > wire.MaxRanks {
		return nil, invalidf("init: rank %d of size %d", rank, size)
	}
	if err := cfg.checkTopology(size); err != nil {
		return nil, err
	}
	listenHost, err := cfg.listenAddr()
	if err != nil {
		return nil, fmt.Errorf("occl: rank %d: init: %w", rank, err)
	}
	if cfg.topology != nil {
		cfg.hostID = virtualHostID(cfg.hostID, cfg.topology, rank)
	}
	b := &tcpBootstrap{id: id, commID: commIDOf(id), rank: rank, size: size, members: size, what: "init", cfg: cfg, listenHost: listenHost}
	b.setLog()
	return b, nil
}

// newJoinBootstrap prepares the bootstrap of a joiner (Join): its rank and
// size come with rank 0's table.
func newJoinBootstrap(id UniqueID, cfg config) (*tcpBootstrap, error) {
	if cfg.fabricRanks != nil {
		return nil, invalidf("join: fabric ranks are not supported for a joiner")
	}
	listenHost, err := cfg.listenAddr()
	if err != nil {
		return nil, fmt.Errorf("occl: joiner: %w", err)
	}
	b := &tcpBootstrap{id: id, commID: commIDOf(id), rank: wire.AnyRank, what: "join", cfg: cfg, listenHost: listenHost}
	b.setLog()
	return b, nil
}

func (b *tcpBootstrap) setLog() {
	b.base = b.cfg.log.With("rank", b.rank, "size", b.size, "comm", fmt.Sprintf("%016x", b.commID))
	b.log = logx.For(b.base, logx.Init)
}

// wrap says that step what of the bootstrap failed with e.
func (b *tcpBootstrap) wrap(what string, e error) error {
	switch {
	case b.what == "grow":
		// Wrapped in the OpError of Grow, which names the rank.
		return fmt.Errorf("%s: %w", what, e)
	case b.rank == wire.AnyRank:
		return fmt.Errorf("occl: joiner: join: %s: %w", what, e)
	case b.what == "shrink":
		return fmt.Errorf("occl: new rank %d: shrink: %s: %w", b.rank, what, e)
	}
	return fmt.Errorf("occl: rank %d: %s: %s: %w", b.rank, b.what, what, e)
}

// MaxRanks is the most ranks a communicator can have (Init refuses more).
const MaxRanks = wire.MaxRanks

// joinerHello is the rank a joiner claims in its rendezvous handshake,
// before it has one: no rank can be this large.
const joinerHello = wire.MaxRanks

// rendezvous joins rank 0 (serving the rendezvous on rank 0): it connects
// to rank 0, opens the data listener on the interface that reached rank 0,
// sends this rank's join and receives the table of all ranks.
func (b *tcpBootstrap) rendezvous(ctx context.Context, rootLn *tcp.Listener) error {
	id, rank, size, log := b.id, b.rank, b.size, b.log
	secret := id.Secret[:]
	if rank == 0 && !id.Authenticated() && rootLn == nil {
		log.Warn("occl: authentication is off: no secret was given, so any process that reaches the rendezvous or a data listener can join; set OCCL_SECRET (32 hex digits) or OCCL_SECRET_FILE on every rank, or pass a unique id (OCCL_UNIQUE_ID, comm.NewUniqueID)",
			"rendezvous", id.Addr)
	}
	if rank == 0 {
		ln := rootLn
		if ln == nil {
			var err error
			ln, err = tcp.Listen(id.Addr, secret, listenFilter(tcp.PurposeRendezvous, b.commID), log)
			if err != nil {
				return b.wrap("serve rendezvous", err)
			}
		}
		b.rv = startRendezvous(ctx, ln, rendezvousSpec{size: size, members: b.members, end: b.rvEnd, place: b.placeJoiner}, log)
	}

	from := rank
	if rank == wire.AnyRank {
		from = joinerHello
	}
	tc, err := tcp.Dial(ctx, id.Addr, secret, tcp.Hello{Purpose: tcp.PurposeRendezvous, Comm: b.commID, From: from, To: 0, NStreams: 1})
	if err != nil {
		return b.wrap("rendezvous with rank 0", err)
	}
	if b.ctrlConn, err = tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{}); err != nil {
		return b.wrap("rendezvous", err)
	}

	host := b.listenHost
	if host == "" {
		host = tc.LocalAddr().(*net.TCPAddr).IP.String()
	}
	if b.dataLn, err = tcp.Listen(net.JoinHostPort(host, "0"), secret, listenFilter(tcp.PurposeData, b.commID), log); err != nil {
		return b.wrap("data listener", err)
	}

	join := wire.Msg{Type: wire.Join, Rank: rank, Size: size,
		Info: wire.RankInfo{HostID: b.cfg.hostID, Addr: b.dataLn.Addr().String(), PID: os.Getpid()}}
	if err = sendMsg(ctx, b.ctrlConn, &join); err != nil {
		return b.wrap("send join to rank 0", err)
	}
	m, _, err := recvMsg(ctx, b.ctrlConn, nil)
	received := time.Now()
	if err != nil {
		if rank == wire.AnyRank && ctx.Err() != nil {
			return b.wrap("wait for the rank table from rank 0 (the grow had not completed: members or other joiners had not arrived)", err)
		}
		return b.wrap("wait for the rank table from rank 0", err)
	}
	switch {
	case m.Type == wire.Reject:
		return b.wrap("rank 0 refused the join", errors.New(m.Text))
	case m.Type != wire.Table || len(m.Ranks) == 0 || (rank != wire.AnyRank && (len(m.Ranks) != size || m.Rank != rank)):
		return b.wrap("rendezvous", fmt.Errorf("unexpected reply (type %d, %d ranks, rank %d)", m.Type, len(m.Ranks), m.Rank))
	case rank == wire.AnyRank:
		if err := b.assigned(m.Rank, len(m.Ranks), m.Ranks[m.Rank].HostID); err != nil {
			return err
		}
		size = b.size
	}
	b.nonce = m.Nonce
	b.clockOffset = time.Duration(m.Clock - received.UnixNano())
	b.hostIDs = make([]string, size)
	b.addrs = make([]string, size)
	for r, info := range m.Ranks {
		b.hostIDs[r] = info.HostID
		b.addrs[r] = info.Addr
	}
	if b.gone != nil {
		b.gone.known(b.commID, secret, b.addrs)
	}
	return nil
}

// assigned takes the rank and size rank 0's table gave a joiner, and the
// host identity rank 0 recorded for it (virtual under a topology).
func (b *tcpBootstrap) assigned(rank, size int, hostID string) error {
	b.rank, b.size, b.members = rank, size, size
	b.cfg.hostID = hostID
	b.setLog()
	if err := b.cfg.checkTopology(size); err != nil {
		return b.wrap("the communicator joined", err)
	}
	b.log.Info("occl: joined", "rank", rank, "size", size)
	return nil
}

// placeJoiner returns the host identity of a joiner given rank rank whose
// own is hostID: under a topology, the virtual host of that rank.
func (b *tcpBootstrap) placeJoiner(rank int, hostID string) string {
	if b.cfg.topology == nil {
		return hostID
	}
	return virtualHostID(hostID, b.cfg.topology, rank)
}

// placeProcess binds this process to its share of the machine's CPUs if
// asked to, and notes whether the machine has more local ranks than CPUs.
// CPUs are shared by the processes of a machine, whatever emulated hosts
// the topology puts them on.
func (b *tcpBootstrap) placeProcess() {
	local, localSize := localPosition(b.rank, machineIDs(b.hostIDs))
	if b.cfg.affinity {
		bindLocal(local, localSize, b.log)
	}
	if b.cfg.oversubscribed = oversubscribed(localSize, topo.OnlineCPUs()); b.cfg.oversubscribed {
		b.log.Info("occl: more local ranks than CPUs; waits do not poll", "local_size", localSize)
	}
	b.cfg.cpus = rankCPUs(topo.OnlineCPUs(), localSize, b.cfg.cpus)
}

// rankCPUs returns the CPUs a rank may keep busy when localSize ranks
// share a machine of cpus CPUs (each in its own process), at least 1 and
// at most this process's GOMAXPROCS and atMost (0: no bound). A
// communicator made from another (Split, Shrink, Grow) passes its parent's
// share as atMost: a Split's ranks on a machine are fewer than the
// processes running there. A rank's schedules send from a helper
// goroutine while they receive only when it is more than one: else the
// helper takes a CPU from another rank of the machine (a 1 MiB AllReduce
// of two ranks on two CPUs, each process at GOMAXPROCS 2, took twice as
// long with helpers as inline).
func rankCPUs(cpus, localSize, atMost int) int {
	n := min(runtime.GOMAXPROCS(0), cpus/max(localSize, 1))
	if atMost > 0 {
		n = min(n, atMost)
	}
	return max(1, n)
}

// connect opens the data connections to every other rank, with the
// transport chosen for each pair, and wraps them in the emulated fabric if
// the configuration asks for one.
func (b *tcpBootstrap) connect(ctx context.Context) error {
	rank, cfg := b.rank, b.cfg
	peers := make([]tcp.Endpoint, 0, b.size-1)
	for r, addr := range b.addrs {
		if r != rank {
			peers = append(peers, tcp.Endpoint{Rank: r, Addr: addr})
		}
	}
	hostIDs := b.hostIDs
	var err error
	noCMA, cmaMin, cmaSend := cfg.shmCMA()
	b.links, err = setup.Connect(ctx, setup.Config{Policy: cfg.transport,
		Mesh: tcp.MeshConfig{Self: rank, Comm: b.commID, Epoch: 0, Secret: b.id.Secret[:],
			Streams: cfg.streams, Options: cfg.tcpOptions(), Listener: b.dataLn},
		SameHost: func(r int) bool { return hostIDs[r] == hostIDs[rank] },
		NoCMA:    noCMA, CMAThreshold: cmaMin, CMASend: cmaSend, CMAOffer: cfg.shmOffer(), CMAWhole: cfg.shmWhole(), CMARing: cfg.shmRing(), ShmSpin: cfg.shmSpin(), ShmLazy: cfg.lazyRings, Log: b.log}, peers)
	if err != nil {
		return b.wrap("connect", err)
	}
	if b.fabric, err = emulate(cfg, b.commID, false); err == nil {
		err = setup.Emulate(b.fabric, rank, b.links)
	}
	if err != nil {
		return b.wrap("emulation", err)
	}
	return nil
}

// start starts the control plane (rank 0 serves it over the rendezvous
// connections once every rank has joined) and makes the communicator,
// which takes over everything the bootstrap opened.
func (b *tcpBootstrap) start(ctx context.Context, fabricRanks []int) (*Communicator, error) {
	conns := make([]transport.Conn, b.size)
	for r, conn := range b.links {
		conns[r] = conn
	}
	var server *ctrlServer
	if b.rv != nil {
		ctrlConns, err := b.rv.wait(ctx)
		if err != nil {
			return nil, b.wrap("rendezvous", err)
		}
		server = newCtrlServer(ctrlConns, b.cfg, b.base)
	}
	client := newCtrlClient(b.rank, b.ctrlConn, server, b.cfg, b.base)
	lk := &tcpLinker{ln: b.dataLn, secret: b.id.Secret, cfg: b.cfg, addrs: b.addrs, fabric: b.fabric}
	c := newCommunicator(newPlacement(b.commID, b.nonce, b.rank, b.hostIDs, fabricRanks), conns, client, lk, b.cfg)
	if b.rank != 0 {
		c.obs.setClockOffset(b.clockOffset)
	}
	client.start(c)
	ready := []any{"hosts", c.NumHosts(), "local_rank", c.localRank, "local_size", c.localSize}
	if on, of := c.SingleCopy(); of > 0 {
		// Fewer than all: turned off, or the system refused some (see
		// SingleCopy); the first reason says which.
		ready = append(ready, "single_copies", fmt.Sprintf("%d/%d", on, of))
		if on < of {
			ready = append(ready, "single_copy_off", c.singleCopyOff())
		}
	}
	b.log.Info("occl: communicator ready", ready...)
	if c.localSize > 1 {
		logSharedPolicy(b.log)
	}
	return c, nil
}

// abandon releases what the steps so far opened, after a step failed.
func (b *tcpBootstrap) abandon() {
	for _, conn := range b.links {
		conn.Close()
	}
	if b.fabric != nil {
		b.fabric.Close()
	}
	if b.dataLn != nil {
		b.dataLn.Close()
	}
	if b.ctrlConn != nil {
		b.ctrlConn.Close()
	}
	if b.rv != nil {
		b.rv.abort()
	}
}

// oversubscribed says whether localSize ranks on a machine of cpus CPUs
// are more than it has cores. Then a rank polling a socket, or the clock of
// the emulated fabric, would take the core from the rank about to send to
// it, so waits sleep at once (TCP reads in the netpoller, emulated links
// in nanosleep).
func oversubscribed(localSize, cpus int) bool { return localSize > cpus }

// bindLocal pins this process, local rank local of n, to its share of the
// host's CPUs.
func bindLocal(local, n int, log *slog.Logger) {
	allowed, err := topo.AllowedCPUs()
	if err == nil {
		cpus := topo.CPUShare(allowed, local, n)
		if err = topo.BindProcess(cpus); err == nil {
			log.Info("occl: bound to CPUs", "cpus", cpus, "local_rank", local, "local_size", n)
			return
		}
	}
	log.Warn("occl: could not bind to CPUs", "err", err)
}

// rendezvous is rank 0's side of the bootstrap: it collects one join from
// every rank, checks them, and answers each with the table of all ranks.
// Ranks below spec.members join by number; a join with wire.AnyRank (a
// joiner, see Join) gets the next of the ranks from spec.members up, and
// is refused once they are all taken.
type rendezvous struct {
	ln     *tcp.Listener
	spec   rendezvousSpec
	result chan rendezvousResult
	cancel context.CancelFunc
}

// rendezvousSpec is what a rendezvous expects.
type rendezvousSpec struct {
	size    int
	members int       // ranks that join by number; the rest are joiners'
	end     time.Time // if set, when to stop waiting (else the context's deadline)
	// place returns the host identity to record for a joiner given rank
	// rank whose own is hostID (nil: keep it).
	place func(rank int, hostID string) string
	// published, if set, runs once the result is out, before anything
	// else the rendezvous does (tests hold the rendezvous there).
	published func()
}

// refuseTimeout bounds the sending of a refusal to a rank.
const refuseTimeout = time.Second

type rendezvousResult struct {
	conns []*tcp.Conn
	err   error
}

type joinReq struct {
	conn *tcp.Conn
	msg  wire.Msg
	err  error
}

func startRendezvous(ctx context.Context, ln *tcp.Listener, spec rendezvousSpec, log interface {
	Warn(string, ...any)
}) *rendezvous {
	var cancel context.CancelFunc
	if spec.end.IsZero() {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithDeadline(ctx, spec.end)
	}
	rv := &rendezvous{ln: ln, spec: spec, result: make(chan rendezvousResult, 1), cancel: cancel}
	go rv.run(ctx, log)
	return rv
}

func (rv *rendezvous) run(ctx context.Context, log interface{ Warn(string, ...any) }) {
	// The listener closes before the result is published: once Init
	// returns, the rendezvous address is free for the next job to bind.
	defer rv.ln.Close()
	publish := func(r rendezvousResult) {
		rv.ln.Close()
		rv.result <- r
		if rv.spec.published != nil {
			rv.spec.published()
		}
	}
	size, members := rv.spec.size, rv.spec.members
	conns := make([]*tcp.Conn, size)
	infos := make([]wire.RankInfo, size)
	joins := make(chan joinReq)
	joined := 0
	next := members // the rank the next joiner gets
	// over is closed when the rendezvous has succeeded; late then says
	// why a join that comes after is refused.
	over := make(chan struct{})
	var late string
	refuse := func(conn *tcp.Conn, why string) {
		log.Warn("occl: rendezvous refused a rank", "reason", why)
		// The refusal says why the rendezvous ended, so it is sent
		// even when the rendezvous ended because its context did.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refuseTimeout)
		sendMsg(sctx, conn, &wire.Msg{Type: wire.Reject, Text: why})
		cancel()
		conn.Close()
	}
	fail := func(err error) {
		for _, conn := range conns {
			if conn != nil {
				refuse(conn, err.Error())
			}
		}
		publish(rendezvousResult{err: err})
	}
	go func() {
		for {
			a, err := rv.ln.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				conn, err := tcp.NewConn([]*net.TCPConn{a.Conn}, tcp.Options{})
				if err != nil {
					a.Conn.Close()
					return
				}
				rctx, cancel := context.WithTimeout(ctx, tcp.HandshakeTimeout)
				defer cancel()
				m, _, err := recvMsg(rctx, conn, nil)
				if err == nil && m.Type != wire.Join {
					err = fmt.Errorf("expected a join, got message type %d", m.Type)
				}
				if err == nil && m.Rank != a.Hello.From && (m.Rank != wire.AnyRank || a.Hello.From != joinerHello) {
					err = fmt.Errorf("joined as rank %d but authenticated as rank %d", m.Rank, a.Hello.From)
				}
				select {
				case joins <- joinReq{conn: conn, msg: m, err: err}:
				case <-over:
					switch {
					case err != nil:
						refuse(conn, err.Error())
					case m.Rank == wire.AnyRank:
						refuse(conn, fmt.Sprintf("%s (pid %d came after them)", late, m.Info.PID))
					default:
						refuse(conn, fmt.Sprintf("rank %d: %s", m.Rank, late))
					}
				case <-ctx.Done():
					conn.Close()
				}
			}()
		}
	}()
	for joined < size {
		select {
		case <-ctx.Done():
			var missing []int
			for r, conn := range conns[:members] {
				if conn == nil {
					missing = append(missing, r)
				}
			}
			switch {
			case members == size:
				fail(fmt.Errorf("rendezvous did not complete: ranks %v did not join: %w", missing, ctx.Err()))
			case len(missing) == 0:
				fail(fmt.Errorf("rendezvous did not complete: %d of %d joiners arrived: %w", next-members, size-members, ctx.Err()))
			default:
				fail(fmt.Errorf("rendezvous did not complete: %d of %d joiners arrived, and members %v did not join: %w", next-members, size-members, missing, ctx.Err()))
			}
			return
		case j := <-joins:
			switch {
			case j.err != nil:
				refuse(j.conn, j.err.Error())
			case j.msg.Rank == wire.AnyRank && members == size:
				refuse(j.conn, fmt.Sprintf("this communicator of %d ranks takes no joiners", size))
			case j.msg.Rank == wire.AnyRank && next == size:
				refuse(j.conn, fmt.Sprintf("the communicator already has all %d of its joiners (pid %d came after them)", size-members, j.msg.Info.PID))
			case j.msg.Rank == wire.AnyRank && j.msg.Size != 0:
				refuse(j.conn, fmt.Sprintf("a joiner says the communicator has %d ranks; it cannot know", j.msg.Size))
			case j.msg.Rank == wire.AnyRank:
				if rv.spec.place != nil {
					j.msg.Info.HostID = rv.spec.place(next, j.msg.Info.HostID)
				}
				conns[next] = j.conn
				infos[next] = j.msg.Info
				next++
				joined++
			case j.msg.Size != size:
				refuse(j.conn, fmt.Sprintf("rank %d says the communicator has %d ranks, rank 0 says %d", j.msg.Rank, j.msg.Size, size))
			case j.msg.Rank < 0 || j.msg.Rank >= members:
				refuse(j.conn, fmt.Sprintf("rank %d out of range for %d ranks joining by number", j.msg.Rank, members))
			case conns[j.msg.Rank] != nil:
				refuse(j.conn, fmt.Sprintf("rank %d joined twice (pids %d and %d)", j.msg.Rank, infos[j.msg.Rank].PID, j.msg.Info.PID))
			default:
				conns[j.msg.Rank] = j.conn
				infos[j.msg.Rank] = j.msg.Info
				joined++
			}
		}
	}
	table := wire.Msg{Type: wire.Table, Ranks: infos}
	if _, err := rand.Read(table.Nonce[:]); err != nil {
		for _, conn := range conns {
			conn.Close()
		}
		publish(rendezvousResult{err: fmt.Errorf("job nonce: %w", err)})
		return
	}
	for r, conn := range conns {
		table.Rank = r
		table.Clock = time.Now().UnixNano()
		if err := sendMsg(ctx, conn, &table); err != nil {
			for _, conn := range conns {
				conn.Close()
			}
			publish(rendezvousResult{err: fmt.Errorf("send the rank table to rank %d: %w", r, err)})
			return
		}
	}
	// Joins accepted meanwhile get an answer too: a joiner too many is
	// refused instead of waiting for a table that will not come. Their
	// goroutines end within the handshake timeout; then the context goes.
	late = "the rendezvous is complete"
	if members < size {
		late = fmt.Sprintf("the communicator already has all %d of its joiners", size-members)
	}
	close(over)
	publish(rendezvousResult{conns: conns})
	time.AfterFunc(tcp.HandshakeTimeout, rv.cancel)
}

// wait returns the control connections to every rank once all have joined.
func (rv *rendezvous) wait(ctx context.Context) ([]*tcp.Conn, error) {
	select {
	case r := <-rv.result:
		return r.conns, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// abort stops a rendezvous that will not be used.
func (rv *rendezvous) abort() {
	rv.cancel()
	go func() {
		r := <-rv.result
		for _, c := range r.conns {
			c.Close()
		}
	}()
}

// linker opens a communicator's links beyond those its bootstrap opened:
// the connections a rewire replaces, and the communicators of a Split, each
// with links of its own. The bootstrap (TCP or in-process) chooses it.
type linker interface {
	// split creates this rank's communicator for a Split group. Every rank
	// of the parent calls it in the same operation; group lists the parent
	// ranks of this rank's group in new-rank order (nil for ranks that
	// take part in no group), and self is this rank's index in it.
	split(ctx context.Context, p *opPeers, childID uint64, group []int, self int) (*Communicator, error)
	// release frees what the linker holds (its emulated fabric too) when
	// the communicator closes.
	release()
	// connect opens new connections of generation gen (a rewire attempt)
	// between this rank and peers (every peer calls it with this rank in
	// its list).
	connect(ctx context.Context, c *Communicator, gen uint32, peers []int) (map[int]transport.Conn, error)
	// emulator returns the emulated fabric shaping the connections, or
	// nil.
	emulator() *emu.Fabric
}

// tcpLinker is the linker of communicators bootstrapped over TCP. It opens
// new connections through the data listeners, and splits as follows: the
// leader of each group binds a rendezvous listener, leaders' addresses are
// exchanged over the parent, and each group bootstraps like Init with a
// secret derived from the parent's.
type tcpLinker struct {
	ln     *tcp.Listener
	secret [16]byte
	cfg    config
	addrs  []string    // every rank's data listener
	fabric *emu.Fabric // the emulated fabric of this rank's links, if any
}

// connect opens connections of generation gen to peers through the data
// listeners, with the transport package setup chooses for each pair, and
// wrapped by the communicator's emulated fabric if it has one.
func (f *tcpLinker) connect(ctx context.Context, c *Communicator, gen uint32, peers []int) (map[int]transport.Conn, error) {
	eps := make([]tcp.Endpoint, 0, len(peers))
	for _, r := range peers {
		eps = append(eps, tcp.Endpoint{Rank: r, Addr: f.addrs[r]})
	}
	noCMA, cmaMin, cmaSend := f.cfg.shmCMA()
	return setup.Connect(ctx, setup.Config{Policy: f.cfg.transport,
		Mesh: tcp.MeshConfig{Self: c.rank, Comm: c.id, Epoch: gen, Secret: f.secret[:],
			Streams: f.cfg.streams, Options: f.cfg.tcpOptions(), Listener: f.ln},
		SameHost: c.sameHost,
		NoCMA:    noCMA, CMAThreshold: cmaMin, CMASend: cmaSend, CMAOffer: f.cfg.shmOffer(), CMAWhole: f.cfg.shmWhole(), CMARing: f.cfg.shmRing(), ShmSpin: f.cfg.shmSpin(), Emulation: f.fabric, Log: logx.For(c.log, logx.Rewire)}, eps)
}

func (f *tcpLinker) emulator() *emu.Fabric { return f.fabric }

func (f *tcpLinker) release() {
	if f.fabric != nil {
		f.fabric.Close()
	}
	f.ln.Close()
}

func (f *tcpLinker) split(ctx context.Context, p *opPeers, childID uint64, group []int, self int) (*Communicator, error) {
	c := p.c
	const addrLen = 64
	var rootLn *tcp.Listener
	var child UniqueID
	child.Secret = deriveSecret(f.secret, childID)
	mine := make([]byte, addrLen)
	if group != nil && self == 0 {
		host, _, _ := net.SplitHostPort(f.ln.Addr().String())
		ln, err := tcp.Listen(net.JoinHostPort(host, "0"), child.Secret[:],
			listenFilter(tcp.PurposeRendezvous, commIDOf(child)), logx.For(c.log, logx.Init))
		if err != nil {
			return nil, fmt.Errorf("split: rendezvous listener: %w", err)
		}
		rootLn = ln
		copy(mine, ln.Addr().String())
	}
	all := make([]byte, addrLen*c.size)
	if err := allGatherBytes(ctx, p, mine, all); err != nil {
		if rootLn != nil {
			rootLn.Close()
		}
		return nil, err
	}
	if group == nil {
		return nil, nil
	}
	leader := group[0]
	child.Addr = string(trimZero(all[leader*addrLen : (leader+1)*addrLen]))
	cfg := f.cfg
	cfg.fabricRanks = nil // the child's are given apart: its topology is subset already
	if p.c.cfg.topology != nil {
		cfg.topology = p.c.cfg.topology.Subset(group)
	}
	return initTCP(ctx, child, self, len(group), cfg, rootLn, c.groupFabricRanks(group))
}

func trimZero(b []byte) []byte {
	for i, x := range b {
		if x == 0 {
			return b[:i]
		}
	}
	return b
}

func deriveSecret(parent [16]byte, childID uint64) [16]byte {
	h := sha256.New()
	h.Write(parent[:])
	h.Write([]byte("occl-split"))
	binary.Write(h, binary.LittleEndian, childID)
	var s [16]byte
	copy(s[:], h.Sum(nil))
	return s
}

// logSharedPolicy says, once per process, when the system keeps shared
// buffers of occl's allocator (hugemem, occlMemAlloc, occl.torch.empty)
// from 2 MiB on 4 KiB pages: its transparent huge-page policy for shared
// memory forbids huge pages (see hugemem.SharedPolicy).
func logSharedPolicy(log *slog.Logger) {
	sharedPolicyOnce.Do(func() {
		policy, huge := hugemem.SharedPolicy()
		noteSharedPolicy(log, policy, huge)
	})
}

// noteSharedPolicy logs the policy if it is known and forbids huge pages.
func noteSharedPolicy(log *slog.Logger, policy string, huge bool) {
	if !huge && policy != "" {
		log.Info("occl: shared buffers on 4 KiB pages; 'advise' in the policy file gives them huge pages",
			"shmem_enabled", policy, "file", hugemem.SharedPolicyFile)
	}
}

// sharedPolicyOnce makes logSharedPolicy log once per process.
var sharedPolicyOnce sync.Once
