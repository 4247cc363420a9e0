package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/tcp"
)

// ErrGrow is wrapped by the errors of a Grow that failed after its members
// agreed to grow (a joiner did not come in time, or the bootstrap of the
// grown communicator failed): the communicator Grow was called on is not
// affected and stays usable.
var ErrGrow = errors.New("grow failed; the communicator keeps running")

// Grow makes a communicator of this communicator's ranks and n processes
// that join it with Join: a spare process takes the place of a failed rank
// (after a shrink) or adds capacity to a running job. It is a collective:
// every rank of c calls it with the same id and n, and it is queued like
// any operation, so the new communicator is made at an operation boundary,
// after the operations issued before it.
//
// Rank 0 of c serves the rendezvous at id.Addr, so id must name an address
// of rank 0's host: make it there, e.g. with NewUniqueID, and hand it (its
// String form) to the joiners through the application (a file, a key-value
// store, the launcher). Joiners present id's secret, as every rank of Init
// does, and a process without it is refused without taking a joiner's
// place. The members keep their ranks 0..Size()-1; the joiners get ranks
// Size()..Size()+n-1 in the order they reach the rendezvous. The new
// communicator authenticates its connections with id's secret.
//
// The new communicator has c's options, with opts applied over them. If c
// has a topology, opts must give the grown one (WithTopology, with
// Size()+n ranks, in which the members keep their places); a topology of
// the wrong size fails at once. Joiners must be given the same topology.
// Grow on a communicator made for part of a fabric (Split,
// WithFabricRanks) is not supported; one made by Shrink grows (a spare
// taking a failed rank's place), and the grown communicator spans the
// topology given, as one made by Init does.
//
// Invalid arguments (n below 1 or too large, an option that Init would
// reject, a topology of the wrong size) fail Grow at once with an error
// wrapping ErrInvalidArgument on the rank that passed them, before
// anything is started, and leave c usable, as for any operation (Split's
// color, a collective's buffers). Options are each rank's own, so a rank
// whose options are invalid fails alone: its call does not count as its
// part of the collective, which it may take by calling Grow again with
// valid ones; if it calls another collective instead, the ranks fail
// with ErrMismatch.
//
// c stays usable, as after Split: the caller usually moves to the new
// communicator and closes c. If the joiners do not all arrive before the
// members' deadlines, Grow fails on every member with an error wrapping
// ErrGrow and saying how many of the n joiners arrived (rank 0 stops
// waiting shortly before the earliest member's deadline so that every
// rank hears it), and c keeps running. In-process communicators (NewLocal)
// grow with GrowLocal; Grow returns an error wrapping errors.ErrUnsupported
// for them.
func (c *Communicator) Grow(ctx context.Context, id UniqueID, n int, opts ...Option) (*Communicator, error) {
	const name = "Grow"
	lk, ok := c.linker.(*tcpLinker)
	if !ok {
		return nil, &OpError{Rank: c.rank, Op: name, Err: fmt.Errorf("in-process communicators (NewLocal) grow with GrowLocal: %w", errors.ErrUnsupported)}
	}
	cfg, err := c.growConfig(n, opts)
	if err != nil {
		return nil, &OpError{Rank: c.rank, Op: name, Err: err}
	}
	// The id's hash in the root field: members given different ids
	// fail with a mismatch instead of waiting at different rendezvous.
	hdr := collHeader(algo.OpGrow, 0, 0, 0, n)
	hdr.Root = uint32(commIDOf(id))
	return c.grow(ctx, name, hdr, func(ctx context.Context, p *opPeers) (*Communicator, error) {
		return lk.grow(ctx, p, id, n, cfg)
	})
}

// GrowLocal is Grow for in-process communicators (NewLocal): every rank
// of c calls it with the same n, and gets its communicator of the grown
// group, in which it keeps its rank; rank 0 also gets the joiners' n
// communicators (ranks Size() to Size()+n-1), to drive from goroutines of
// their own, as NewLocal's. Options, topology and invalid arguments are
// as for Grow. On a communicator made over TCP it returns an error
// wrapping errors.ErrUnsupported: use Grow there.
func (c *Communicator) GrowLocal(ctx context.Context, n int, opts ...Option) (grown *Communicator, joiners []*Communicator, err error) {
	const name = "GrowLocal"
	lk, ok := c.linker.(*localLinker)
	if !ok {
		return nil, nil, &OpError{Rank: c.rank, Op: name, Err: fmt.Errorf("communicators made over TCP grow with Grow and Join: %w", errors.ErrUnsupported)}
	}
	cfg, err := c.growConfig(n, opts)
	if err != nil {
		return nil, nil, &OpError{Rank: c.rank, Op: name, Err: err}
	}
	grown, err = c.grow(ctx, name, collHeader(algo.OpGrow, 0, 0, 0, n), func(ctx context.Context, p *opPeers) (*Communicator, error) {
		var err error
		var g *Communicator
		g, joiners, err = lk.reg.grow(p, growID(c.id, p.hdr.Seq), n, cfg)
		return g, err
	})
	if err != nil {
		for _, j := range joiners {
			j.Abort()
		}
		return nil, nil, err
	}
	return grown, joiners, nil
}

// growConfig checks the arguments of a grow by n ranks and returns the
// grown communicator's configuration: c's, with opts applied over it and
// checked as Init and NewLocal check theirs. It runs before the grow is
// queued, so that invalid arguments fail on the calling rank alone, with
// an error wrapping ErrInvalidArgument, and start nothing.
func (c *Communicator) growConfig(n int, opts []Option) (config, error) {
	switch {
	case n < 1 || n > wire.MaxRanks-c.size: // not c.size+n, which a huge n overflows
		return config{}, invalidf("%d joiners for a communicator of %d ranks (at most %d ranks)", n, c.size, wire.MaxRanks)
	case c.fabricRanks != nil && c.shrinks == 0:
		return config{}, invalidf("a communicator made for part of a fabric (Split, WithFabricRanks) cannot grow")
	}
	cfg := c.cfg
	if cfg.topology != nil {
		// The bootstrap places this rank on its virtual host again.
		cfg.hostID = machineIDs([]string{cfg.hostID})[0]
	}
	for _, o := range opts {
		o(&cfg)
	}
	// The checks of Init and NewLocal: an option they refuse would
	// otherwise make a communicator that fails (a timeout of 0) or
	// crashes the process (a heartbeat interval of 0).
	if err := cfg.finish(); err != nil {
		return config{}, fmt.Errorf("the grown communicator: %w", err)
	}
	if err := cfg.checkTopology(c.size + n); err != nil {
		return config{}, fmt.Errorf("the grown communicator: %w", err)
	}
	return cfg, nil
}

// grow runs mk as an operation of c and returns the communicator it
// made, which inherits c's observer.
func (c *Communicator) grow(ctx context.Context, name string, hdr transport.Header, mk func(context.Context, *opPeers) (*Communicator, error)) (*Communicator, error) {
	var grown *Communicator
	r := c.postCall(ctx, name, hdr, func(ctx context.Context, p *opPeers) error {
		cc, err := mk(ctx, p)
		if cc != nil {
			cc.inheritObserver(c)
		}
		grown = cc
		return err
	})
	if err := wait(r); err != nil {
		if grown != nil {
			grown.Abort()
		}
		return nil, err
	}
	return grown, nil
}

// growID names the communicator a GrowLocal makes.
func growID(parent, seq uint64) uint64 { return childID(parent, seq, -2) }

// growAgreement is what the members of a Grow exchange over the
// communicator before they bootstrap the grown one: whether rank 0 serves
// the rendezvous, and how long each member's context leaves.
const growAgreement = 1 + 8

// grow is the members' side of Grow (see Communicator.Grow). Rank 0 binds
// the rendezvous at id.Addr; the members tell each other whether it could
// and how long their contexts leave; then every member bootstraps the grown
// communicator with its own rank, and rank 0's rendezvous hands the ranks
// from c.size up to the joiners.
func (f *tcpLinker) grow(ctx context.Context, p *opPeers, id UniqueID, n int, cfg config) (*Communicator, error) {
	c := p.c
	var rootLn *tcp.Listener
	var bindErr error
	mine := make([]byte, growAgreement)
	if c.rank == 0 {
		rootLn, bindErr = tcp.Listen(id.Addr, id.Secret[:], listenFilter(tcp.PurposeRendezvous, commIDOf(id)), logx.For(c.log, logx.Init))
		if bindErr == nil {
			mine[0] = 1
		}
	}
	dl, _ := ctx.Deadline() // the worker gives every operation one
	binary.LittleEndian.PutUint64(mine[1:], uint64(time.Until(dl)))
	all := make([]byte, growAgreement*c.size)
	if err := allGatherBytes(ctx, p, mine, all); err != nil {
		if rootLn != nil {
			rootLn.Close()
		}
		return nil, err
	}
	// From here on nothing travels on c's links: a failure is the grow's
	// alone, and what the members wait for is the grown communicator's
	// bootstrap, not the peer of their agreement (the stall report would
	// name it).
	c.hist.wait(-1)
	switch {
	case bindErr != nil:
		return nil, fmt.Errorf("%w: serve the rendezvous at %s: %v", ErrGrow, id.Addr, bindErr)
	case all[0] != 1:
		return nil, fmt.Errorf("%w: rank 0 could not serve the rendezvous at %s", ErrGrow, id.Addr)
	}
	left := time.Duration(1<<63 - 1)
	for r := range c.size {
		left = min(left, time.Duration(binary.LittleEndian.Uint64(all[growAgreement*r+1:])))
	}
	b, err := newTCPBootstrap(id, c.rank, c.size+n, cfg)
	if err != nil {
		if rootLn != nil {
			rootLn.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrGrow, err)
	}
	b.what = "grow"
	b.members = c.size
	// Rank 0 stops waiting for the joiners a little before the earliest
	// member's deadline, and tells every rank how many came.
	b.rvEnd = time.Now().Add(left - min(left/4, 2*time.Second))
	cc, err := b.run(ctx, rootLn, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGrow, err)
	}
	return cc, nil
}

// Join joins, as a new rank, the communicator that the ranks of a running
// communicator make with Grow(ctx, id, n): it connects to the rendezvous at
// id.Addr, presents id's secret like any rank, and learns its rank (from
// the old size up, in the order the joiners arrive) and the size from the
// rank table. It returns when the grown communicator is ready, or fails
// when ctx ends (the configured timeout applies if ctx has no deadline),
// when rank 0 refuses it (every joiner's place is taken, or the grow gave
// up: the error says how many joiners arrived), or at once on a wrong
// secret. It may be called before the members call Grow: it retries until
// rank 0 serves the rendezvous. opts are those of Init; a topology must
// be the grown communicator's (the one the members pass to Grow).
func Join(ctx context.Context, id UniqueID, opts ...Option) (*Communicator, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b, err := newJoinBootstrap(id, cfg)
	if err != nil {
		return nil, err
	}
	return b.run(ctx, nil, nil)
}
