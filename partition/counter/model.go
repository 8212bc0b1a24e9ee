package counter

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition"
)

// Card is one card of a node for NewModel: its Index on the node (it
// names the devices), its Scheme (built by partition.NewScheme), its UUID
// (published as an attribute when set) and the Profiles it advertises
// (empty: all; DefaultProfiles is a cheaper default).
type Card = engine.Card

// Model is the counter model of a node's cards: CounterSets, one per
// card in card order, and Devices, by card the whole card first, then
// profiles in the scheme's order, placements by ascending start.
// Partitions consume the placed units they cover, their counted units,
// their extras, the card's partition counter, per-profile instance
// counters where placements alone do not bound a count and, on a scheme
// with modes, the mode counters. A Model is a value: its methods return
// copies and never change it.
type Model struct {
	// CounterSets holds one counter set per card, in card order.
	CounterSets []resourceapi.CounterSet
	// Devices holds the model's devices in the static order.
	Devices []resourceapi.Device
}

func (m Model) engine() engine.CounterModel { return engine.CounterModel(m) }

// NewModel builds the counter model of a node's cards. Card indices must
// be unique and non-negative, each scheme built by partition.NewScheme,
// and each card's counter set must fit in 32 counters with distinct
// names.
func NewModel(cards []Card) (Model, error) {
	m, err := engine.NewCounterModel(cards)
	return Model(m), err
}

// ModelCards turns one node's cards, as the planners see them, into
// NewModel's cards (index and scheme), in the given order. Errors wrap
// partition.ErrFleet.
func ModelCards(node []partition.FleetCard) ([]Card, error) { return engine.ModelCards(node) }

// DefaultProfiles is a profile set to advertise by default for scheme s
// (Card.Profiles, and WithProfiles): one profile per compute size, the
// first in the scheme's order among those that take no extra. Every
// advertised profile x placement is a device the scheduler evaluates on
// every node for every pod. A nil s has no profiles.
func DefaultProfiles(s *partition.Scheme) []string { return engine.DefaultProfiles(s) }

// Pools returns the model as device pools for a device.Inventory: its
// counter sets and one device per model device, in model order, fresh
// copies the caller may add attributes and taints to. name is the pool's
// name (usually the node's). Callers must not assume the pool's name or
// count: map a device back to its card, profile and placement with
// Scheme.ParseDeviceName.
func (m Model) Pools(name string) []device.Pool { return m.engine().Pools(name) }

// Slices is Pools as ready ResourceSlice objects for in-process use
// (simulations): counter sets 8 per slice in slices of their own, then
// devices 64 per slice, in model order, named so that name order and
// slice order agree.
func (m Model) Slices(
	driver, pool, nodeName string, generation int64,
) []*resourceapi.ResourceSlice {
	return m.engine().Slices(driver, pool, nodeName, generation)
}

// Reorder returns a copy of the model whose devices come in the order of
// names; devices not named keep their relative order after the named
// ones. An unknown name is an error.
func (m Model) Reorder(names []string) (Model, error) {
	r, err := m.engine().Reorder(names)
	return Model(r), err
}

// Only returns a copy of the model with exactly the named devices, in
// the given order. An unknown or repeated name is an error.
func (m Model) Only(names []string) (Model, error) {
	r, err := m.engine().Only(names)
	return Model(r), err
}
