package driver

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/lifecycle"
)

// Publication modes of dynamic-MIG GPUs (WithMIGLayout; the command's
// --mig-publication).
const (
	// PublicationPlacements lists every advertised profile x placement
	// that still fits, with shared counters, in a pool per GPU: the
	// default.
	PublicationPlacements = "placements"
	// PublicationLayout publishes each GPU's current layout, chosen by
	// the planner for what claims hold and ask for, without counters, in
	// one pool of one slice per node (docs/dynamic-mig-publication.md).
	PublicationLayout = "layout"
)

// LayoutSource tells the layout publication what claims hold and ask
// for (claimwatch.Watcher is one).
type LayoutSource interface {
	// Allocated returns the devices of pool that claims hold, allocated
	// whether or not prepared yet.
	Allocated(pool string) []string
	// Demand returns what pending claims ask for, per MIG profile
	// (partition.WholeCard: whole GPUs).
	Demand() partition.Demand
}

// publishedSource is a LayoutSource that knows what the node had
// published when this process started (claimwatch.WithPublished).
type publishedSource interface {
	Published(pool string) []string
}

// changeNotifier is a LayoutSource that says when what it tells changed
// (claimwatch.Watcher.OnChange).
type changeNotifier interface {
	OnChange(func())
}

// WithMIGLayout publishes the dynamic-MIG GPUs as their layouts
// (PublicationLayout) instead of every placement with counters: per GPU
// the MIG devices in use (prepared, or allocated to a claim as src says)
// and the free memory slices laid out by the planner for src's demand
// (partition.LayoutPublisher: the retired devices of a re-layout are
// fenced for partition.DefaultFence before anything overlapping them is
// published), or the GPU whole while nothing of it is used or asked for.
// All dynamic GPUs of the node are one pool named after the node, of one
// slice (with the node's full GPUs and static MIG devices), so the
// scheduler never sees half a version; the scheduler's CPU per pod is
// about that of simple devices (README, "The scheduler's throughput").
//
// What it needs besides: src must see every allocation of the node's
// devices (a ResourceClaim watch: claimwatch); the webhook of the chart's
// migPublication=layout (admission.LayoutGuard), which refuses an
// allocation of a device no longer published, so that an allocation the
// scheduler decided on an older version cannot land on a device re-laid
// out since. A GPU some claim holds a device of through the placements
// publication's pool (mig.GPUPoolName: allocated before the driver was
// switched to the layout) publishes nothing until those claims are
// deallocated, so that no MIG device is listed under two names. A pod
// asking for a profile the layout lacks waits for the next layout
// (docs/dynamic-mig-publication.md measures the wait). A GPU that cannot
// be used whole (an Ampere GPU, a vGPU guest, WithoutWholeDynamicGPUs)
// publishes nothing while idle and no claim asks for its profiles. If src
// has OnChange, the driver republishes on its changes.
func WithMIGLayout(src LayoutSource) Option {
	return func(o *options) error {
		if src == nil {
			return errors.New("MIG layout: source is nil")
		}
		o.layoutSrc = src
		return nil
	}
}

// layoutState is the layout publication's: the publisher, made at the
// first inventory, and the timer of its next retry.
type layoutState struct {
	pub   *partition.LayoutPublisher
	cards []int // the publisher's GPU indices
	retry *time.Timer
	at    time.Time
	// foreign is, per GPU withheld for it, the devices claims hold
	// through the placements publication's pool (as last logged).
	foreign map[int][]string
}

// layoutPools is the layout publication of the dynamic GPUs: a pool named
// after the node unless the node pool already has limit's worth of
// devices (then partition.LayoutPools' groups), with devs filled in.
// nodeDevices is how many devices the node pool already has.
func (d *Driver) layoutPools(fleet []mig.FleetGPU, gpus []*gpuInfo, devs map[string]devInfo, nodeDevices int) ([]device.Pool, error) {
	byIndex := map[int]*gpuInfo{}
	var cards []partition.Card
	for _, g := range gpus {
		byIndex[g.Index] = g
		cards = append(cards, partition.Card{Index: g.Index, Scheme: g.product.Scheme()})
	}
	indices := make([]int, len(cards))
	for i, c := range cards {
		indices[i] = c.Index
	}
	// Health taints lower the API's limit of devices per slice to 64,
	// shared with the node pool's devices when the layout joins it.
	limit := max(1, device.MaxDevicesPerSliceWithTaintsOrCounters-nodeDevices)
	d.layoutMu.Lock()
	defer d.layoutMu.Unlock()
	ls := &d.layout
	if ls.pub == nil || !slices.Equal(ls.cards, indices) {
		pub, err := partition.NewLayoutPublisher(cards, partition.WithDefaultMix(d.defaultMix(byIndex)))
		if err != nil {
			return nil, err
		}
		d.restoreLayout(pub, cards, byIndex, limit)
		ls.pub, ls.cards, ls.foreign = pub, indices, map[int][]string{}
	}

	// In use: what NVML holds on the GPU, what the journal holds (a
	// device being made, the GPU whole), and what claims hold.
	intents, err := d.lc.Intents()
	if err != nil {
		return nil, err
	}
	poolNames, err := d.layoutPoolNames(cards, limit)
	if err != nil {
		return nil, err
	}
	var held []string
	for _, p := range poolNames {
		held = append(held, d.o.layoutSrc.Allocated(p)...)
	}
	allocated := devicesByGPU(held)
	var uses []partition.CardUse
	for _, f := range fleet {
		g := byIndex[f.Index]
		u := partition.CardUse{Index: f.Index}
		add := func(profile string, start int) {
			in := partition.Instance{Profile: profile, Start: start, InUse: true}
			if slices.ContainsFunc(u.InUse, func(x partition.Instance) bool { return x.Profile == in.Profile && x.Start == in.Start }) {
				return
			}
			if err := g.product.Validate(append(slices.Clone(u.InUse), in)); err != nil {
				klog.Background().Error(err, "MIG layout: an in-use device overlaps another; left out of the layout", "gpu", g.Index, "device", mig.DeviceRef{GPU: g.Index, Profile: profile, Start: start}.String())
				return
			}
			u.InUse = append(u.InUse, in)
		}
		for _, in := range f.Layout {
			add(in.Profile, in.Start)
		}
		for _, in := range intents {
			switch {
			case in.Card != g.UUID || in.Released():
			case in.Whole:
				u.Whole = true
			default:
				add(in.Profile, in.Start)
			}
		}
		if a := allocated[g.Index]; a != nil {
			u.Whole = u.Whole || a.whole
			for _, in := range a.parts {
				if pr, err := g.product.Profile(in.Profile); err == nil {
					add(pr.Name, in.Start)
				}
			}
		}
		if u.Whole && len(u.InUse) > 0 {
			// The GPU whole is held, or allocated, beside MIG devices: only
			// while one is going and the other coming. The MIG devices
			// stay published; the whole GPU waits.
			u.Whole = false
		}
		uses = append(uses, u)
	}
	demand := d.o.layoutSrc.Demand()
	now := time.Now()
	v, err := ls.pub.Next(uses, demand, now)
	if err != nil {
		return nil, err
	}
	if v.HeldBack > 0 && !v.Retry.IsZero() && (ls.retry == nil || !ls.at.Equal(v.Retry)) {
		if ls.retry != nil {
			ls.retry.Stop()
		}
		ls.at = v.Retry
		ls.retry = time.AfterFunc(v.Retry.Sub(now), d.kickWatch)
	}

	// The devices: the counter model's, without counters, for every
	// advertised profile and those in use.
	var model []mig.GPU
	for _, u := range uses {
		g := byIndex[u.Index]
		ps := slices.Clone(g.profiles)
		for _, in := range u.InUse {
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
	cardsOut := v.Cards
	for i, c := range cardsOut {
		// A GPU that cannot be used whole publishes nothing rather than
		// its whole device.
		if len(c.Layout) == 0 && !c.Withheld && !c.WholeInUse {
			if ok, _ := d.wholeNow(byIndex[c.Index]); !ok {
				cardsOut[i].Withheld = true
			}
		}
		// A GPU some claim holds a device of through the placements
		// publication's pool (allocated before the driver switched to
		// the layout) publishes nothing until those claims let go: the
		// layout would list the same MIG device in another pool, a
		// device the scheduler sees as free, and hand it out twice.
		if held := d.o.layoutSrc.Allocated(mig.GPUPoolName(d.node, c.Index)); len(held) > 0 {
			cardsOut[i].Withheld = true
			if !slices.Equal(ls.foreign[c.Index], held) {
				klog.Background().Info("MIG layout: GPU withheld: claims hold its devices through the placements publication's pool; published again once they are deallocated",
					"gpu", c.Index, "pool", mig.GPUPoolName(d.node, c.Index), "devices", held)
			}
			ls.foreign[c.Index] = held
		} else {
			delete(ls.foreign, c.Index)
		}
	}
	pools, err := m.LayoutPools(d.node, cardsOut, partition.WithPoolDevices(limit))
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

// gpuDevices is what device names of the counter model say per GPU: its
// whole device, and its MIG devices as a layout. Other names are skipped.
type gpuDevices struct {
	whole bool
	parts mig.Layout
}

// devicesByGPU reads names once into gpuDevices per GPU index.
func devicesByGPU(names []string) map[int]*gpuDevices {
	out := map[int]*gpuDevices{}
	for _, n := range names {
		ref, err := mig.ParseDeviceName(n)
		if err != nil {
			continue
		}
		g := out[ref.GPU]
		if g == nil {
			g = &gpuDevices{}
			out[ref.GPU] = g
		}
		if ref.Profile == "" {
			g.whole = true
		} else {
			g.parts = append(g.parts, mig.Instance{Profile: ref.Profile, Start: ref.Start})
		}
	}
	return out
}

// layoutPoolNames is the names of the pools LayoutPools makes of cards
// (partition.LayoutPoolNames).
func (d *Driver) layoutPoolNames(cards []partition.Card, limit int) ([]string, error) {
	lc := make([]partition.LayoutCard, len(cards))
	for i, c := range cards {
		lc[i] = partition.LayoutCard{Index: c.Index, Scheme: c.Scheme}
	}
	return partition.LayoutPoolNames(d.node, lc, partition.WithPoolDevices(limit))
}

// defaultMix is the profiles a partitioned GPU's free space is filled
// with: partition.DefaultMix's that the GPU advertises, or else its
// smallest advertised profile.
func (d *Driver) defaultMix(byIndex map[int]*gpuInfo) func(s *partition.Scheme) []string {
	return func(s *partition.Scheme) []string {
		var adv []string
		for _, g := range byIndex {
			if g.product.Scheme() == s {
				adv = g.profiles
				break
			}
		}
		var out []string
		for _, p := range partition.DefaultMix(s) {
			if slices.Contains(adv, p) {
				out = append(out, p)
			}
		}
		if len(out) == 0 && len(adv) > 0 {
			small := adv[0]
			for _, p := range adv {
				a, errA := s.Profile(p)
				b, errB := s.Profile(small)
				if errA == nil && errB == nil && a.Compute < b.Compute {
					small = p
				}
			}
			out = []string{small}
		}
		return out
	}
}

// decorateDynamic gives a dynamic GPU's device of pool (the counter
// model's) the driver's attributes and records it in devs.
func (d *Driver) decorateDynamic(dev *device.Device, pool string, byIndex map[int]*gpuInfo, devs map[string]devInfo) error {
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
	devs[dev.Name()] = devInfo{pool: pool, gpu: g.Index, mode: ModeDynamic, typ: TypeMIG, profile: pr.Name, key: Key{GPU: g.Index, UUID: g.UUID, ProfileID: pr.ID, Start: ref.Start}, part: lifecycle.Key{Card: g.UUID, Profile: pr.Name, Start: ref.Start}}
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

// restoreLayout tells a new publisher what the node published before
// this process (publishedSource), so that a restart keeps the free
// devices and fences those it drops. A GPU whose devices do not form a
// valid layout any more is left out (laid out afresh); a GPU that had
// nothing published is too.
func (d *Driver) restoreLayout(pub *partition.LayoutPublisher, cards []partition.Card, byIndex map[int]*gpuInfo, limit int) {
	src, ok := d.o.layoutSrc.(publishedSource)
	if !ok {
		return
	}
	pools, err := d.layoutPoolNames(cards, limit)
	if err != nil {
		klog.Background().Error(err, "MIG layout: what was published before the start is not restored")
		return
	}
	var names []string
	for _, pool := range pools {
		names = append(names, src.Published(pool)...)
	}
	before := devicesByGPU(names)
	var published []partition.LayoutCard
	for _, c := range cards {
		b := before[c.Index]
		switch {
		case b == nil:
		case len(b.parts) > 0 && !b.whole && byIndex[c.Index].product.Validate(b.parts) == nil:
			published = append(published, partition.LayoutCard{Index: c.Index, Scheme: c.Scheme, Layout: b.parts})
		case len(b.parts) == 0 && b.whole:
			published = append(published, partition.LayoutCard{Index: c.Index, Scheme: c.Scheme})
		}
	}
	if len(published) == 0 {
		return
	}
	if err := pub.Restore(published, time.Now()); err != nil {
		klog.Background().Error(err, "MIG layout: what was published before the start is not restored; the GPUs are laid out afresh")
	}
}
