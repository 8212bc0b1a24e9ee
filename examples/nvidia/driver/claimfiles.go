package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// recordedPartitions are the partitions (MIG devices, GPUs held whole)
// that the runtime's checkpoint says this driver made for the claims it
// holds: a device's prepared data names its lifecycle key only where the
// driver made it (preparedData.Partition), never for an administrator's
// static MIG device or a device held with admin access.
func recordedPartitions(held []kit.HeldClaim) map[lifecycle.Key][]string {
	out := map[lifecycle.Key][]string{}
	for _, c := range held {
		for _, dev := range c.Devices {
			if dev.AdminAccess || len(dev.Data) == 0 {
				continue
			}
			var pd preparedData
			if err := json.Unmarshal(dev.Data, &pd); err != nil || pd.Partition == nil {
				continue
			}
			out[*pd.Partition] = append(out[*pd.Partition], string(c.UID))
		}
	}
	return out
}

// syncClaimFiles makes the claims' devices files match the claims the
// runtime holds: the file of a prepared claim that is missing or cannot
// be read (the state folder was lost or wiped; the runtime writes the
// claim's CDI spec again, which mounts it) is written again from the
// checkpoint's record of what was applied, and the file of a claim the
// runtime does not hold (its checkpoint record was wiped: the kubelet's
// unprepare never comes) is removed. A lost claim's file stays until its
// release. It runs in Reconcile, where no prepare runs in either
// process of a rolling update.
func (d *Driver) syncClaimFiles(ctx context.Context, held []kit.HeldClaim) error {
	logger := klog.FromContext(ctx)
	keep := map[string]bool{}
	var errs error
	if err := d.ensureInventory(ctx); err != nil {
		errs = fmt.Errorf("devices files: %w", err) // the record alone says what it can
	}
	for _, c := range held {
		uid := string(c.UID)
		keep[uid+".json"] = true
		if !c.Prepared || c.Lost {
			continue
		}
		if f, err := readClaimFile(d.claimFile(uid)); err == nil && f.UID == uid {
			continue
		}
		f := ClaimFile{Namespace: c.Namespace, Claim: c.Name, UID: uid}
		for _, dev := range c.Devices {
			cd, err := d.recordedDevice(dev)
			if err != nil {
				errs = errors.Join(
					errs,
					fmt.Errorf("write the devices file of claim %s again: %w", c.ClaimRef, err),
				)
				f.Devices = nil
				break
			}
			f.Devices = append(f.Devices, cd)
		}
		if f.Devices == nil {
			continue
		}
		if err := writeJSON(d.claimFile(uid), f); err != nil {
			errs = errors.Join(
				errs,
				fmt.Errorf("write the devices file of claim %s again: %w", c.ClaimRef, err),
			)
			continue
		}
		logger.Info(
			"Wrote a held claim's lost devices file again from the checkpoint",
			"claim",
			c.ClaimRef.String(),
		)
	}
	ents, err := os.ReadDir(d.claimDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errors.Join(errs, fmt.Errorf("list the devices files: %w", err))
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || keep[e.Name()] {
			continue
		}
		if err := os.Remove(filepath.Join(d.claimDir(), e.Name())); err != nil &&
			!errors.Is(err, os.ErrNotExist) {
			errs = errors.Join(
				errs,
				fmt.Errorf("remove the devices file of a claim the driver does not hold: %w", err),
			)
			continue
		}
		logger.Info(
			"Removed the devices file of a claim the driver does not hold",
			"file",
			e.Name(),
		)
	}
	return errs
}

// readClaimFile reads a claim's devices file.
func readClaimFile(path string) (ClaimFile, error) {
	var f ClaimFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("decode %s: %w", path, err)
	}
	return f, nil
}

// recordedDevice is a held device as its claim's devices file describes
// it, from the checkpoint's record of its prepare (its UUID, its GPU by
// UUID, the time-slice set) and its name: what was applied, whatever the
// state folder says now.
func (d *Driver) recordedDevice(dev kit.HeldDevice) (ClaimDevice, error) {
	var pd preparedData
	if len(dev.Data) > 0 {
		if err := json.Unmarshal(dev.Data, &pd); err != nil {
			return ClaimDevice{}, fmt.Errorf("device %s: read its prepared data: %w", dev.ID(), err)
		}
	}
	if pd.UUID == "" {
		return ClaimDevice{}, fmt.Errorf("device %s: its prepared data names no UUID", dev.ID())
	}
	cd := ClaimDevice{
		Request:     dev.Request,
		Device:      dev.Device,
		Type:        TypeGPU,
		GPU:         pd.GPU,
		UUID:        pd.UUID,
		TimeSlice:   pd.TimeSlice,
		AdminAccess: dev.AdminAccess,
	}
	g, found := d.gpuByUUID(pd.GPUUUID)
	if found {
		cd.GPU = g.Index
	}
	if strings.HasSuffix(dev.Device, SharedSuffix) {
		// A share of a shared full GPU: what it took is in its record.
		cd.Type, cd.Mode = TypeShared, ModeFull
		if found && !dev.AdminAccess {
			sh, err := d.shareOf(&g, dev.AllocatedDevice)
			if err != nil {
				return ClaimDevice{}, fmt.Errorf("device %s: %w", dev.ID(), err)
			}
			cd.Share = &sh
		}
		return cd, nil
	}
	ref, err := mig.ParseDeviceName(dev.Device)
	if err != nil {
		return ClaimDevice{}, fmt.Errorf("device %s: %w", dev.ID(), err)
	}
	switch info, ok := d.lookup(dev.Device); {
	case pd.Partition != nil:
		cd.Mode = ModeDynamic
	case ok:
		cd.Mode = info.mode
	case ref.Profile != "":
		cd.Mode = ModeStatic
	default:
		cd.Mode = ModeFull
	}
	if ref.Profile != "" {
		cd.Type, cd.ParentUUID, cd.Profile = TypeMIG, pd.GPUUUID, ref.Profile
		if found && g.product != nil {
			if pr, err := g.product.Profile(ref.Profile); err == nil {
				cd.Profile = pr.Name
				cd.Placement = &mig.Placement{Start: ref.Start, Size: pr.MemorySlices}
			}
		}
	}
	return cd, nil
}
