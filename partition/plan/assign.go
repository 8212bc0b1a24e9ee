package plan

import (
	"time"

	"github.com/drakit/drakit/internal/engine"
)

// Node is one node of the fleet for AssignFleet: its Name and Cards.
type Node = engine.Node

// NodeCard is one card of a node as AssignFleet sees it: Index, Scheme,
// offered Profiles, what is in use (InUse, WholeInUse), what it offers
// free now (Free, FreeWhole), NoWhole when it cannot be offered whole,
// Withheld when it takes nothing new.
type NodeCard = engine.NodeCard

// PendingRequest is what one pending pod asks of a driver: one profile per
// device (partition.WholeCard for a whole card), all on one node among
// Nodes (nil: any), after waiting Waited.
type PendingRequest = engine.PendingRequest

// ReservedCard keeps card Card for Profile, a profile that fits nowhere
// yet.
type ReservedCard = engine.ReservedCard

// FleetAssignment is AssignFleet's result: the Demand to lay out per
// node, the Reserved cards per node, the node each request is Placed on,
// the Unplaced request IDs, and the Relaid nodes whose layout changes.
type FleetAssignment = engine.FleetAssignment

// DefaultAging is how long a request waits before AssignFleet plans it
// before every younger one (WithAging).
const DefaultAging = engine.DefaultAging

// AssignOption configures AssignFleet. Options of the other entry points
// do not compile here.
type AssignOption interface{ assignOption() engine.AssignOption }

type assignOption struct{ o engine.AssignOption }

func (o assignOption) assignOption() engine.AssignOption { return o.o }

// WithAging sets how long a request waits before it is planned before
// every request that has waited less, whatever their sizes (default
// DefaultAging); an aged request that fits nowhere may keep a card
// reserved. d must be positive.
func WithAging(d time.Duration) AssignOption { return assignOption{engine.WithAging(d)} }

// AssignFleet assigns pending requests to nodes for the layout
// publication. Each request goes where it costs least: a free partition
// offered now, then free space of a card already partitioned, then an
// idle card; among equal nodes, one already relaid for this assignment,
// then the busiest, then by name. Aged requests go first. A request that
// fits nowhere is unplaced and, once aged, reserves the least busy
// candidate card for its largest profile. The result is deterministic.
func AssignFleet(
	nodes []Node, reqs []PendingRequest, opts ...AssignOption,
) (*FleetAssignment, error) {
	return engine.AssignFleet(nodes, reqs, engine.ConvertAssign(opts, AssignOption.assignOption)...)
}
