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

// WithDynamicGPUs names the dynamic MIG GPUs: by UUID ("GPU-..."), by PCI
// bus ID ("0000:1b:00.0"), which both stay with the GPU, or by NVML
// index. An index names a GPU at the start that first resolves it: the
// GPU's UUID is recorded in the state folder (DynamicGPUsFile), and later
// starts keep that GPU dynamic wherever NVML enumerates it (after a GPU
// fell off the bus and the node rebooted, the later indexes move down);
// the GPU an index names now, if another, is not made dynamic for it. A
// dynamic GPU missing from the node, or one without MIG, is a Warning for
// that GPU (see WithWarnings), and the others are served. The driver owns
// every MIG device on the dynamic GPUs, makes them at prepare and
// destroys, at start, every one that no held claim names, whoever made
// it. Without this option no GPU is dynamic (as NVIDIA's
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

// hw is the GPUs as the driver knows them now (a GPU unreadable at start
// is read again when it answers; the slice is replaced then, never
// changed in place).
func (d *Driver) hw() []gpuInfo {
	d.gpuMu.Lock()
	defer d.gpuMu.Unlock()
	return d.gpus
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
// no claim holds whole gets MIG mode on again. Ownership follows the
// records: a MIG device (or GPU held whole) that the runtime's checkpoint
// says this driver made for a held claim stays the driver's when the
// state folder was lost, also on a GPU no longer named dynamic
// (lifecycle.Manager.Restore: the GPU is drained, the device destroyed
// at the claim's release, never published as an administrator's). It
// also makes the claims' devices files match the held claims (written
// again where lost, removed where the runtime holds no claim) and
// removes the temporary files that crashed writes left in their folder.
func (d *Driver) Reconcile(ctx context.Context, held []kit.HeldClaim) (err error) {
	// Only a prepare writes a devices file, and none runs during
	// Reconcile: not in this process, nor (under the runtime's
	// cross-instance lock) in the other instance of a rolling update.
	if n, terr := statefile.RemoveTemp(d.claimDir()); terr != nil {
		err = fmt.Errorf("reconcile devices files: %w", terr)
	} else if n > 0 {
		klog.FromContext(ctx).Info(
			"Removed the temporary files of interrupted devices file writes", "files", n,
		)
	}
	if rerr := d.lc.Restore(ctx, recordedPartitions(held)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	err = errors.Join(err, d.lc.Reconcile(ctx, held), d.mps.reconcile(ctx, d.heldShares(held)))
	return errors.Join(err, d.syncClaimFiles(ctx, held))
}
