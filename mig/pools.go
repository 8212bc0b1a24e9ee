package mig

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
)

// Pools returns the model as device pools for a device.Inventory
// (counter.Model.Pools): the counter sets and one
// *device.Device per model device, fresh copies the caller may add
// attributes and taints to, devices in model order. Map a device back to
// its GPU, profile and placement with ParseDeviceName.
func (m CounterModel) Pools(name string) []device.Pool {
	return counter.Model(m).Pools(name)
}

// DefaultProfiles is the profile set a dynamic-MIG driver advertises by
// default for product p (GPU.Profiles, and WithProfiles for Preference):
// one profile per compute size, the first of the catalog's order (the
// smallest memory) without media extensions (counter.DefaultProfiles).
// On an H100-80GB that is 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb and
// 7g.80gb: 15 devices per GPU with the full GPU, against 26 with every
// profile. The large-memory 1g (1g.20gb) and the "+me" profiles are left
// to an explicit setting.
//
// Chosen by the fleet benchmark ("drakit mig bench -fleet", package doc):
// every advertised device is a device the scheduler converts, evaluates
// and stores on every node for every pod. With 8 x H100 per node the
// slices take 385 KiB per node against 654 KiB with every profile (the
// goal was 400), and each extra profile adds its placements to every
// node's cost. A nil p has no profiles.
func DefaultProfiles(p *Product) []string {
	if p == nil {
		return nil
	}
	return counter.DefaultProfiles(p.scheme)
}

// PreferredPools is what a dynamic-MIG driver publishes for one node after
// every change (counter.Model.PreferredPools with
// counter.WithCardsFirst, NVIDIA's order): Pools(name) with the devices
// in the planner's order for the node's current instances
// (Preference(node, opts...)), restricted to the devices the model
// advertises, so any advertised profile set works without WithProfiles.
// Pass WithFitOnly() to publish only the devices the scheduler can still
// allocate (the package doc's choice); without it, every model device is
// listed. node must hold one entry per GPU of the model (by index) with
// the model's product; anything else is an error wrapping ErrFleet.
func (m CounterModel) PreferredPools(
	name string, node []FleetGPU, opts ...counter.OrderOption,
) ([]device.Pool, error) {
	cards, err := toCards("preferred pools", node)
	if err != nil {
		return nil, err
	}
	nvidia := append([]counter.OrderOption{counter.WithCardsFirst()}, opts...)
	return counter.Model(m).PreferredPools(name, cards, nvidia...)
}

// GPUPoolName is the name of GPU index's pool in GPUPools: the node's pool
// name, "/gpu-" and the index with at least two digits, so that the
// allocator, which walks a node's pools by name, walks them in GPU order.
func GPUPoolName(name string, index int) string {
	return fmt.Sprintf("%s/gpu-%02d", name, index)
}

// GPUPools is PreferredPools cut into one pool per GPU
// (counter.Model.CardPools): pool GPUPoolName(name, index) holds
// GPU index's counter set and its devices in the planner's order, and
// the pools come in GPU order. Take it over PreferredPools when the
// devices are republished after every MIG change (WithFitOnly): a change
// on one GPU then rewrites one pool's one device slice, which the
// resource slice controller of k8s.io/dynamic-resource-allocation
// updates in place without a new pool generation, so no pool is ever
// incomplete while the scheduler catches up. One pool for the node spans
// several device slices (8 GPUs of 14 devices each make 112 devices, two
// slices of 64); a change that touches two of them starts a new
// generation, and until the scheduler has seen every slice of it the
// whole pool, every GPU of the node, is incomplete and skipped.
//
// The price is the order across GPUs: the allocator takes the first
// fitting device of the first pool by name, so the planner's choice of
// placement on a GPU is kept, and the GPU is the first in index order
// that fits the request (first fit across GPUs), not necessarily the
// planner's. Each pool holds its GPU's devices in one slice as long as
// they fit in 64 (every product of the catalog does, all profiles
// advertised) and the GPU has at least one device, which fit-only
// publication guarantees (a GPU's in-use devices stay listed).
func (m CounterModel) GPUPools(
	name string, node []FleetGPU, opts ...counter.OrderOption,
) ([]device.Pool, error) {
	cards, err := toCards("GPU pools", node)
	if err != nil {
		return nil, err
	}
	nvidia := append([]counter.OrderOption{counter.WithCardsFirst()}, opts...)
	return counter.Model(m).CardPools(name, cards, nvidia...)
}

// LayoutPools is the layout publication of one node
// (counter.Model.LayoutPools, shape (a) of
// docs/dynamic-mig-publication.md): per GPU in index order nothing
// (Withheld), its full device, or one device per MIG instance of its
// layout (plan.PlanLayouts' output through partition.Published, or
// ledger.Ledger.Layout's, on the products' schemes, Product.Scheme),
// with the names, attributes and capacities of the counter model and no
// counters; one pool named name of one slice, cut into pools by groups
// of GPUs only beyond 128 devices (more than 18 GPUs of 7 instances).
// Options: counter.WithPoolDevices.
func (m CounterModel) LayoutPools(
	name string, gpus []partition.PublishedCard, opts ...counter.LayoutOption,
) ([]device.Pool, error) {
	return counter.Model(m).LayoutPools(name, gpus, opts...)
}

// LayoutSlices is LayoutPools as ResourceSlice objects for in-process
// use (counter.Model.LayoutSlices): one slice per pool, with
// nodeName set and resourceSliceCount 1.
func (m CounterModel) LayoutSlices(
	driver, name, nodeName string, generation int64,
	gpus []partition.PublishedCard, opts ...counter.LayoutOption,
) ([]*resourceapi.ResourceSlice, error) {
	return counter.Model(m).LayoutSlices(driver, name, nodeName, generation, gpus, opts...)
}
