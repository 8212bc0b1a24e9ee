package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/plan"
)

// Publication modes of dynamic-MIG GPUs (WithMIGLayout; the command's
// --mig-publication).
const (
	// PublicationPlacements lists every advertised profile x placement
	// that still fits, with shared counters, in a pool per GPU.
	PublicationPlacements = "placements"
	// PublicationLayout publishes each GPU's current layout, kept in the
	// node's layout ledger (package partition/ledger), without counters,
	// in the pool "<node>/layout" of one slice
	// (docs/dynamic-mig-publication.md).
	PublicationLayout = "layout"
)

// LayoutLedger is the node's side of its layout ledger (ledger.Agent is
// one): Sync plans the node's layout for the GPUs as the driver sees
// them, by compare-and-swap on the ledger, and returns what to publish.
type LayoutLedger interface {
	// Pool is the node's layout pool name (ledger.PoolName).
	Pool() string
	// Sync is ledger.Agent.Sync.
	Sync(
		ctx context.Context,
		cards []ledger.AgentCard,
	) (*ledger.Ledger, []partition.PublishedCard, map[int]string, error)
}

// changeNotifier is a LayoutLedger that says when the ledger changed
// (ledger.Agent.OnChange).
type changeNotifier interface {
	OnChange(func())
}

// WithMIGLayout publishes the dynamic-MIG GPUs as their layouts
// (PublicationLayout) instead of every placement with counters: per GPU
// the MIG devices claims hold and the free ones the node's ledger has
// open for the planner's demand, or the GPU whole while nothing of it is
// used or asked for, planned by l on every inventory with what NVML and
// the MIG journal say is in use (made, being made or destroyed, the GPU
// used whole). All dynamic GPUs of the node are the pool l.Pool() (groups
// beyond 64 devices), of one slice each; the node's full GPUs and static
// MIG devices stay in the pool named after the node, so the layout
// webhook sees only allocations of layout devices.
//
// What it needs besides: the planner (package partition/fleet; the
// chart's planner Deployment) seeds the node's ledger and writes its
// demand, and the webhook (admission.LayoutGuard) admits every
// allocation of a layout device through the ledger. A GPU a claim holds
// a device of through another pool (the placements publication's, before
// the driver was switched to the layout) publishes nothing until the
// claim lets go. A GPU that cannot be used whole (an Ampere GPU, a vGPU
// guest, WithoutWholeDynamicGPUs) publishes nothing while idle and
// unasked. If l has OnChange, the driver republishes on its changes.
func WithMIGLayout(l LayoutLedger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("MIG layout: ledger is nil")
		}
		o.layoutSrc = l
		return nil
	}
}

// layoutTimeout bounds a ledger write inside an inventory.
const layoutTimeout = 5 * time.Second

// layoutPools is the layout publication of the dynamic GPUs, in the
// node's layout pool(s), with devs filled in.
func (d *Driver) layoutPools(
	fleet []mig.FleetGPU,
	gpus []*gpuInfo,
	devs map[string]devInfo,
) ([]device.Pool, error) {
	byIndex := map[int]*gpuInfo{}
	for _, g := range gpus {
		byIndex[g.Index] = g
	}
	// In use on the node: what NVML lists and what the MIG journal holds.
	intents, err := d.lc.Intents()
	if err != nil {
		return nil, err
	}
	logger := klog.Background().WithName("mig-layout")
	var cards []ledger.AgentCard
	for _, f := range fleet {
		g := byIndex[f.Index]
		u := ledger.InUse{Made: f.Layout}
		u.Journal, u.Whole = lifecycle.CardInUse(intents, g.UUID)
		ok, _ := d.wholeNow(g)
		c, errs := u.Card(ledger.AgentCard{
			Index: g.Index, Scheme: g.product.Scheme(), Profiles: g.profiles, NoWhole: !ok,
		})
		for _, err := range errs {
			logger.Error(err, "an in-use MIG device overlaps another", "gpu", g.Index)
		}
		cards = append(cards, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), layoutTimeout)
	defer cancel()
	l := d.o.layoutSrc
	_, layout, withheld, err := l.Sync(ctx, cards)
	if err != nil && layout == nil {
		return nil, err
	}
	d.layoutLog.Log(logger, withheld, err)

	// The devices: the counter model's, without counters, for every
	// advertised profile and those in use.
	var model []mig.GPU
	for _, c := range layout {
		g := byIndex[c.Index]
		ps := slices.Clone(g.profiles)
		for _, in := range c.Layout {
			if !slices.Contains(ps, in.Profile) {
				ps = append(ps, in.Profile)
			}
		}
		model = append(model, mig.GPU{Index: g.Index, Product: g.product, Profiles: ps})
	}
	m, err := mig.NewCounterModel(model)
	if err != nil {
		return nil, err
	}
	pools, err := m.LayoutPools(
		l.Pool(),
		layout,
		counter.WithPoolDevices(device.MaxDevicesPerSliceWithTaintsOrCounters),
	)
	if err != nil {
		return nil, err
	}
	for _, p := range pools {
		for _, dev := range p.Devices {
			if err := d.decorateDynamic(dev, p.Name, byIndex, devs); err != nil {
				return nil, err
			}
		}
	}
	return pools, nil
}

// LayoutOptions are the ledger.NewAgent options of the reference
// driver's layout: its pools of at most 64 devices (health taints lower
// the API's limit) and its default mix (DefaultMix restricted to the
// advertised profiles). profiles are the advertised profiles per product
// (nil: mig.DefaultProfiles).
func LayoutOptions() []ledger.Option {
	return []ledger.Option{
		ledger.WithPoolDevices(device.MaxDevicesPerSliceWithTaintsOrCounters),
		ledger.WithDefaultMix(func(s *partition.Scheme) []string {
			p, err := mig.Lookup(s.Name)
			if err != nil {
				return plan.DefaultMix(s)
			}
			var out []string
			adv := mig.DefaultProfiles(p)
			for _, name := range plan.DefaultMix(s) {
				if slices.Contains(adv, name) {
					out = append(out, name)
				}
			}
			return out
		}),
	}
}

// Schemes resolves a ledger card's scheme name (a MIG product's name) to
// its partition scheme: the planner's partition/fleet.WithSchemes.
func Schemes(name string) (*partition.Scheme, error) {
	p, err := mig.Lookup(name)
	if err != nil {
		return nil, err
	}
	return p.Scheme(), nil
}

// decorateDynamic gives a dynamic GPU's device of pool (the counter
// model's) the driver's attributes and records it in devs.
func (d *Driver) decorateDynamic(
	dev *device.Device,
	pool string,
	byIndex map[int]*gpuInfo,
	devs map[string]devInfo,
) error {
	ref, err := mig.ParseDeviceName(dev.Name())
	if err != nil {
		return err
	}
	g := byIndex[ref.GPU]
	if g == nil {
		return fmt.Errorf("device %s: no dynamic GPU %d", dev.Name(), ref.GPU)
	}
	if ref.Profile == "" {
		d.common(dev, g, TypeGPU, ModeDynamic).
			StringAttribute(AttrUUID, g.UUID).
			Capacity(mig.CapMemory, mib(g.MemoryMiB), nil)
		info := d.wholeInfo(g)
		info.pool = pool
		devs[dev.Name()] = info
		return nil
	}
	pr, err := g.product.Profile(ref.Profile)
	if err != nil {
		return err
	}
	if d.o.fullMIG {
		d.common(dev, g, TypeMIG, ModeDynamic).StringAttribute(AttrParentUUID, g.UUID)
	} else {
		d.lean(dev, g)
	}
	devs[dev.Name()] = devInfo{
		pool:    pool,
		gpu:     g.Index,
		mode:    ModeDynamic,
		typ:     TypeMIG,
		profile: pr.Name,
		key:     Key{GPU: g.Index, UUID: g.UUID, ProfileID: pr.ID, Start: ref.Start},
		part:    lifecycle.Key{Card: g.UUID, Profile: pr.Name, Start: ref.Start},
	}
	return nil
}

// MaxPerClaim is how many devices of a MIG profile (partition.WholeCard:
// whole GPUs) one claim could get on this node at most: for whole GPUs
// the GPUs that are or can be used whole, for a profile the most
// instances of it its GPUs hold (the profile's maximum per GPU, on every
// GPU that has it). A pending claim asking for more cannot be allocated
// here, and the layout must not serve it
// (claimwatch.WithMaxPerClaim; LayoutWatchOptions' caller adds it).
func (d *Driver) MaxPerClaim(profile string) int {
	n := 0
	gpus := d.hw()
	for i := range gpus {
		g := &gpus[i]
		if profile == partition.WholeCard {
			ok, _ := g.wholeOK()
			if g.product == nil || !d.dynamic(g) || ok && !d.o.noWholeDynamic {
				n++
			}
			continue
		}
		if g.product == nil {
			continue
		}
		if pr, err := g.product.Profile(profile); err == nil {
			n += pr.MaxCount
		}
	}
	return n
}
