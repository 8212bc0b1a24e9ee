package partition

import "github.com/drakit/drakit/internal/engine"

// Scheme is one card model: its Memory and Compute Units, MemoryBytes,
// MaxPartitions, Profiles, Extras and Names, and an optional Canonical
// that maps a vendor's alias of a profile name to the profile's name.
// Build it with NewScheme; a built Scheme is read-only and safe for
// concurrent use. Its methods validate (Validate, IsMaximal), enumerate
// (Layouts, ProfileNames, Modes), score and draw (Score, Picture) layouts,
// and name devices (DeviceName, ParseDeviceName, CardDeviceName,
// CounterSetName, PoolName, MaxLayoutDevices). The fields and methods are
// documented on the implementation's type (go doc
// github.com/drakit/drakit/internal/engine.Scheme).
type Scheme = engine.Scheme

// NewScheme checks def and returns the built scheme, with the tables the
// counter model, the planner and the defragmenter need. The error wraps
// ErrInvalidScheme and names the field at fault. def is copied; later
// changes to it do not reach the result.
func NewScheme(def Scheme) (*Scheme, error) { return engine.NewScheme(def) }

// Units is one of a card's two resources, memory or compute: Count units
// (0: the scheme does not divide it), Placed when a partition sits on
// particular units, counted by number otherwise.
type Units = engine.Units

// Profile is one partition size: Name and ID, Compute and Memory units,
// MemoryBytes, MaxCount per card, the allowed Placements, the Extras it
// takes, the card-wide Mode it needs, and Capacities published on its
// devices.
type Profile = engine.Profile

// Placement is one place a partition of a profile may sit: Start names
// it (unique in the profile; it appears in layouts and device names),
// Memory and Compute are the first placed unit of each.
type Placement = engine.Placement

// Extra is a per-card resource beside memory and compute (a media
// engine): Name and the card's Capacity. Profiles take extras by name.
type Extra = engine.Extra

// Names are what a scheme's devices, counter sets, counters, attributes
// and capacities are called when published, and the nouns of its
// messages. An empty field takes its default; Omit leaves an attribute
// out.
type Names = engine.Names

// Instance is the one name of a partition at a place on a card: Profile
// and Start (the placement), InUse when a workload holds it (no plan
// destroys it) and Restartable when that workload may be moved (see
// plan.Defragment). String prints "profile@start", "*" when in use.
// lifecycle.Key is the same place with the card's stable identity in
// place of its index; DeviceRef adds a card's index.
type Instance = engine.Instance

// Layout is the set of partitions of one card. Order carries no meaning;
// String prints it sorted by start, Sorted returns a sorted copy.
type Layout = engine.Layout

// ParseLayout reads a comma-separated list of "profile@start" items, each
// optionally followed by "*" for in use; "" and "-" are the empty layout.
// It checks the syntax only; Scheme.Validate checks the rules.
func ParseLayout(s string) (Layout, error) { return engine.ParseLayout(s) }

// DeviceRef is what a device name of a scheme says, as
// Scheme.ParseDeviceName reads it: the Card index, and the partition's
// Profile and Start ("" and 0 for the whole card).
type DeviceRef = engine.DeviceRef

// FleetCard is one card at a place: the Node, its Index there, its
// Scheme (built by NewScheme; never nil) and its current Layout, whose
// in-use partitions no plan touches. It is the input of the counter
// model's order (counter.Preference) and of every planner (package plan).
type FleetCard = engine.FleetCard

// Errors that a caller may test with errors.Is.
var (
	// ErrInvalidScheme is wrapped by NewScheme's errors.
	ErrInvalidScheme = engine.ErrInvalidScheme
	// ErrSchemeNotBuilt is wrapped for a nil Scheme or one not built by
	// NewScheme.
	ErrSchemeNotBuilt = engine.ErrSchemeNotBuilt
	// ErrUnknownProfile is wrapped when a name is not one of a scheme's
	// profiles.
	ErrUnknownProfile = engine.ErrUnknownProfile
	// ErrDeviceName is wrapped by Scheme.ParseDeviceName for a name that
	// is not one of the scheme's devices.
	ErrDeviceName = engine.ErrDeviceName
	// ErrFleet is wrapped for invalid cards or requests given to the
	// counter model's order or a planner.
	ErrFleet = engine.ErrFleet

	// The rules Scheme.Validate checks: its error wraps exactly one of
	// these and names the partition at fault. A placement the profile
	// does not allow, two partitions on one placed unit, more than a
	// profile's MaxCount, more of an extra than the card has, more
	// counted compute or memory than the card has, more than
	// MaxPartitions, two modes on one card.
	ErrPlacement  = engine.ErrPlacement
	ErrOverlap    = engine.ErrOverlap
	ErrMaxCount   = engine.ErrMaxCount
	ErrExtra      = engine.ErrExtra
	ErrCompute    = engine.ErrCompute
	ErrMemory     = engine.ErrMemory
	ErrPartitions = engine.ErrPartitions
	ErrMode       = engine.ErrMode
)

// Limits of a scheme, set by the planner's compact state of a card.
const (
	// MaxProfiles is the most profiles a scheme may have.
	MaxProfiles = engine.MaxProfiles
	// MaxPlacedUnits is the most units a placed dimension may have.
	MaxPlacedUnits = engine.MaxPlacedUnits
	// MaxCountedUnits is the most units a counted dimension may have.
	MaxCountedUnits = engine.MaxCountedUnits
	// MaxExtras is the most extra counters a scheme may have.
	MaxExtras = engine.MaxExtras
)

// WholeCard is the profile name of a whole card where a demand or a
// request names profiles: a card used whole, not partitioned.
const WholeCard = engine.WholeCard

// Omit, as an attribute's name in Names, leaves that attribute out.
const Omit = engine.Omit

// LayoutCard is one card of a node in the layout publication: its Index,
// its Scheme and its Layout. As plan.PlanLayouts' input, Layout holds the
// in-use partitions (kept) and the free ones published now; as its
// output, the partitions to publish, empty for the whole card.
// WholeInUse: the whole card is allocated (Layout empty).
type LayoutCard = engine.LayoutCard

// PublishedCard is one card as a node's layout publication publishes it:
// a LayoutCard, or nothing at all when Withheld (ledger.Ledger.Layout
// withholds a card it may not offer now). It is what
// counter.Model.LayoutPools takes; plan.PlanLayouts' output becomes one
// through Published.
type PublishedCard = engine.PublishedCard

// Published returns cards (plan.PlanLayouts' output) as published cards,
// none withheld, in cards' order.
func Published(cards []LayoutCard) []PublishedCard { return engine.Published(cards) }
