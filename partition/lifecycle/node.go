package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
)

// Card is one partitionable card of a node, for [NewNode].
type Card struct {
	// ID is the card's stable identity ([Key.Card]): a serial number or
	// a UUID, never an index. It is published as the scheme's UUID
	// attribute.
	ID string
	// Scheme is the card's partition scheme, built by
	// partition.NewScheme. A node may mix schemes (card models).
	Scheme *partition.Scheme
}

// Binding is what a vendor writes for a driver whose partitions are
// made at prepare: the node's cards, its partition tool, the container
// edits of a device, and optionally its configuration and health. The
// rest is [Node]'s.
type Binding struct {
	// Driver is the driver's name, as given to driver.New.
	Driver string
	// NodeName names the node's pools (partition.Scheme.PoolName).
	NodeName string
	// Cards are the node's cards; card i's devices are named with
	// index i by its scheme ("gpu-0", "gpu-0-cpx-nps4-3"). Discover them
	// in a stable order (by bus address).
	Cards []Card
	// Tool makes, destroys and lists the cards' partitions. It may be a
	// [WholeSwitcher] (cards with a whole mode) and a [ConfigCreator]
	// (a setting from the claim at create).
	Tool Tool
	// Edits returns the container edits of one prepared device: p is
	// its partition as the tool made it, or for a card used whole its
	// key with ID set to the card's; config is the device's opaque
	// configuration as Configs decoded it (nil when none applies).
	// Name environment variables per device (see driver.PreparedDevice).
	Edits func(dev driver.AllocatedDevice, p Partition, config any) (*cdi.Edits, error)
	// Configs decodes and checks the claims' opaque configuration, the
	// scheme a webhook (package admission) shares. nil: the driver takes
	// none, and a claim that brings some fails its prepare.
	Configs *driver.ConfigScheme
	// Health, when set, says whether a card serves: nil is healthy, an
	// error makes the card and every partition on it Unhealthy (a
	// NoSchedule taint) with the error as message. It is called every
	// HealthInterval.
	Health func(ctx context.Context, card string) error
	// HealthInterval is how often Health is called; default
	// [DefaultHealthInterval]. It must be shorter than the runtime's
	// health timeout (driver.WithHealthTimeout).
	HealthInterval time.Duration
}

// DefaultHealthInterval is how often [Binding.Health] is called unless
// the binding says otherwise: a third of the runtime's default health
// timeout.
const DefaultHealthInterval = 10 * time.Second

// Node is a driver's dynamic partitioning on one node, assembled from a
// [Binding]: hand it to driver.New as both the discoverer and the
// preparer. It guarantees, besides what [Manager] does:
//
//   - its inventory (a device.DynamicDiscoverer) is one pool per card
//     (counter.Model.CardPools) with only the devices that still
//     fit beside the partitions the claims hold, in the planner's order,
//     republished after every change, with the cards' health;
//   - every device of a claim has its configuration checked before
//     anything of the claim is made, and its partition made with it
//     (a [ConfigCreator]);
//   - a card is offered whole too, with or without a mode switch;
//   - each prepared device records its [Key] as its data, so that a
//     restart finds the partitions of the claims the runtime holds.
//
// Close releases the state folder.
type Node struct {
	*Manager
	*device.DynamicDiscoverer
	b     Binding
	model counter.Model
}

// NewNode opens the lifecycle in the state folder state (see [Open]) for
// b's cards, each of them named dynamic unless opts name others
// ([WithDynamicCards]), republishing after each change, and returns the
// node's discoverer and preparer. It fails for a binding without driver
// name, node name, tool or edits, and for cards the counter model
// cannot publish.
func NewNode(b Binding, state string, opts ...Option) (*Node, error) {
	switch {
	case b.Driver == "" || b.NodeName == "" || b.Tool == nil || b.Edits == nil:
		return nil, errors.New("new partition node: " +
			"the binding needs a driver name, a node name, a tool and edits")
	case b.HealthInterval == 0:
		b.HealthInterval = DefaultHealthInterval
	}
	n := &Node{b: b}
	cards := make([]counter.Card, len(b.Cards))
	ids := make([]string, len(b.Cards))
	for i, c := range b.Cards {
		cards[i], ids[i] = counter.Card{Index: i, Scheme: c.Scheme, UUID: c.ID}, c.ID
	}
	var err error
	if n.model, err = counter.NewModel(cards); err != nil {
		return nil, fmt.Errorf("new partition node: %w", err)
	}
	src := device.HealthChannel(make(chan []device.HealthReport))
	if b.Health != nil {
		src = device.PollHealth(b.HealthInterval, n.health)
	}
	if n.DynamicDiscoverer, err = device.NewDynamicDiscoverer(n.inventory, src); err != nil {
		return nil, fmt.Errorf("new partition node: %w", err)
	}
	own := []Option{WithDynamicCards(ids...),
		WithRepublish(n.DynamicDiscoverer.Changed, DefaultRepublishDelay, DefaultRepublishInterval)}
	if b.Configs != nil {
		own = append(own, WithConfigs(b.Configs))
	}
	if n.Manager, err = Open(state, b.Tool, n.Key, append(own, opts...)...); err != nil {
		return nil, err
	}
	return n, nil
}

// Changed schedules a republish (see [Manager.Changed]): for a change
// the lifecycle did not make, such as a card lost or back.
func (n *Node) Changed() { n.Manager.Changed() }

// Key names the partition of an allocated device of the node: by the key
// its prepare recorded in data when there is one, else by its name
// ([Binding.Key]).
func (n *Node) Key(dev driver.AllocatedDevice, data json.RawMessage) (Key, bool) {
	var k Key
	if json.Unmarshal(data, &k) == nil && k.check() == nil {
		return k, true
	}
	return n.b.Key(dev.Device)
}

// Key names the partition of a device of the binding's node by its name
// in its card's scheme; ok is false for a name that is no card and no
// partition of the node.
func (b Binding) Key(device string) (k Key, ok bool) {
	for i, c := range b.Cards {
		if i > 0 && c.Scheme == b.Cards[i-1].Scheme {
			continue
		}
		ref, err := c.Scheme.ParseDeviceName(device)
		if err != nil || ref.Card >= len(b.Cards) || b.Cards[ref.Card].Scheme != c.Scheme {
			continue
		}
		id := b.Cards[ref.Card].ID
		return Key{Card: id, Profile: ref.Profile, Start: ref.Start, Whole: ref.Profile == ""}, true
	}
	return k, false
}

// PrepareClaim is [Manager.PrepareClaim], refusing first any opaque
// configuration when the binding has no Configs.
func (n *Node) PrepareClaim(ctx context.Context, claim driver.Claim,
	devs []driver.AllocatedDevice) error {
	for _, dev := range devs {
		if n.b.Configs == nil && len(dev.Config) > 0 {
			err := fmt.Errorf("device %s: %w: the driver takes none",
				dev.ID(), driver.ErrInvalidConfig)
			return driver.NewClaimError(driver.ReasonConfig, err)
		}
	}
	return n.Manager.PrepareClaim(ctx, claim, devs)
}

// PrepareDevice hands the container the device's partition, as
// PrepareClaim made it (or, for admin access, as it is), through the
// binding's Edits, and records the partition's key.
func (n *Node) PrepareDevice(ctx context.Context, _ driver.Claim, dev driver.AllocatedDevice) (
	driver.PreparedDevice, error) {
	k, ok := n.Key(dev, nil)
	if !ok {
		err := fmt.Errorf("device %s is no card or partition of the node", dev.ID())
		return driver.PreparedDevice{}, err
	}
	var cfg any
	var err error
	if n.b.Configs != nil {
		if cfg, err = n.b.Configs.Decode(dev); err != nil {
			return driver.PreparedDevice{}, driver.NewClaimError(driver.ReasonConfig, err)
		}
	}
	p, err := n.partition(ctx, k)
	if err != nil {
		return driver.PreparedDevice{}, fmt.Errorf("device %s: %w", dev.ID(), err)
	}
	edits, err := n.b.Edits(dev, p, cfg)
	if err != nil {
		return driver.PreparedDevice{}, fmt.Errorf("device %s: container edits: %w", dev.ID(), err)
	}
	data, _ := json.Marshal(k) // a Key always marshals
	return driver.PreparedDevice{Edits: edits, Data: data}, nil
}

// partition is the partition at k: the card for a whole key, else what
// this process made or, failing that, what the tool lists.
func (n *Node) partition(ctx context.Context, k Key) (Partition, error) {
	if k.Whole {
		return Partition{Key: k, ID: k.Card, Complete: true}, nil
	}
	if p, ok := n.Made(k); ok {
		return p, nil
	}
	parts, err := n.toolList(ctx, k.Card)
	if err != nil {
		return Partition{}, fmt.Errorf("find partition %s: %w", k, err)
	}
	at := func(p Partition) bool { return p.Key == k && p.Complete }
	if i := slices.IndexFunc(parts, at); i >= 0 {
		return parts[i], nil
	}
	return Partition{}, fmt.Errorf("partition %s was not made", k)
}

// UnprepareDevice has nothing to do: UnprepareClaim destroys the claim's
// partitions.
func (n *Node) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice,
	json.RawMessage) error {
	return nil
}

// inventory publishes, card by card, what still fits beside the
// partitions the claims hold.
func (n *Node) inventory(context.Context) (*device.Inventory, error) {
	intents, err := n.Intents()
	fleet := make([]partition.FleetCard, len(n.b.Cards))
	for i, c := range n.b.Cards {
		fleet[i] = partition.FleetCard{Node: n.b.NodeName, Index: i, Scheme: c.Scheme}
	}
	for _, in := range intents {
		i := slices.IndexFunc(n.b.Cards, func(c Card) bool { return c.ID == in.Card })
		if i >= 0 && !in.Whole && !in.Released() {
			use := partition.Instance{Profile: in.Profile, Start: in.Start, InUse: true}
			fleet[i].Layout = append(fleet[i].Layout, use)
		}
	}
	pools, perr := n.model.CardPools(n.b.NodeName, fleet, counter.WithFitOnly())
	return &device.Inventory{Driver: n.b.Driver, Pools: pools}, errors.Join(err, perr)
}

// health reports each card (its counter set, which every device on it
// consumes) by the binding's Health.
func (n *Node) health(ctx context.Context) ([]device.HealthReport, error) {
	out := make([]device.HealthReport, len(n.b.Cards))
	for i, c := range n.b.Cards {
		id := device.DeviceID{Pool: c.Scheme.PoolName(n.b.NodeName, i),
			Device: c.Scheme.CounterSetName(i)}
		out[i] = device.HealthReport{Device: id, Health: device.Healthy}
		if err := n.b.Health(ctx, c.ID); err != nil {
			out[i].Health, out[i].Message = device.Unhealthy, err.Error()
			out[i].Reason = "CardUnavailable"
		}
	}
	return out, nil
}
