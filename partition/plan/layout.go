package plan

import (
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition"
)

// Demand is what pending claims ask of a node: partitions per profile
// name (a scheme's Canonical applies), and whole cards under the key
// partition.WholeCard. Counts must not be negative.
type Demand = engine.Demand

// DefaultMix is the profile mix PlanLayouts fills a partitioned card's
// free space with unless WithDefaultMix says otherwise: the default
// profiles (one per compute size, no extras) that leave room for another
// partition on an empty card and take at most half its compute, largest
// first (on an H100: 3g, 2g, 1g). A nil s has no mix.
func DefaultMix(s *partition.Scheme) []string { return engine.DefaultMix(s) }

// LayoutOption configures PlanLayouts and PlanLayout. Options of the
// other entry points do not compile here.
type LayoutOption interface{ layoutOption() engine.Option }

type layoutOption struct{ o engine.Option }

func (o layoutOption) layoutOption() engine.Option { return o.o }

// WithDefaultMix sets the profiles PlanLayouts fills a partitioned card's
// free space with once the demand is served, in the order they are
// placed round after round (nil or empty: no fill). A name the scheme
// lacks is an error. mix must not be nil.
func WithDefaultMix(mix func(s *partition.Scheme) []string) LayoutOption {
	return layoutOption{engine.WithDefaultMix(mix)}
}

// PlanLayouts chooses the layout each card of one node publishes. As
// input, a card's Layout holds its in-use partitions (kept) and the free
// ones published now (kept where the plan can keep them); WholeInUse
// keeps the whole card. demand[partition.WholeCard] cards with nothing in
// use stay whole; the partition demand is placed by PlanFleet's
// heuristic; a card with nothing in use that the demand does not reach
// publishes its whole device; every other card's free space is filled
// with its free partitions that still fit, then the default mix. The
// result has one entry per input card, in input order: a valid layout in
// the planner's order, empty for a whole card; partition.Published makes
// it counter.Model.LayoutPools' input. It is deterministic.
func PlanLayouts(
	node []partition.LayoutCard, demand Demand, opts ...LayoutOption,
) ([]partition.LayoutCard, error) {
	return engine.PlanLayouts(node, demand, engine.Convert(opts, LayoutOption.layoutOption)...)
}

// PlanLayout is PlanLayouts for one card (index 0) of scheme s: inUse
// holds its in-use partitions (and any published free ones, InUse
// false), demand what is pending. The result is the layout to publish,
// in the planner's order; empty publishes the whole card.
func PlanLayout(
	s *partition.Scheme, inUse partition.Layout, demand Demand, opts ...LayoutOption,
) (partition.Layout, error) {
	out, err := PlanLayouts([]partition.LayoutCard{{Scheme: s, Layout: inUse}}, demand, opts...)
	if err != nil {
		return nil, err
	}
	return out[0].Layout, nil
}
