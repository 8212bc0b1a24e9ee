// Package device is drakit's vendor-neutral device model: builders for
// attributes, capacities, counters and taints, an Inventory of pools, its
// conversion into API-valid ResourceSlices, validation, and the events and
// health reports a vendor's discoverer sends to the driver runtime (whose
// Discoverer interface package driver declares).
//
// A vendor describes devices with [New] and the chainable setters
// ([Device.StringAttribute], [Device.IntAttribute], [Device.BoolAttribute],
// [Device.VersionAttribute], [Device.Capacity], [Device.ConsumesCounters], [Device.Taint],
// [Device.AllowMultipleAllocations], [Device.BindingConditions]), groups
// them into the [Pool]s of an [Inventory], and hands the inventory to the
// driver runtime through a discoverer. The setters never fail; every
// problem is reported, with its field path and the rule broken, by
// [Inventory.Validate] and by [Inventory.DriverResources], which converts
// the inventory into the resourceslice.DriverResources that
// kubeletplugin.Helper.PublishResources takes.
//
// A shareable device (consumable capacity, KEP-5075: many claims on one
// device, each taking an amount of its memory or compute) is described by
// a [Shares] model: [NewShares] checks the capacities and their request
// policies (a range with a step, or a list of values; a default) by the
// API server's rules, [Shares.Apply] makes a device shareable with them,
// and [Shares.Of] reads what one allocation took. docs/sharing.md has a
// worked example.
//
// Three discoverers are ready-made: [StaticDiscoverer] for an inventory
// that never changes and has no health, [NewHealthDiscoverer] for a fixed
// inventory whose health a vendor's monitor reports, polled or pushed, and
// [NewDynamicDiscoverer] for an inventory that changes with every
// partition made or destroyed, with health from the same sources. A
// report on a counter set (a card) applies to every partition of it, and
// in a dynamic inventory to the partitions made on it later too.
//
// The conversion respects every limit of resource.k8s.io/v1 in Kubernetes
// 1.37 (128 devices per slice, 64 when a slice holds a device with taints
// or counter consumption; counter sets in slices of their own, 8 per
// slice, 32 counters per set; 32 attributes plus capacities per device;
// DNS-label names; string values of at most 64 bytes), keeps the order of
// devices (slice order is the scheduler's first-fit priority) and gives
// the same output for the same input.
//
// [Validate] checks ResourceSlice objects, from any source, by the rules
// the API server applies (a differential test against a real
// kube-apiserver keeps the two in step) and checks the slices of a pool
// against each other, which the API server cannot.
//
// Names: attribute and capacity names are qualified names. A bare C
// identifier ("model") belongs to the driver's own domain; a name written
// with the driver's domain ("gpu.example.com/model") is published bare;
// other domains ("resource.kubernetes.io/pcieRoot") are kept.
//
// Features behind feature gates that are off by default in 1.37 (list
// attributes, node-allocatable resources, partition types, optional node
// operations) are not modelled; [Validate] flags them as [ScopePool]
// problems because the API server would drop them.
package device
