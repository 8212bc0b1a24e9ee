package counter

import (
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition"
)

// OrderOption configures Preference, Model.PreferredPools and
// Model.CardPools. Options of the layout publication (LayoutOption) and
// of the planners (package plan) are other types and do not compile here.
type OrderOption interface{ orderOption() engine.Option }

type orderOption struct{ o engine.Option }

func (o orderOption) orderOption() engine.Option { return o.o }

func orderOptions(opts []OrderOption) []engine.Option {
	return engine.Convert(opts, OrderOption.orderOption)
}

// WithFitOnly lists only the devices the scheduler can still allocate:
// those that fit beside the node's in-use partitions, and the in-use
// partitions' own devices (whose counters must stay visible). It changes
// no allocation result and leaves the scheduler far fewer devices on busy
// nodes. The in-use partitions must be those of allocated devices: leave
// a card allocated whole with an empty layout.
func WithFitOnly() OrderOption { return orderOption{engine.WithFitOnly()} }

// WithCardsFirst lists each whole card's device before the partitions
// (empty cards first), for a driver whose device classes keep whole cards
// and partitions apart by type.
func WithCardsFirst() OrderOption { return orderOption{engine.WithCardsFirst()} }

// WithProfiles lists only the devices of the profiles a driver
// advertises: per card, those profiles returns for its scheme (nil or
// empty: all), the set given to NewModel as Card.Profiles. A name the
// scheme lacks is an error. profiles must not be nil.
func WithProfiles(profiles func(s *partition.Scheme) []string) OrderOption {
	return orderOption{engine.WithProfiles(profiles)}
}

// WithReserve withholds partial-profile placements on free cards while at
// most n of the node's cards are free: admission control that keeps
// cards for whole-card requests, off by default. n must not be negative;
// 0 turns it off.
func WithReserve(n int) OrderOption { return orderOption{engine.WithReserve(n)} }

// Preference orders every device of a node's counter model (all profiles,
// or those of WithProfiles) as the planner prefers them: per profile in
// the scheme's order, the placements that fit, least fragmentation loss
// first, then those that do not fit; whole cards last, empty ones first
// (WithCardsFirst: first). Every partition in node is treated as
// allocated. Publishing the model in this order (Model.Reorder) makes
// the allocator's first fit the planner's choice; recompute and
// republish after every allocation or release. Errors wrap
// partition.ErrFleet.
func Preference(node []partition.FleetCard, opts ...OrderOption) ([]string, error) {
	return engine.Preference(node, orderOptions(opts)...)
}

// PreferredPools is what a driver that partitions at prepare publishes
// for one node after every change: Pools(name) with the devices in
// Preference's order for the node's current partitions, restricted to
// the model's devices. node must hold one entry per card of the model,
// with the model's scheme; anything else is an error wrapping
// partition.ErrFleet.
func (m Model) PreferredPools(
	name string, node []partition.FleetCard, opts ...OrderOption,
) ([]device.Pool, error) {
	return m.engine().PreferredPools(name, node, orderOptions(opts)...)
}

// CardPools is PreferredPools cut into one pool per card, named
// Scheme.PoolName(name, index), in card order: a change on one card
// rewrites one pool's one slice in place, so no pool is ever incomplete
// while the scheduler catches up. The price: across cards the allocator
// takes the first card in index order that fits, not necessarily the
// planner's.
func (m Model) CardPools(
	name string, node []partition.FleetCard, opts ...OrderOption,
) ([]device.Pool, error) {
	return m.engine().CardPools(name, node, orderOptions(opts)...)
}
