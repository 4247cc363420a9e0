package reconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig/plan"
	"github.com/occl/occl/topo"
)

// Spare is a host that waits to take a failed host's place (WithSpare).
type Spare struct {
	// Host describes the spare host as a topology of that one host: its
	// ranks (one per process that joins), NICs and OCS ports, and no
	// circuits. It needs as many ranks as the host it replaces (Recover
	// refuses it otherwise, with an error wrapping
	// comm.ErrInvalidArgument). Every OCS port names the port of the
	// fabric's switch it is cabled to (topo.NIC.SwitchPort; switch_ports=
	// in a spec, such as "hosts=1x2,nics=host,ocs_ports=2,switch_ports=8/9"),
	// which no port of the fabric has: the switch numbers its ports once
	// for the whole fabric, and the spare's own numbering would name other
	// hosts' ports. Its link classes are not used (the fabric's apply).
	Host *topo.Topology
	// ID is the rendezvous of the Grow by which the spare's processes
	// join (comm.Communicator.Grow), for communicators made over TCP: an
	// address of the host of the survivors' rank 0 (the lowest surviving
	// rank) and the secret the spare's processes are given, with the ID,
	// for JoinSpare. The zero ID means in-process communicators
	// (comm.NewLocal): they grow with GrowLocal, and Recover on the
	// survivors' rank 0 reconfigures the spare's communicators itself and
	// returns them in Result.Joined.
	ID comm.UniqueID
}

// WithSpare makes Recover bring spare s into the place of the failed host
// instead of only bypassing it: after the survivors' Shrink, they grow by
// the spare's ranks, and the reconfiguration moves the failed host's
// circuits to the spare's ports (plan.RecoveryCircuits with the spare).
// See Recover and PlanSpare.
func WithSpare(s Spare) Option { return func(o *options) { o.spare = &s } }

// SparePlan is how a spare host takes the place of a failed one, in the
// numbering of the communicator that lost ranks (PlanSpare).
type SparePlan struct {
	// Replaced is the host (of the failed communicator's topology) whose
	// place the spare takes: the lowest host that lost a rank. Other hosts
	// that lost ranks are bypassed.
	Replaced int
	// Kept are the ranks of the failed communicator that go on, in order:
	// they are ranks 0 to len(Kept)-1 of the grown communicator, and the
	// spare's ranks follow, in the order of Spare.Host's ranks.
	Kept []int
	// Drop are the healthy ranks of the replaced host: the spare takes
	// their place too, so Recover leaves them out (they get an error
	// wrapping comm.ErrExcluded).
	Drop []int
	// Grown is the topology the grown communicator starts on: the
	// fabric's part of the kept ranks and the spare's, with the circuits
	// as they are (none reaches the replaced host or the spare). The
	// spare's processes join with it.
	Grown *topo.Topology
	// Target is Grown with the circuits that recovery switches: the
	// replaced host's moved to the spare's ports, the other failed hosts
	// bypassed (plan.RecoveryCircuits).
	Target *topo.Topology
}

// PlanSpare plans the recovery of a communicator with topology top (one
// rank per rank of the communicator) that lost the given ranks, with
// spare, a topology of one host, taking the place of the lowest host that
// lost a rank. The survivors (Recover with WithSpare) and the spare's
// processes (JoinSpare) compute the same plan from the same arguments; the
// spare's processes learn the lost ranks from the application. A spare
// that is not one host whose OCS ports name switch ports of their own, or
// that has another number of ranks than the host it replaces, is refused
// with an error wrapping comm.ErrInvalidArgument.
func PlanSpare(top *topo.Topology, lost []int, spare *topo.Topology) (*SparePlan, error) {
	if top == nil || spare == nil {
		return nil, errors.New("plan spare: nil topology")
	}
	if err := top.Validate(); err != nil {
		return nil, fmt.Errorf("plan spare: the fabric: %w", err)
	}
	if err := checkSpareOn(top, spare); err != nil {
		return nil, fmt.Errorf("plan spare: %w: %w", comm.ErrInvalidArgument, err)
	}
	if len(lost) == 0 {
		return nil, errors.New("plan spare: no rank was lost, so no host to replace")
	}
	n := len(top.Ranks)
	isLost := make([]bool, n)
	var failed []int
	for _, r := range lost {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("plan spare: lost rank %d: outside the %d ranks", r, n)
		}
		isLost[r] = true
		if h := top.Ranks[r].Host; !slices.Contains(failed, h) {
			failed = append(failed, h)
		}
	}
	slices.Sort(failed)
	if hr := top.HostRanks(); len(hr[failed[0]]) != len(spare.Ranks) {
		return nil, fmt.Errorf("plan spare: %w: the spare host has %d ranks; host %d (%s), whose place it would take, has %d",
			comm.ErrInvalidArgument, len(spare.Ranks), failed[0], top.Hosts[failed[0]].Name, len(hr[failed[0]]))
	}
	full := withHost(top, spare)
	spareHost := len(top.Hosts)
	target, err := plan.RecoveryCircuits(full, failed, spareHost)
	if err != nil {
		return nil, fmt.Errorf("plan spare: %w", err)
	}
	p := &SparePlan{Replaced: failed[0]}
	for r, rk := range top.Ranks {
		switch {
		case isLost[r]:
		case rk.Host == p.Replaced:
			p.Drop = append(p.Drop, r)
		default:
			p.Kept = append(p.Kept, r)
		}
	}
	members := slices.Clone(p.Kept)
	for r := range spare.Ranks {
		members = append(members, n+r)
	}
	p.Grown = full.Subset(members)
	p.Target = target.Subset(members)
	return p, nil
}

// checkSpare checks that spare describes one host without circuits whose
// OCS ports name their switch ports.
func checkSpare(spare *topo.Topology) error {
	if spare == nil {
		return errors.New("no spare host")
	}
	if err := spare.Validate(); err != nil {
		return fmt.Errorf("the spare host: %w", err)
	}
	switch {
	case len(spare.Hosts) != 1:
		return fmt.Errorf("the spare has %d hosts, want 1", len(spare.Hosts))
	case len(spare.Circuits) > 0:
		return fmt.Errorf("the spare host has circuits %v", spare.Circuits)
	}
	for _, i := range spare.SwitchPorts() {
		if spare.NICs[i].SwitchPort == nil {
			return fmt.Errorf("the spare host's OCS port %d (%q) does not say which switch port it is cabled to (NIC.SwitchPort, switch_ports= in a spec)", i, spare.NICs[i].Name)
		}
	}
	return nil
}

// checkSpareOn checks spare (checkSpare) and that its OCS ports are
// switch ports that none of top's is.
func checkSpareOn(top, spare *topo.Topology) error {
	if err := checkSpare(spare); err != nil {
		return err
	}
	if err := withHost(top, spare).Validate(); err != nil {
		return fmt.Errorf("the fabric with the spare host: %w", err)
	}
	return nil
}

// checkSpareSize checks that spare has as many ranks as some host of top:
// it takes the place of a host that lost a rank, which needs as many. Which
// host that is, the lost ranks say (PlanSpare checks it); where every host
// has as many ranks, this says it before any rank is known to be lost.
func checkSpareSize(top, spare *topo.Topology) error {
	n := len(spare.Ranks)
	var sizes []string
	for _, ranks := range top.HostRanks() {
		if len(ranks) == n {
			return nil
		}
		if s := fmt.Sprint(len(ranks)); len(ranks) > 0 && !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	return fmt.Errorf("the spare host has %d ranks, but no host of the fabric has as many (they have %s): a spare takes the place of a host of as many ranks",
		n, strings.Join(sizes, " or "))
}

// withHost returns top with the host of spare added after its own: its
// NICs after top's (its OCS ports keep the switch ports they name), its
// ranks after top's (and after them in the ring, if top has one).
func withHost(top, spare *topo.Topology) *topo.Topology {
	out := *top
	h, nics, n := len(top.Hosts), len(top.NICs), len(top.Ranks)
	out.Hosts = append(slices.Clone(top.Hosts), spare.Hosts[0])
	out.NICs = slices.Clone(top.NICs)
	for _, nic := range spare.NICs {
		nic.Host = h
		out.NICs = append(out.NICs, nic)
	}
	out.Ranks = slices.Clone(top.Ranks)
	for _, rk := range spare.Ranks {
		rk.Host = h
		if rk.NIC >= 0 {
			rk.NIC += nics
		}
		ports := make([]int, len(rk.Ports))
		for i, p := range rk.Ports {
			ports[i] = p + nics
		}
		rk.Ports = ports
		out.Ranks = append(out.Ranks, rk)
	}
	out.Circuits = slices.Clone(top.Circuits)
	if len(top.Ring) > 0 {
		out.Ring = slices.Clone(top.Ring)
		for r := range spare.Ranks {
			out.Ring = append(out.Ring, n+r)
		}
	}
	return &out
}

// Joined is a spare's communicator that Recover made in this process
// (in-process communicators, on the survivors' rank 0).
type Joined struct {
	// Comm is the spare's communicator: the caller drives it from a
	// goroutine of its own and closes it.
	Comm *comm.Communicator
	// Err is its reconfiguration's outcome: the survivors' error, or nil.
	Err error
}

// recoverSpare is Recover's part with a spare, on this rank (rank of c,
// whose ranks had fabricRanks), once the survivors' Shrink made nc and
// the ranks of c in lost were found gone.
func recoverSpare(ctx context.Context, top *topo.Topology, rank int, fabricRanks []int, nc *comm.Communicator, lost []int, o *options, opts []Option) (*comm.Communicator, Result, error) {
	p, err := PlanSpare(top, lost, o.spare.Host)
	if err != nil {
		// Every survivor plans alike, and nothing was done yet with the
		// spare: the survivors' communicator keeps running.
		return nc, Result{}, fmt.Errorf("reconfig: recover: rank %d: %w", rank, err)
	}
	if len(p.Drop) > 0 {
		if nc, err = dropRanks(ctx, nc, rank, fabricRanks, p.Drop, "the spare takes its host's place"); err != nil {
			return nil, Result{}, err
		}
	}
	k := len(o.spare.Host.Ranks)
	var grown *comm.Communicator
	var joiners []*comm.Communicator
	if o.spare.ID == (comm.UniqueID{}) {
		grown, joiners, err = nc.GrowLocal(ctx, k, comm.WithTopology(p.Grown))
	} else {
		grown, err = nc.Grow(ctx, o.spare.ID, k, comm.WithTopology(p.Grown))
	}
	if err != nil {
		// Grow failed on every member alike; the survivors' communicator
		// keeps running.
		return nc, Result{}, fmt.Errorf("reconfig: recover: rank %d: grow by the spare's %d ranks: %w", rank, k, err)
	}
	nc.Close()
	res, err := reconfigureWith(ctx, grown, joiners, p.Target, opts)
	res.Spare = p
	if err != nil {
		return grown, res, fmt.Errorf("reconfig: recover: rank %d: %w", rank, err)
	}
	return grown, res, nil
}

// reconfigureWith reconfigures c onto target and, at the same time, each
// of the joiners (in-process communicators of the same group) on a
// goroutine of its own; the result lists the joiners and their outcomes.
func reconfigureWith(ctx context.Context, c *comm.Communicator, joiners []*comm.Communicator, target *topo.Topology, opts []Option) (Result, error) {
	joined := make([]Joined, len(joiners))
	var wg sync.WaitGroup
	for i, j := range joiners {
		joined[i].Comm = j
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, joined[i].Err = Reconfigure(ctx, []*comm.Communicator{j}, target, opts...)
		}()
	}
	res, err := Reconfigure(ctx, []*comm.Communicator{c}, target, opts...)
	wg.Wait()
	res.Joined = joined
	return res, err
}

// JoinSpare is the side of a spare's process in a Recover with WithSpare
// over TCP: every process of the spare host calls it with the grow's
// rendezvous (Spare.ID) and the plan the survivors make (PlanSpare of the
// failed communicator's topology, the lost ranks and Spare.Host). It joins
// the grown communicator (comm.Join with p.Grown and joinOpts, the
// options of Init such as comm.WithEmulation) and takes part in its
// reconfiguration onto p.Target, with the outcome every survivor gets:
// when the reconfiguration fails it returns the communicator, still
// running on p.Grown, with the error. A process of the spare learns its
// rank from the rendezvous, in the order the spare's processes arrive.
func JoinSpare(ctx context.Context, id comm.UniqueID, p *SparePlan, joinOpts []comm.Option, opts ...Option) (*comm.Communicator, Result, error) {
	if p == nil || p.Grown == nil || p.Target == nil {
		return nil, Result{}, errors.New("reconfig: join spare: no plan")
	}
	c, err := comm.Join(ctx, id, append(slices.Clone(joinOpts), comm.WithTopology(p.Grown))...)
	if err != nil {
		return nil, Result{}, fmt.Errorf("reconfig: join spare: %w", err)
	}
	res, err := Reconfigure(ctx, []*comm.Communicator{c}, p.Target, opts...)
	res.Spare = p
	if err != nil {
		return c, res, fmt.Errorf("reconfig: join spare: rank %d: %w", c.Rank(), err)
	}
	return c, res, nil
}
