package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"k8s.io/klog/v2"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/statefile"
)

// ownershipFile is the record, in the state folder, of how each
// MIG-capable GPU is used: the administrator's decision (WithDynamicGPUs)
// or the one made at the GPU's first sight, kept across restarts so that
// it is never re-inferred from what is on the GPU now (a driver that
// lost its journal would otherwise take its own MIG devices for an
// administrator's).
const ownershipFile = "mig-gpus.json"

// ownershipDoc is ownershipFile's content: GPU UUID -> ModeDynamic,
// ModeStatic or ModeFull.
type ownershipDoc struct {
	GPUs map[string]string `json:"gpus"`
}

// WithDynamicGPUs makes exactly the GPUs named (by UUID, or by NVML index
// at this start) dynamic: the driver owns every MIG device on them,
// creating them at prepare and destroying every one that no held claim
// names. The other MIG-capable GPUs are static (MIG mode on: their MIG
// devices are published as they are and never changed) or full (MIG mode
// off). The decision is recorded in the state folder. Without this
// option the recorded decision stands, and a GPU seen for the first time
// is dynamic exactly when it is in MIG mode without MIG devices.
func WithDynamicGPUs(gpus ...string) Option {
	return func(o *options) error {
		if gpus == nil {
			gpus = []string{}
		}
		o.dynamicGPUs = slices.Clone(gpus)
		return nil
	}
}

// decideOwnership reads the recorded decisions, applies WithDynamicGPUs
// or decides for GPUs not seen before, and records the result.
func (d *Driver) decideOwnership() error {
	path := filepath.Join(d.o.stateDir, ownershipFile)
	doc := ownershipDoc{GPUs: map[string]string{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read GPU ownership record: %w", err)
	default:
		if err := json.Unmarshal(b, &doc); err != nil || doc.GPUs == nil {
			if err == nil {
				err = errors.New(`no "gpus"`)
			}
			return fmt.Errorf("read GPU ownership record %s: it is corrupt (%v): fix it (a JSON object {\"gpus\": {\"<GPU UUID>\": \"dynamic\"|\"static\"|\"full\"}}) or pass -dynamic-mig-gpus to decide afresh", path, err)
		}
	}
	var want map[string]bool
	if d.o.dynamicGPUs != nil {
		want = map[string]bool{}
		for _, s := range d.o.dynamicGPUs {
			g := d.gpuBySelector(s)
			if g == nil {
				return fmt.Errorf("dynamic MIG GPU %q: no such GPU on this node", s)
			}
			if g.product == nil {
				return fmt.Errorf("dynamic MIG GPU %q (GPU %d): it has no MIG mode", s, g.Index)
			}
			want[g.UUID] = true
		}
	}
	changed := false
	for i := range d.gpus {
		g := &d.gpus[i]
		if g.product == nil {
			continue
		}
		mode, seen := doc.GPUs[g.UUID]
		if seen && want == nil {
			g.dynamic = mode == ModeDynamic
			continue
		}
		m, err := d.nv.MigMode(g.Index)
		if err != nil {
			return fmt.Errorf("decide GPU %d's use: %w", g.Index, err)
		}
		switch {
		case want != nil && want[g.UUID]:
			mode = ModeDynamic
		case !m.Current:
			mode = ModeFull
		case want != nil:
			mode = ModeStatic
		default:
			gis, err := d.nv.GPUInstances(g.Index)
			if err != nil {
				return fmt.Errorf("decide GPU %d's use: %w", g.Index, err)
			}
			mode = ModeStatic
			if len(gis) == 0 {
				mode = ModeDynamic
			}
		}
		if doc.GPUs[g.UUID] != mode {
			doc.GPUs[g.UUID], changed = mode, true
			klog.Background().Info("Decided a GPU's use", "gpu", g.Index, "uuid", g.UUID, "mode", mode, "byAdministrator", want != nil)
		}
		g.dynamic = mode == ModeDynamic
	}
	if !changed {
		return nil
	}
	if err := writeJSON(path, doc); err != nil {
		return fmt.Errorf("record GPU ownership: %w", err)
	}
	return nil
}

// gpuBySelector finds a GPU by UUID or NVML index.
func (d *Driver) gpuBySelector(s string) *gpuInfo {
	for i := range d.gpus {
		if d.gpus[i].UUID == s || fmt.Sprint(d.gpus[i].Index) == s {
			return &d.gpus[i]
		}
	}
	return nil
}

// gpuByUUID finds a GPU by UUID; nil when this node has none (any more).
func (d *Driver) gpuByUUID(uuid string) *gpuInfo {
	for i := range d.gpus {
		if d.gpus[i].UUID == uuid {
			return &d.gpus[i]
		}
	}
	return nil
}

// Owns is the lifecycle's Owner: every MIG device on a dynamic GPU is the
// driver's, none on another.
func (d *Driver) owns(k Key) (bool, error) {
	if k.GPU < 0 || k.GPU >= len(d.gpus) {
		return false, nil
	}
	g := &d.gpus[k.GPU]
	return g.dynamic && (k.UUID == "" || k.UUID == g.UUID), nil
}

// withUUID fills in the key's GPU UUID from its index.
func (d *Driver) withUUID(k Key) Key {
	if k.GPU >= 0 && k.GPU < len(d.gpus) {
		k.UUID = d.gpus[k.GPU].UUID
	}
	return k
}

// locate gives a recorded key the GPU's NVML index of this process;
// false when the GPU is not on the node now.
func (d *Driver) locate(k Key) (Key, bool) {
	if k.UUID == "" {
		return k, k.GPU >= 0 && k.GPU < len(d.gpus)
	}
	g := d.gpuByUUID(k.UUID)
	if g == nil {
		return k, false
	}
	k.GPU = g.Index
	return k, true
}

// Reconcile makes the MIG devices on the dynamic GPUs and the journal
// match the claims the runtime holds (kit.Reconciler): a device that a
// held claim names is kept and recorded as that claim's (also when the
// journal lost it), a device no held claim names is destroyed, and an
// intent whose device is gone is forgotten. A dynamic GPU that a held
// claim has whole keeps MIG mode off; one that no claim has whole gets
// MIG mode on again (a crash between a whole-GPU claim's release and
// the mode change), or keeps it off with the error logged when that
// fails (the next MIG prepare tries again). A lost claim (its checkpoint
// record was corrupt) keeps what the journal says it holds. The
// temporary files that crashed writes left in the claims' devices folder
// are removed.
func (d *Driver) Reconcile(ctx context.Context, held []kit.HeldClaim) (err error) {
	d.migMu.Lock()
	defer d.migMu.Unlock()
	logger := klog.FromContext(ctx)
	// Only a prepare writes a devices file, and none runs during
	// Reconcile: not in this process, nor (under the runtime's
	// cross-instance lock) in the other instance of a rolling update.
	if n, terr := statefile.RemoveTemp(d.claimDir()); terr != nil {
		defer func() { err = errors.Join(err, fmt.Errorf("reconcile devices files: %w", terr)) }()
	} else if n > 0 {
		logger.Info("Removed the temporary files of interrupted devices file writes", "files", n)
	}
	holders := map[Key][]string{} // by key without the index
	lost := map[string]bool{}
	norm := func(k Key) Key { k.GPU = -1; return k }
	for _, c := range held {
		if c.Lost {
			lost[string(c.UID)] = true
			continue
		}
		for _, dev := range c.Devices {
			if dev.AdminAccess {
				continue
			}
			k, ok := d.heldKey(dev)
			if ok {
				holders[norm(k)] = append(holders[norm(k)], string(c.UID))
			}
		}
	}
	intents, err := d.journal.Intents()
	if err != nil && !errors.Is(err, ErrCorruptJournal) {
		return fmt.Errorf("reconcile MIG devices: %w", err)
	}
	if err != nil {
		logger.Error(err, "Rebuilding the MIG intent journal from the GPUs and the held claims")
		intents = nil
	}
	for _, in := range intents {
		for _, c := range in.Claims {
			if lost[c] {
				k := norm(d.withUUIDIfMissing(in.Key))
				holders[k] = append(holders[k], c)
			}
		}
	}
	var keep []Intent
	var destroyed []string
	for i := range d.gpus {
		g := &d.gpus[i]
		if !g.dynamic {
			continue
		}
		wk := WholeKey(g.Index, g.UUID)
		if claims := holders[norm(wk)]; len(claims) > 0 {
			slices.Sort(claims)
			keep = append(keep, Intent{Key: wk, Claims: slices.Compact(claims)})
		} else if err := d.lifecycle.SetMode(wk, true); err != nil {
			// A whole-GPU claim's release that crashed or failed before
			// MIG mode was on again: the next MIG prepare tries again.
			logger.Error(err, "Could not turn MIG mode on again on a dynamic GPU no claim holds whole", "gpu", wk.String())
		}
		gis, err := d.nv.GPUInstances(g.Index)
		if errors.Is(err, nvml.ErrNotSupported) {
			continue // MIG mode off
		}
		if err != nil {
			return fmt.Errorf("reconcile MIG devices on GPU %d: %w", g.Index, err)
		}
		for _, gi := range gis {
			k := Key{GPU: g.Index, UUID: g.UUID, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
			claims := holders[norm(k)]
			if len(claims) > 0 {
				slices.Sort(claims)
				keep = append(keep, Intent{Key: k, Claims: slices.Compact(claims)})
				continue
			}
			if err := d.lifecycle.Destroy(k); err != nil {
				return fmt.Errorf("reconcile MIG devices: %w", err)
			}
			d.remember(k, nil)
			destroyed = append(destroyed, k.String())
		}
	}
	sort.Slice(keep, func(a, b int) bool { return keep[a].String() < keep[b].String() })
	if err := d.journal.Replace(keep); err != nil {
		return fmt.Errorf("reconcile MIG devices: %w", err)
	}
	logger.Info("Reconciled MIG devices with the held claims", "kept", len(keep), "destroyed", destroyed)
	if len(destroyed) > 0 {
		d.changed()
	}
	return nil
}

// withUUIDIfMissing fills in a recorded key's UUID from its index (a
// journal written before keys had UUIDs).
func (d *Driver) withUUIDIfMissing(k Key) Key {
	if k.UUID == "" {
		return d.withUUID(k)
	}
	return k
}

// heldKey is the key of a held dynamic MIG device: from its prepared
// data, which names the GPU by UUID, or for data without it from its
// name with this process's NVML indexes.
func (d *Driver) heldKey(dev kit.HeldDevice) (Key, bool) {
	if len(dev.Data) > 0 {
		var pd preparedData
		if err := json.Unmarshal(dev.Data, &pd); err == nil && pd.MIG != nil {
			return *pd.MIG, true
		}
	}
	k, ok := d.keyOf(dev.Device)
	if !ok || !d.gpus[k.GPU].dynamic {
		return Key{}, false
	}
	return d.withUUID(k), true
}
