package counter

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition"
)

// LayoutMaxDevices is the most devices a layout pool holds by default:
// the API's limit of devices in one ResourceSlice without taints,
// counters or list attributes (resourceapi.ResourceSliceMaxDevices).
const LayoutMaxDevices = engine.LayoutMaxDevices

// LayoutOption configures the layout publication: Model.LayoutPools,
// Model.LayoutSlices, LayoutPoolNames and LayoutCardPools. Options of the
// order (OrderOption) and of the planners are other types and do not
// compile here.
type LayoutOption interface{ layoutOption() engine.Option }

type layoutOption struct{ o engine.Option }

func (o layoutOption) layoutOption() engine.Option { return o.o }

func layoutOptions(opts []LayoutOption) []engine.Option {
	return engine.Convert(opts, LayoutOption.layoutOption)
}

// WithPoolDevices sets the most devices one layout pool (one slice) may
// hold, 1 to LayoutMaxDevices (the default). A driver that taints layout
// devices sets resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
// (64), the API's limit then.
func WithPoolDevices(n int) LayoutOption { return layoutOption{engine.WithPoolDevices(n)} }

// LayoutPools publishes each card's current layout without counters:
// per card nothing (Withheld), its whole device (empty Layout) or one
// device per partition, in Layout order (plan.PlanLayouts' output
// through partition.Published, or ledger.Ledger.Layout's). Normally one pool named name, published as
// one slice so a republish rewrites it in place; when the cards' worst
// cases (Scheme.MaxLayoutDevices) exceed the pool limit, consecutive
// groups of cards in index order, one pool each, named
// Scheme.PoolName(name, first index): the grouping depends on the cards
// only, so a device keeps its pool across versions. Every card must be
// one of the model's with every device its layout names; errors wrap
// partition.ErrFleet.
func (m Model) LayoutPools(
	name string, cards []partition.PublishedCard, opts ...LayoutOption,
) ([]device.Pool, error) {
	return m.engine().LayoutPools(name, cards, layoutOptions(opts)...)
}

// LayoutSlices is LayoutPools as ready ResourceSlice objects for
// in-process use: one slice per pool, nodeName set, generation as given,
// resourceSliceCount 1, named after its pool ("/" replaced by "-") with
// "-layout" appended.
func (m Model) LayoutSlices(
	driver, name, nodeName string, generation int64,
	cards []partition.PublishedCard, opts ...LayoutOption,
) ([]*resourceapi.ResourceSlice, error) {
	return m.engine().LayoutSlices(driver, name, nodeName, generation, cards, layoutOptions(opts)...)
}

// LayoutPoolNames is the names of the pools LayoutPools makes of a
// node's cards. It depends on the cards' schemes and indices only, never
// on their layouts, so a driver can ask it before any layout exists.
func LayoutPoolNames(
	name string, cards []partition.LayoutCard, opts ...LayoutOption,
) ([]string, error) {
	return engine.LayoutPoolNames(name, cards, layoutOptions(opts)...)
}

// LayoutCardPools is, per card index, the name of the pool LayoutPools
// puts the card's devices in. Like LayoutPoolNames, it depends on the
// cards' schemes and indices only.
func LayoutCardPools(
	name string, cards []partition.LayoutCard, opts ...LayoutOption,
) (map[int]string, error) {
	return engine.LayoutCardPools(name, cards, layoutOptions(opts)...)
}
