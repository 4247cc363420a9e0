package ocs

import (
	"fmt"
	"math"
	"time"

	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PortState is the effective state of a switch port.
type PortState int

// Port states. A failed port that is also drained is PortFailed.
const (
	PortUp PortState = iota + 1
	PortFailed
	PortDrained
)

var portStateNames = map[PortState]string{PortUp: "up", PortFailed: "failed", PortDrained: "drained"}

// String returns "up", "failed" or "drained".
func (s PortState) String() string {
	if n, ok := portStateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("PortState(%d)", int(s))
}

// MarshalText encodes s as its name.
func (s PortState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PortStatus describes one port.
type PortStatus struct {
	Port  int       `json:"port"`
	State PortState `json:"state"`
	// Failed is set when the switch reports the port failed, Drained when
	// an operator drained it; both may be set.
	Failed  bool `json:"failed,omitempty"`
	Drained bool `json:"drained,omitempty"`
	// Peer is the other end of the port's cross-connect, or -1.
	Peer int `json:"peer"`
}

// Topology is the controller's view of the switch.
type Topology struct {
	// Ports is the number of ports, numbered 0 .. Ports-1.
	Ports int `json:"ports"`
	// Generation counts changes of the installed set of cross-connects.
	Generation uint64 `json:"generation"`
	// Connects are the installed cross-connects, A < B, sorted by A.
	Connects []topo.Circuit `json:"connects"`
	// PortStates has one entry per port, in port order.
	PortStates []PortStatus `json:"port_states"`
}

// PortsIn returns the ports in the given state, in increasing order.
func (t *Topology) PortsIn(state PortState) []int {
	var out []int
	for _, p := range t.PortStates {
		if p.State == state {
			out = append(out, p.Port)
		}
	}
	return out
}

// ApplyResult is the outcome of an Apply.
type ApplyResult struct {
	// Generation of the installed set after the apply.
	Generation uint64 `json:"generation"`
	// Added, Removed and Unchanged count cross-connects made, torn down
	// and left in place.
	Added     int `json:"added"`
	Removed   int `json:"removed"`
	Unchanged int `json:"unchanged"`
	// SwitchingTime is the time the switch took, zero when nothing changed.
	SwitchingTime time.Duration `json:"switching_ns"`
	// Replayed is set when the result was recorded for an earlier request
	// with the same id and target and nothing was switched this time.
	Replayed bool `json:"replayed,omitempty"`
}

// PortChange is the outcome of Drain or Undrain.
type PortChange struct {
	// Port is the port after the change.
	Port PortStatus `json:"port"`
	// Generation of the installed set after the change.
	Generation uint64 `json:"generation"`
	// Removed is the cross-connect a forced drain tore down, or nil.
	Removed *topo.Circuit `json:"removed,omitempty"`
}

// EventType says what an Event reports.
type EventType int

// Event types.
const (
	// EventSnapshot is the first event of every watch; Snapshot is set.
	EventSnapshot EventType = iota + 1
	// EventPortUp: Port recovered.
	EventPortUp
	// EventPortFailed: Port failed.
	EventPortFailed
	// EventPortDrained: Port was drained.
	EventPortDrained
	// EventPortUndrained: Port was undrained.
	EventPortUndrained
	// EventCircuitAdded: Connect was made.
	EventCircuitAdded
	// EventCircuitRemoved: Connect was torn down.
	EventCircuitRemoved
	// EventGeneration: Generation was committed; its circuit events came
	// before.
	EventGeneration
)

var eventTypeNames = map[EventType]string{
	EventSnapshot:       "snapshot",
	EventPortUp:         "port-up",
	EventPortFailed:     "port-failed",
	EventPortDrained:    "port-drained",
	EventPortUndrained:  "port-undrained",
	EventCircuitAdded:   "circuit-added",
	EventCircuitRemoved: "circuit-removed",
	EventGeneration:     "generation",
}

// String returns the event type's name, e.g. "circuit-added".
func (t EventType) String() string {
	if n, ok := eventTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// MarshalText encodes t as its name.
func (t EventType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Event is one change reported by Watch.
type Event struct {
	Type EventType `json:"type"`
	// Generation of the installed set after the change.
	Generation uint64 `json:"generation"`
	// Port is set for port events.
	Port int `json:"port,omitempty"`
	// Connect is set for circuit events.
	Connect *topo.Circuit `json:"connect,omitempty"`
	// Snapshot is set for EventSnapshot.
	Snapshot *Topology `json:"snapshot,omitempty"`
	// Time is when the controller observed the change.
	Time time.Time `json:"time"`
}

// String formats the event on one line.
func (e Event) String() string {
	s := fmt.Sprintf("generation %d %v", e.Generation, e.Type)
	switch {
	case e.Snapshot != nil:
		s += fmt.Sprintf(" %d ports %s", e.Snapshot.Ports, FormatConnects(e.Snapshot.Connects))
	case e.Connect != nil:
		s += " " + e.Connect.String()
	case e.Type >= EventPortUp && e.Type <= EventPortUndrained:
		s += fmt.Sprintf(" port %d", e.Port)
	}
	return s
}

// Conversions between the Go types and the wire types.

func connectToPB(c topo.Circuit) *ocspb.CrossConnect {
	return &ocspb.CrossConnect{A: uint32(c.A), B: uint32(c.B)}
}

func connectsToPB(cs []topo.Circuit) []*ocspb.CrossConnect {
	out := make([]*ocspb.CrossConnect, len(cs))
	for i, c := range cs {
		out[i] = connectToPB(c)
	}
	return out
}

// connectFromPB converts a wire cross-connect.
func connectFromPB(c *ocspb.CrossConnect) topo.Circuit {
	return topo.Circuit{A: portFromPB(c.GetA()), B: portFromPB(c.GetB())}
}

// portFromPB converts a wire port number. Where int has 32 bits, numbers
// beyond MaxInt are clamped to MaxInt, a port no switch has, so that range
// checks still reject them.
func portFromPB(p uint32) int {
	if uint64(p) > math.MaxInt {
		return math.MaxInt
	}
	return int(p)
}

func connectsFromPB(cs []*ocspb.CrossConnect) []topo.Circuit {
	out := make([]topo.Circuit, len(cs))
	for i, c := range cs {
		out[i] = connectFromPB(c)
	}
	return out
}

func portStatusToPB(p PortStatus) *ocspb.Port {
	out := &ocspb.Port{Port: uint32(p.Port), State: ocspb.PortState(p.State), Failed: p.Failed, Drained: p.Drained}
	if p.Peer >= 0 {
		peer := uint32(p.Peer)
		out.Peer = &peer
	}
	return out
}

func portStatusFromPB(p *ocspb.Port) PortStatus {
	out := PortStatus{Port: portFromPB(p.GetPort()), State: PortState(p.GetState()), Failed: p.GetFailed(), Drained: p.GetDrained(), Peer: -1}
	if p.Peer != nil {
		out.Peer = portFromPB(p.GetPeer())
	}
	return out
}

func topologyToPB(t *Topology) *ocspb.Topology {
	out := &ocspb.Topology{
		Ports:      uint32(t.Ports),
		Generation: t.Generation,
		Connects:   connectsToPB(t.Connects),
		PortStates: make([]*ocspb.Port, len(t.PortStates)),
	}
	for i, p := range t.PortStates {
		out.PortStates[i] = portStatusToPB(p)
	}
	return out
}

func topologyFromPB(t *ocspb.Topology) *Topology {
	out := &Topology{
		Ports:      portFromPB(t.GetPorts()),
		Generation: t.GetGeneration(),
		Connects:   connectsFromPB(t.GetConnects()),
		PortStates: make([]PortStatus, len(t.GetPortStates())),
	}
	for i, p := range t.GetPortStates() {
		out.PortStates[i] = portStatusFromPB(p)
	}
	return out
}

func applyResultToPB(r ApplyResult) *ocspb.ApplyResponse {
	return &ocspb.ApplyResponse{
		Generation:    r.Generation,
		Added:         uint32(r.Added),
		Removed:       uint32(r.Removed),
		Unchanged:     uint32(r.Unchanged),
		SwitchingTime: durationpb.New(r.SwitchingTime),
		Replayed:      r.Replayed,
	}
}

func applyResultFromPB(r *ocspb.ApplyResponse) ApplyResult {
	return ApplyResult{
		Generation:    r.GetGeneration(),
		Added:         int(r.GetAdded()),
		Removed:       int(r.GetRemoved()),
		Unchanged:     int(r.GetUnchanged()),
		SwitchingTime: r.GetSwitchingTime().AsDuration(),
		Replayed:      r.GetReplayed(),
	}
}

func portChangeFromPB(r *ocspb.PortResponse) PortChange {
	out := PortChange{Port: portStatusFromPB(r.GetPort()), Generation: r.GetGeneration()}
	if r.Removed != nil {
		c := connectFromPB(r.GetRemoved())
		out.Removed = &c
	}
	return out
}

func eventFromPB(e *ocspb.Event) Event {
	out := Event{
		Type:       EventType(e.GetType()),
		Generation: e.GetGeneration(),
		Port:       portFromPB(e.GetPort()),
	}
	if e.Connect != nil {
		c := connectFromPB(e.GetConnect())
		out.Connect = &c
	}
	if e.Snapshot != nil {
		out.Snapshot = topologyFromPB(e.GetSnapshot())
	}
	if e.Time != nil {
		out.Time = e.GetTime().AsTime()
	}
	return out
}

func newEvent(typ EventType, gen uint64, now time.Time) *ocspb.Event {
	return &ocspb.Event{Type: ocspb.EventType(typ), Generation: gen, Time: timestamppb.New(now)}
}
