// Package setup decides which transport joins two ranks and sets the
// connections up. It is the one place that knows every transport: a
// communicator describes the ranks it connects (Config) and gets back one
// transport.Conn per peer, at bootstrap and when a rewire opens new links.
//
// Every pair is first joined by TCP (package tcp: the lower rank dials,
// the connection is authenticated). Then, for each peer, the table of
// transports is read in order and the first whose canConnect accepts the
// pair sets its connection up over (and watching) the TCP one, as NCCL's
// transport selection does (canConnect, then connect):
//
//	rdma  every pair, when the policy is PolicyRDMA (no fallback)
//	shm   ranks of one host, unless the policy is PolicyTCP or PolicyRDMA
//	      (PolicyAuto keeps TCP for a pair where shared memory is
//	      unavailable; PolicySHM fails for ranks on different hosts)
//	tcp   every other pair: the TCP connection itself
//
// Emulation (package emu) is a layer, not a transport: when Config has an
// emulated fabric, whatever connection the table chose is wrapped in it.
//
// To add a transport: write its Connect over a transport.Conn (as shm and
// rdma do: a setup exchange on the TCP connection, which the new
// connection then watches), give its Conn a Name method, and add a row to
// the table in this file with the pairs it can join.
package setup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
	"github.com/occl/occl/transport/rdma"
	"github.com/occl/occl/transport/shm"
	"github.com/occl/occl/transport/tcp"
)

// Policies: which transports a communicator may use.
const (
	// PolicyAuto uses shared memory between ranks of one host and TCP
	// between hosts.
	PolicyAuto = "auto"
	// PolicyTCP uses TCP between every pair.
	PolicyTCP = "tcp"
	// PolicySHM requires shared memory between every pair (all ranks on
	// one host).
	PolicySHM = "shm"
	// PolicyRDMA uses RDMA verbs between every pair, on the device
	// OCCL_IB_HCA and OCCL_IB_GID_INDEX select (OCCL_IB_EMULATE=1:
	// emulated verbs), shaped by the OCCL_IB_* settings. There is no
	// fallback.
	PolicyRDMA = "rdma"
)

// Config describes the connections one rank opens.
type Config struct {
	// Policy is PolicyAuto, PolicyTCP, PolicySHM or PolicyRDMA.
	Policy string
	// Mesh configures the TCP connections; its Self, Comm and Epoch also
	// label the other transports' setup.
	Mesh tcp.MeshConfig
	// SameHost reports whether peer runs on this rank's host.
	SameHost func(peer int) bool
	// NoCMA turns shm's single copy by cross-memory attach off
	// (shm.Config.NoCMA).
	NoCMA bool
	// CMAThreshold is the smallest message shm lends, or sends by
	// descriptor with CMASend (shm.Config.CMAThreshold; 0: shm's
	// default).
	CMAThreshold int
	// CMASend makes shm send every message of CMAThreshold bytes or more
	// by descriptor, not only lend them (shm.Config.SendByDescriptor).
	CMASend bool
	// CMAOffer is the smallest message shm offers (shm.Config.OfferThreshold;
	// 0: none).
	CMAOffer int
	// CMAWhole is the smallest message shm lends where its receiver takes
	// it whole (shm.Config.WholeLendThreshold; 0: from CMAThreshold).
	CMAWhole int
	// CMARing is the smallest message taken whole that shm sends through
	// its ring unless it lies in a shared buffer
	// (shm.Config.WholeRingThreshold; 0: none).
	CMARing int
	// ShmSpin is how long shm's waits poll before they sleep (shm.Config.Spin).
	ShmSpin time.Duration
	// ShmLazy maps shm rings page by page as they are first touched
	// (shm.Config.Lazy).
	ShmLazy bool
	// Emulation, if set, shapes every connection (it keeps ownership of
	// none: the returned connections own what they wrap).
	Emulation *emu.Fabric
	// Log receives the choices made (nil: discard).
	Log *slog.Logger
}

// kind is one row of the table: a transport and the pairs it joins.
type kind struct {
	name string
	// canConnect reports whether this transport joins this rank and peer
	// (sameHost: on one host) under policy.
	canConnect func(policy string, sameHost bool) bool
	// connect sets up the connections to peers over their TCP
	// connections. A peer missing from the result keeps TCP (a fallback
	// the transport logged). On failure it closes what it opened.
	connect func(ctx context.Context, cfg *Config, mesh map[int]*tcp.Conn, peers []int) (map[int]transport.Conn, error)
}

// table is read in order: the first row whose canConnect accepts a pair
// joins it.
var table = []kind{
	{name: "rdma", canConnect: func(policy string, _ bool) bool { return policy == PolicyRDMA }, connect: connectRDMA},
	{name: "shm", canConnect: func(policy string, same bool) bool { return same && (policy == PolicyAuto || policy == PolicySHM) }, connect: connectSHM},
	{name: "tcp", canConnect: func(policy string, same bool) bool { return policy != PolicySHM || same }},
}

// Choose returns the transport that joins two ranks under policy (sameHost:
// both on one host), or an error if none may.
func Choose(policy string, sameHost bool) (string, error) {
	switch policy {
	case PolicyAuto, PolicyTCP, PolicySHM, PolicyRDMA:
	default:
		return "", fmt.Errorf("unknown transport policy %q (want %s, %s, %s or %s)", policy, PolicyAuto, PolicyTCP, PolicySHM, PolicyRDMA)
	}
	for _, k := range table {
		if k.canConnect(policy, sameHost) {
			return k.name, nil
		}
	}
	return "", errors.New("transport shm forced but the ranks are on different hosts")
}

// Connect opens a connection to every peer in peers (every peer calls it
// with this rank among its peers and the same policy): TCP first, then the
// transport the table chooses for the pair, then the emulation layer. On
// failure every connection it opened is closed and the error names the
// transport and the peer.
func Connect(ctx context.Context, cfg Config, peers []tcp.Endpoint) (map[int]transport.Conn, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	chosen := map[string][]int{}
	for _, p := range peers {
		name, err := Choose(cfg.Policy, cfg.SameHost(p.Rank))
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", p.Rank, err)
		}
		chosen[name] = append(chosen[name], p.Rank)
	}
	mesh, err := tcp.Connect(ctx, cfg.Mesh, peers)
	if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	out := make(map[int]transport.Conn, len(mesh))
	for r, conn := range mesh {
		out[r] = conn
	}
	fail := func(err error) (map[int]transport.Conn, error) {
		for r, conn := range out {
			conn.Close()
			mesh[r].Close()
		}
		return nil, err
	}
	for _, k := range table {
		if k.connect == nil || len(chosen[k.name]) == 0 {
			continue
		}
		conns, err := k.connect(ctx, &cfg, mesh, chosen[k.name])
		if err != nil {
			return fail(fmt.Errorf("%s: %w", k.name, err))
		}
		for r, conn := range conns {
			out[r] = conn
		}
	}
	if err := Emulate(cfg.Emulation, cfg.Mesh.Self, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Emulate wraps the connections of rank self in the emulated fabric f, if
// there is one. On failure it closes them all.
func Emulate(f *emu.Fabric, self int, conns map[int]transport.Conn) error {
	if f == nil {
		return nil
	}
	for r, conn := range conns {
		w, err := f.Wrap(conn, self, r)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return fmt.Errorf("emulated fabric: rank %d: %w", r, err)
		}
		conns[r] = w
	}
	return nil
}

// connectSHM sets up shared memory to peers on this host. Under PolicyAuto
// a pair where it is unavailable (no /dev/shm, or full) keeps TCP.
func connectSHM(ctx context.Context, cfg *Config, mesh map[int]*tcp.Conn, peers []int) (map[int]transport.Conn, error) {
	if n, err := shm.CleanStale(""); err == nil && n > 0 {
		cfg.Log.Info("occl: removed stale shared-memory files", "files", n)
	}
	return each(peers, func(r int) (transport.Conn, error) {
		sc, err := shm.Connect(ctx, mesh[r], shm.Config{Comm: cfg.Mesh.Comm, Epoch: cfg.Mesh.Epoch, Self: cfg.Mesh.Self, Peer: r,
			NoCMA: cfg.NoCMA, CMAThreshold: cfg.CMAThreshold, SendByDescriptor: cfg.CMASend, OfferThreshold: cfg.CMAOffer, WholeLendThreshold: cfg.CMAWhole, WholeRingThreshold: cfg.CMARing, Spin: cfg.ShmSpin, Lazy: cfg.ShmLazy})
		switch {
		case err == nil:
			return sc, nil
		case errors.Is(err, shm.ErrUnavailable) && cfg.Policy == PolicyAuto:
			cfg.Log.Warn("occl: shared memory unavailable, using TCP", "peer", r, "err", err)
			return nil, nil
		}
		return nil, err
	})
}

// connectRDMA sets up RDMA to peers on the device the OCCL_IB_* settings
// select, found from the TCP connections' interface.
func connectRDMA(ctx context.Context, cfg *Config, mesh map[int]*tcp.Conn, peers []int) (map[int]transport.Conn, error) {
	dc, err := rdma.DeviceConfigFromEnv()
	if err != nil {
		return nil, err
	}
	base, err := rdma.ConfigFromEnv(rdma.Config{})
	if err != nil {
		return nil, err
	}
	dc.Netdev = rdma.NetdevOf(mesh[peers[0]])
	dev, err := rdma.OpenDevice(dc)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	cfg.Log.Info("occl: rdma transport", "device", dev.String())
	return each(peers, func(r int) (transport.Conn, error) {
		rc := base
		rc.Comm, rc.Epoch, rc.Self, rc.Peer, rc.Device = cfg.Mesh.Comm, cfg.Mesh.Epoch, cfg.Mesh.Self, r, dev
		return rdma.Connect(ctx, mesh[r], rc)
	})
}

// each runs connect for every peer at once and collects the connections
// (a nil one, with no error, leaves the peer out). If any fails, it closes
// the others and returns the first error, naming the peer.
func each(peers []int, connect func(peer int) (transport.Conn, error)) (map[int]transport.Conn, error) {
	type result struct {
		peer int
		conn transport.Conn
		err  error
	}
	results := make(chan result, len(peers))
	for _, r := range peers {
		go func() {
			conn, err := connect(r)
			results <- result{r, conn, err}
		}()
	}
	out := make(map[int]transport.Conn, len(peers))
	var first error
	for range peers {
		res := <-results
		switch {
		case res.err != nil && first == nil:
			first = fmt.Errorf("rank %d: %w", res.peer, res.err)
		case res.err == nil && res.conn != nil:
			out[res.peer] = res.conn
		}
	}
	if first != nil {
		for _, c := range out {
			c.Close()
		}
		return nil, first
	}
	return out, nil
}
