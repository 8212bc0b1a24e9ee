package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/statefile"
)

// WithDynamicGPUs names the dynamic MIG GPUs (by UUID, or by NVML index
// at this start): the driver owns every MIG device on them, makes them
// at prepare and destroys, at start, every one that no held claim names,
// whoever made it. Without this option no GPU is dynamic (as NVIDIA's
// driver keeps dynamic MIG behind an alpha gate): a GPU in MIG mode
// publishes its MIG devices as they are and nothing on it is ever
// changed, whatever it holds at the driver's first start. The list is
// recorded in the state folder (package partition/lifecycle).
//
// A GPU dropped from the list while claims hold MIG devices on it is
// drained: those devices stay until their claims are unprepared, then are
// destroyed; the other MIG devices the driver made there are destroyed at
// start; nothing new is made there; the MIG devices on it that the driver
// did not make (an administrator's, the GPU Operator's) are published as
// static and never touched. A GPU added to the list while it holds MIG
// devices hands them to the driver: those held claims use are kept (and
// destroyed at their release), the others are destroyed at start.
func WithDynamicGPUs(gpus ...string) Option {
	return func(o *options) error {
		o.dynamicGPUs = slices.Clone(gpus)
		return nil
	}
}

// dynamicUUIDs resolves the WithDynamicGPUs selectors to UUIDs.
func (d *Driver) dynamicUUIDs() ([]string, error) {
	var out []string
	for _, s := range d.o.dynamicGPUs {
		g, ok := d.gpuBySelector(s)
		if !ok {
			return nil, fmt.Errorf("dynamic MIG GPU %q: no such GPU on this node", s)
		}
		if g.product == nil && g.broken == nil {
			return nil, fmt.Errorf("dynamic MIG GPU %q (GPU %d): it has no MIG mode", s, g.Index)
		}
		out = append(out, g.UUID)
	}
	return out, nil
}

// hw is the GPUs as the driver knows them now (a GPU unreadable at start
// is read again when it answers; the slice is replaced then, never
// changed in place).
func (d *Driver) hw() []gpuInfo {
	d.gpuMu.Lock()
	defer d.gpuMu.Unlock()
	return d.gpus
}

// gpuBySelector finds a GPU by UUID or NVML index.
func (d *Driver) gpuBySelector(s string) (gpuInfo, bool) {
	for _, g := range d.hw() {
		if g.UUID == s || fmt.Sprint(g.Index) == s {
			return g, true
		}
	}
	return gpuInfo{}, false
}

// gpuByUUID finds a GPU by UUID; false when this node has none (any
// more).
func (d *Driver) gpuByUUID(uuid string) (gpuInfo, bool) {
	for _, g := range d.hw() {
		if g.UUID == uuid {
			return g, true
		}
	}
	return gpuInfo{}, false
}

// dynamic reports whether the lifecycle makes MIG devices on g now.
func (d *Driver) dynamic(g *gpuInfo) bool { return d.lc.State(g.UUID) == lifecycle.Dynamic }

// keyOf is the lifecycle's KeyFunc: the partition (or the GPU whole) a
// device is, from its prepared data when the runtime holds it (the key
// names the GPU by UUID, whatever its NVML index is now), else from its
// name with this process's indexes. A MIG device of any GPU has a key
// (the lifecycle ignores those of GPUs that are not dynamic); a full GPU
// has one as a whole GPU only where it has MIG.
func (d *Driver) keyOf(dev kit.AllocatedDevice, data json.RawMessage) (lifecycle.Key, bool) {
	if len(data) > 0 {
		var pd preparedData
		if err := json.Unmarshal(data, &pd); err == nil && pd.Partition != nil {
			return *pd.Partition, true
		}
	}
	ref, err := mig.ParseDeviceName(dev.Device)
	gpus := d.hw()
	if err != nil || ref.GPU < 0 || ref.GPU >= len(gpus) || gpus[ref.GPU].product == nil {
		return lifecycle.Key{}, false
	}
	g := gpus[ref.GPU]
	if ref.Profile == "" {
		return lifecycle.WholeCard(g.UUID), true
	}
	pr, err := g.product.Profile(ref.Profile)
	if err != nil {
		return lifecycle.Key{}, false
	}
	return lifecycle.Key{Card: g.UUID, Profile: pr.Name, Start: ref.Start}, true
}

// Reconcile makes the MIG devices of the dynamic (and drained) GPUs and
// the lifecycle's journal match the claims the runtime holds
// (kit.Reconciler, lifecycle.Manager.Reconcile): a device that a held
// claim names is kept and recorded as that claim's (also when the
// journal lost it), one no held claim names is destroyed, a dynamic GPU
// no claim holds whole gets MIG mode on again. It also removes the
// temporary files that crashed writes left in the claims' devices
// folder.
func (d *Driver) Reconcile(ctx context.Context, held []kit.HeldClaim) (err error) {
	// Only a prepare writes a devices file, and none runs during
	// Reconcile: not in this process, nor (under the runtime's
	// cross-instance lock) in the other instance of a rolling update.
	if n, terr := statefile.RemoveTemp(d.claimDir()); terr != nil {
		err = fmt.Errorf("reconcile devices files: %w", terr)
	} else if n > 0 {
		klog.FromContext(ctx).Info("Removed the temporary files of interrupted devices file writes", "files", n)
	}
	return errors.Join(err, d.lc.Reconcile(ctx, held), d.mps.reconcile(ctx, d.heldShares(held)))
}
