package ocs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/occl/occl/topo"
)

// ParseConnects reads cross-connects written as "A-B" pairs separated by
// commas or white space, for example "0-5,1-7". The word "none" (or an empty
// string) is the empty set.
func ParseConnects(s string) ([]topo.Circuit, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	if len(fields) == 1 && fields[0] == "none" {
		return []topo.Circuit{}, nil
	}
	out := make([]topo.Circuit, 0, len(fields))
	for _, f := range fields {
		as, bs, ok := strings.Cut(f, "-")
		if !ok {
			return nil, fmt.Errorf("ocs: cross-connect %q: want A-B, e.g. 0-5", f)
		}
		a, err := strconv.ParseUint(as, 10, 31)
		if err != nil {
			return nil, fmt.Errorf("ocs: cross-connect %q: bad port %q", f, as)
		}
		b, err := strconv.ParseUint(bs, 10, 31)
		if err != nil {
			return nil, fmt.Errorf("ocs: cross-connect %q: bad port %q", f, bs)
		}
		out = append(out, topo.Circuit{A: int(a), B: int(b)})
	}
	return out, nil
}

// FormatConnects formats connects as ParseConnects reads them: "A-B" pairs
// separated by commas, or "none".
func FormatConnects(cs []topo.Circuit) string {
	if len(cs) == 0 {
		return "none"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ",")
}

// sortConnects normalizes every connect and sorts them by A.
func sortConnects(cs []topo.Circuit) []topo.Circuit {
	out := make([]topo.Circuit, len(cs))
	for i, c := range cs {
		out[i] = c.Normalize()
	}
	slices.SortFunc(out, func(x, y topo.Circuit) int {
		if c := cmp.Compare(x.A, y.A); c != 0 {
			return c
		}
		return cmp.Compare(x.B, y.B)
	})
	return out
}

// Progress reports which changes a Switch completed during Apply.
type Progress struct {
	// Removed lists the cross-connects torn down, in the order done.
	Removed []topo.Circuit
	// Added lists the cross-connects made, in the order done.
	Added []topo.Circuit
}

// Switch is a driver for one optical circuit switch. The controller (Server)
// is its only user: it owns the switch, keeps the intended set of
// cross-connects, and calls Apply with the difference between what is
// installed and what is wanted. The emulated switch (Emulated) implements it
// for tests and benchmarks; a driver for real hardware (a Polatis or Calient
// MEMS switch over TL1/NETCONF/REST, a robotic patch panel, a switch built
// from tunable transceivers) plugs in behind the same interface.
//
// Ports are numbered 0 .. Ports()-1 and each port joins at most one duplex
// cross-connect. All methods must be safe for concurrent use, and every
// method taking a context must return promptly when it is done.
type Switch interface {
	// Ports returns the number of ports. It does not change.
	Ports() int

	// Connections returns the cross-connects the switch holds now, as read
	// from the hardware. The controller uses it at start to reconcile its
	// persisted state with the switch, and after a failed rollback to learn
	// what is installed.
	Connections(ctx context.Context) ([]topo.Circuit, error)

	// FailedPorts returns the ports the hardware reports as failed (no
	// light, a broken mirror, a dead transceiver), in any order.
	FailedPorts(ctx context.Context) ([]int, error)

	// Apply tears down every cross-connect in remove, then makes every one
	// in add, and returns when the new circuits are up (light is through).
	// The controller guarantees that the connects in remove are installed,
	// that no port is used twice by the connects in add and that every port
	// of add is free once remove is done.
	//
	// Apply reports in Progress exactly which changes it completed, also
	// (above all) when it fails: the controller rolls a failed apply back by
	// calling Apply again with the completed changes reversed. A driver
	// that cannot tell whether a change happened should say so by an error
	// from a later Connections rather than guess. When ctx is done Apply
	// stops as soon as it safely can and returns ctx.Err() (possibly
	// wrapped) with its progress.
	Apply(ctx context.Context, remove, add []topo.Circuit) (Progress, error)

	// Changes returns a channel that receives a value after the health of
	// one or more ports changed. It is a level-triggered hint: after each
	// receive the controller calls FailedPorts, so a driver may coalesce
	// signals (a channel with a buffer of one, sent to without blocking, is
	// enough). A driver that cannot report changes returns nil; the
	// controller then reads FailedPorts before every change it makes.
	Changes() <-chan struct{}
}
