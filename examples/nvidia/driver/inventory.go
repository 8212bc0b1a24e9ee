package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/topology"
)

// Inventory reads the GPUs' MIG modes and instances and returns the
// node's devices: full GPUs and static MIG devices in one pool named after
// the node (left out when it has none), each dynamic-MIG GPU in a pool of
// its own (mig.GPUPoolName: "<node>/gpu-04"):
//
//   - a GPU with MIG mode off is one device "gpu-<index>" (ModeFull);
//   - a GPU in MIG mode that is not dynamic (WithDynamicGPUs: the
//     recorded decision) publishes its MIG devices (ModeStatic), named
//     as in the counter model ("gpu-2-3g-71gb-4"), and never changes them;
//   - a dynamic GPU (ModeDynamic), whatever its MIG mode now:
//     every advertised profile x placement is a device consuming the
//     GPU's counter set (mig.CounterModel), created at prepare, and so is
//     the GPU whole ("gpu-<index>", consuming all of the set, so the
//     scheduler never gives it together with a MIG device of the GPU),
//     served with MIG mode off while no MIG device of the GPU is in use.
//     Their order is mig.Preference's for the node's current MIG
//     devices, so the scheduler's first fit is the planner's choice.
//
// Full GPUs and static MIG devices come in GPU order, a dynamic GPU's
// devices in the planner's order. A pool per dynamic GPU is what keeps
// every pool complete while dynamic MIG devices come and go (see
// mig.CounterModel.GPUPools): a MIG change rewrites one slice of one
// pool, in place, where one pool for all dynamic GPUs spanned several
// slices, got a new generation at nearly every change and was skipped by
// the scheduler, every GPU of the node with it, until it had seen every
// new slice. The scheduler walks pools by name, so the node pool comes
// first and the dynamic GPUs follow in index order.
func (d *Driver) Inventory(ctx context.Context) (*device.Inventory, error) {
	pool := device.Pool{Name: d.node}
	devs := map[string]devInfo{}
	var fleet []mig.FleetGPU
	var model []mig.GPU
	var dynamic []*gpuInfo
	var lost []int
	var shared []device.Pool // shared.go
	gpus := d.hw()
	for i := range gpus {
		g := &gpus[i]
		if g.broken != nil {
			// Unreadable since the start: published whole from what
			// NVML said, tainted lost (the health monitor's book), until
			// it answers (lostgpu.go).
			name := mig.DeviceRef{GPU: g.Index}.String()
			pool.Devices = append(pool.Devices, d.unreadable(device.New(name), g))
			devs[name] = devInfo{
				pool: pool.Name,
				gpu:  g.Index,
				mode: ModeFull,
				typ:  TypeGPU,
				uuid: g.UUID,
			}
			continue
		}
		mode, static, owned, err := d.gpuMode(g)
		if errors.Is(err, nvml.ErrGPULost) {
			d.health.markLost(g.Index, err)
			lost = append(lost, g.Index) // published as last seen, tainted
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("inventory: %w", err)
		}
		switch mode {
		case ModeFull:
			if d.sharedConfigured(g) || d.mps.has(g.UUID) {
				sp, err := d.sharedPool(g, devs)
				if err != nil {
					return nil, fmt.Errorf("inventory: %w", err)
				}
				shared = append(shared, sp)
				continue
			}
			name := mig.DeviceRef{GPU: g.Index}.String()
			dev := d.common(device.New(name), g, TypeGPU, ModeFull).
				StringAttribute(AttrUUID, g.UUID).
				Capacity(mig.CapMemory, mib(g.MemoryMiB), nil)
			pool.Devices = append(pool.Devices, dev)
			devs[name] = devInfo{
				pool: pool.Name,
				gpu:  g.Index,
				mode: ModeFull,
				typ:  TypeGPU,
				uuid: g.UUID,
			}
		case ModeStatic:
			for _, md := range static {
				if len(md.gi.ComputeInstances) == 0 {
					continue // an administrator's half-made GPU instance: no device
				}
				pr, err := g.product.Profile(md.key.Profile)
				if err != nil {
					return nil, fmt.Errorf("inventory: GPU %d: %w", g.Index, err)
				}
				name := mig.DeviceRef{GPU: g.Index, Profile: pr.Name, Start: md.key.Start}.String()
				dev := d.common(device.New(name), g, TypeMIG, ModeStatic).
					StringAttribute(AttrUUID, md.uuid).
					StringAttribute(AttrParentUUID, g.UUID).
					StringAttribute(mig.AttrProfile, pr.Name).
					IntAttribute(mig.AttrProfileID, int64(pr.ID)).
					IntAttribute(mig.AttrPlacementStart, int64(md.key.Start)).
					IntAttribute(mig.AttrPlacementSize, int64(pr.MemorySlices)).
					Capacity(mig.CapMemory, mib(pr.MemoryMiB), nil).
					Capacity(
						mig.CapComputeSlices,
						*resource.NewQuantity(int64(pr.ComputeSlices), resource.DecimalSI),
						nil,
					)
				// as on dynamic MIG devices (mig.CounterModel)
				for n, q := range pr.Engines.Capacities() {
					dev.Capacity(n, q, nil)
				}
				pool.Devices = append(pool.Devices, dev)
				devs[name] = devInfo{
					pool:    pool.Name,
					gpu:     g.Index,
					mode:    ModeStatic,
					typ:     TypeMIG,
					uuid:    md.uuid,
					profile: pr.Name,
					key:     Key{GPU: g.Index, UUID: g.UUID, ProfileID: pr.ID, Start: md.key.Start},
					part:    md.key,
					gi:      md.gi.ID,
					ci:      md.gi.ComputeInstances[0].ID,
				}
			}
		case ModeDynamic:
			var layout mig.Layout
			for _, md := range owned {
				layout = append(
					layout,
					mig.Instance{Profile: md.key.Profile, Start: md.key.Start, InUse: true},
				)
			}
			fleet = append(
				fleet,
				mig.FleetGPU{Node: d.node, Index: g.Index, Product: g.product, Layout: layout},
			)
			model = append(model, mig.GPU{Index: g.Index, Product: g.product, Profiles: g.profiles})
			dynamic = append(dynamic, g)
		}
	}
	var pools []device.Pool
	if len(pool.Devices) > 0 || (len(model) == 0 && len(shared) == 0) {
		pools = append(pools, pool)
	}
	switch {
	case len(model) > 0 && d.o.layoutSrc != nil:
		lp, err := d.layoutPools(fleet, dynamic, devs)
		if err != nil {
			return nil, fmt.Errorf("inventory: MIG layout: %w", err)
		}
		pools = append(pools, lp...)
	case len(model) > 0:
		mp, err := d.dynamicPools(fleet, model, dynamic, devs)
		if err != nil {
			return nil, fmt.Errorf("inventory: %w", err)
		}
		pools = append(pools, mp...)
	}
	if len(shared) > 0 {
		// The scheduler walks pools by name: keep the inventory in its
		// order.
		pools = append(pools, shared...)
		slices.SortStableFunc(pools, func(a, b device.Pool) int {
			return strings.Compare(a.Name, b.Name)
		})
	}
	// before d.mu: reports takes the two the other way round
	unmonitored := d.health.unmonitoredGPUs()
	ignored := d.health.ignoredXIDs()
	d.mu.Lock()
	defer d.mu.Unlock()
	pools = d.keepLost(pools, lost, devs)
	for i := range pools {
		for _, dev := range pools[i].Devices {
			if unmonitored[devs[dev.Name()].gpu] {
				dev.Taint(device.Taint{Key: TaintUnmonitored, Effect: device.NoEffect})
			}
			if xid, ok := ignored[devs[dev.Name()].gpu]; ok {
				dev.Taint(
					device.Taint{
						Key:    TaintIgnoredXID,
						Value:  fmt.Sprintf("XID%d", xid),
						Effect: device.NoEffect,
					},
				)
			}
		}
	}
	inv := &device.Inventory{Driver: DriverName, Pools: pools}
	// Kept without a copy: neither the runtime nor this driver modifies
	// an inventory once returned (kit.Discoverer), and keepLost clones
	// what it takes from it.
	d.devs, d.last = devs, inv
	return inv, nil
}

// keepLost adds the devices of the lost GPUs as the last inventory had
// them (a lost GPU cannot be read; its devices stay published, with the
// health taint ReasonGPULost, so that what runs on them is seen and
// evicted, not silently dropped). A GPU lost before any inventory is
// left out. d.mu must be held.
func (d *Driver) keepLost(pools []device.Pool, lost []int, devs map[string]devInfo) []device.Pool {
	if len(lost) == 0 || d.last == nil {
		return pools
	}
	isLost := map[int]bool{}
	for _, g := range lost {
		isLost[g] = true
	}
	for _, p := range d.last.Pools {
		var keep []*device.Device
		for _, dev := range p.Devices {
			if info, ok := d.devs[dev.Name()]; ok && isLost[info.gpu] {
				keep = append(keep, dev.Clone())
				devs[dev.Name()] = info
			}
		}
		if len(keep) == 0 {
			continue
		}
		i := slices.IndexFunc(pools, func(q device.Pool) bool { return q.Name == p.Name })
		if i < 0 {
			pools = append(pools, device.Pool{Name: p.Name, CounterSets: p.CounterSets})
			i = len(pools) - 1
		}
		pools[i].Devices = append(pools[i].Devices, keep...)
	}
	slices.SortStableFunc(
		pools,
		func(a, b device.Pool) int { return strings.Compare(a.Name, b.Name) },
	)
	return pools
}

// migDev is a GPU instance as the inventory sees it.
type migDev struct {
	key  lifecycle.Key
	gi   nvml.GPUInstance
	uuid string // the MIG device's, "" without a compute instance
}

// gpuMode tells how g is published now, with its static and owned MIG
// devices. Which GPUs are dynamic is the administrator's, recorded by
// the lifecycle, never inferred from what a GPU holds. On a GPU being
// drained (dropped from the dynamic GPUs while claims held its MIG
// devices) the MIG devices the driver made are not published (they are
// being given back), the others are static.
func (d *Driver) gpuMode(g *gpuInfo) (mode string, static, owned []migDev, err error) {
	if g.product == nil {
		return ModeFull, nil, nil, nil
	}
	m, err := d.nv.MigMode(g.Index)
	if err != nil {
		return "", nil, nil, err
	}
	state := d.lc.State(g.UUID)
	dyn := state == lifecycle.Dynamic
	if !m.Current && dyn {
		return ModeDynamic, nil, nil, nil // used whole, or slicing again at the next MIG claim
	}
	if !m.Current {
		return ModeFull, nil, nil, nil
	}
	gis, err := d.nv.GPUInstances(g.Index)
	if err != nil {
		return "", nil, nil, err
	}
	for _, gi := range gis {
		md := migDev{
			key: lifecycle.Key{
				Card:    g.UUID,
				Profile: g.profileName(gi.ProfileID),
				Start:   gi.Placement.Start,
			},
			gi: gi,
		}
		if len(gi.ComputeInstances) > 0 {
			md.uuid = gi.ComputeInstances[0].UUID
		}
		switch {
		case dyn:
			owned = append(owned, md)
		case state == lifecycle.Draining:
			if own, err := d.lc.Owns(md.key); err != nil {
				return "", nil, nil, err
			} else if !own {
				static = append(static, md)
			}
		default:
			static = append(static, md)
		}
	}
	if !dyn {
		return ModeStatic, static, nil, nil
	}
	return ModeDynamic, nil, owned, nil
}

// dynamicPools is the counter model of the dynamic GPUs with the
// advertised profiles as mig.CounterModel.GPUPools publishes it (a pool
// per GPU, the planner's order, only the devices the scheduler can still
// allocate: mig.WithFitOnly). The GPU whole is listed while none of its
// MIG devices is in use and carries a full GPU's attributes, so that
// ClassGPU (and an unchanged nvidia.com/gpu pod) can get an idle dynamic
// GPU.
func (d *Driver) dynamicPools(
	fleet []mig.FleetGPU,
	model []mig.GPU,
	gpus []*gpuInfo,
	devs map[string]devInfo,
) ([]device.Pool, error) {
	m, err := mig.NewCounterModel(model)
	if err != nil {
		return nil, err
	}
	byIndex := map[int]*gpuInfo{}
	for _, g := range gpus {
		byIndex[g.Index] = g
	}
	pools, err := m.GPUPools(d.node, fleet, counter.WithFitOnly())
	if err != nil {
		return nil, err
	}
	for i, p := range pools {
		// The GPU whole only where MIG mode can be left and no other
		// NVML client holds it (Driver.wholeNow).
		pools[i].Devices = slices.DeleteFunc(p.Devices, func(dev *device.Device) bool {
			ref, err := mig.ParseDeviceName(dev.Name())
			if err != nil || ref.Profile != "" {
				return false
			}
			ok, _ := d.wholeNow(byIndex[ref.GPU])
			return !ok
		})
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

// lean trims a dynamic MIG device of the counter model to what claims
// select it on, 8 attributes at most: type, index, productName, profile
// and placementStart from the model, plus parentUUID, migMode and the
// standard pcieRoot (for a matchAttribute with a NIC on the same PCIe
// root). What follows from the rest is left out: profileID and
// placementSize from profile; brand, architecture, compute capability and
// versions are the GPU's, on its node's full GPUs and static MIG devices
// and the same for every GPU of a product; the PCI bus ID and NUMA node
// are the parent GPU's. Each attribute is stored and converted by the
// scheduler for every device on every node (WithFullMIGAttributes keeps
// them all).
func (d *Driver) lean(dev *device.Device, g *gpuInfo) {
	// productName is NVML's ("NVIDIA H200"), as on the node's full GPUs
	// and static MIG devices, not the catalog's ("H200-141GB"): one
	// selector must match every device of a product.
	dev.RemoveAttribute(mig.AttrProfileID).RemoveAttribute(mig.AttrPlacementSize).
		StringAttribute(AttrProductName, g.ProductName).
		StringAttribute(AttrParentUUID, g.UUID).
		StringAttribute(AttrMIGMode, ModeDynamic)
	if g.topo != nil {
		dev.StringAttribute(topology.PCIeRootAttribute, g.topo.PCIeRoot)
	}
}

// common sets the attributes every device of GPU g has.
func (d *Driver) common(dev *device.Device, g *gpuInfo, typ, mode string) *device.Device {
	dev.StringAttribute(mig.AttrType, typ).
		IntAttribute(mig.AttrIndex, int64(g.Index)).
		StringAttribute(AttrProductName, g.ProductName).
		StringAttribute(AttrBrand, g.Brand).
		StringAttribute(AttrArchitecture, g.Architecture).
		VersionAttribute(AttrCUDAComputeCapability, g.cc).
		VersionAttribute(AttrDriverVersion, d.versions.driver).
		VersionAttribute(AttrCUDADriverVersion, d.versions.cuda).
		StringAttribute(AttrMIGMode, mode)
	if g.topo != nil {
		g.topo.SetAttributes(dev)
	}
	return dev
}

func mib(n int64) resource.Quantity { return *resource.NewQuantity(n*1024*1024, resource.BinarySI) }
