package driver

import (
	"context"
	"errors"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// The unprepare path, one named phase per function:
//
//	unprepare        the kubelet's call: a held claim, a lost one, or none
//	  undo           the same steps for a rollback and for recovery
//	    recordUnprepare  the checkpoint's intent (prepared claims only)
//	    vendorUnprepare  the vendor's devices, last first, then its claim hook
//	    removeCDI        the claim's CDI spec
//	    deleteRecord     the record, durably; the guard's reservation
//
// Each phase is idempotent: an undo that fails or is interrupted is
// done again from the start by the next prepare, unprepare or start.

// unprepare unprepares one claim; an unknown claim succeeds.
func (e *engine) unprepare(ctx context.Context, ref ClaimRef) error {
	start := time.Now()
	defer e.metrics.observe(e.metrics.unprepareSeconds, start)
	unlock := e.locks.lock(ref.UID)
	defer unlock()
	e.mu.Lock()
	rec, lost := e.records[ref.UID], e.lost[ref.UID]
	e.mu.Unlock()
	var err error
	switch {
	case rec != nil:
		err = e.undo(ctx, rec)
	case lost:
		err = e.unprepareLost(ctx, ref)
	default:
		klog.FromContext(ctx).V(5).Info("Claim not prepared, nothing to do", "claim", ref)
		return nil
	}
	if err != nil {
		e.metrics.error("unprepare", reasonOf(err))
		klog.FromContext(ctx).Error(err, "Unprepare failed", "claim", ref,
			"reason", reasonOf(err))
		return err
	}
	klog.FromContext(ctx).V(3).Info("Unprepared claim", "claim", ref)
	return nil
}

// undo unprepares everything rec describes and removes the record. On
// error the record stays (on disk and in memory) so that undo can be tried
// again.
func (e *engine) undo(ctx context.Context, rec *checkpoint.Record) error {
	rec, err := e.recordUnprepare(ctx, rec)
	if err != nil {
		return err
	}
	if err := e.vendorUnprepare(ctx, rec); err != nil {
		return err
	}
	if err := e.removeCDI(ctx, rec.ClaimUID); err != nil {
		return err
	}
	return e.deleteRecord(rec)
}

// recordUnprepare turns a prepared claim's record into the unprepare
// intent before any vendor call and returns it; a record that is not
// prepared (an intent being rolled back or recovered) is returned as it
// is.
func (e *engine) recordUnprepare(
	ctx context.Context, rec *checkpoint.Record,
) (*checkpoint.Record, error) {
	if rec.State != checkpoint.StatePrepared {
		return rec, nil
	}
	intent := *rec
	intent.State = checkpoint.StateUnprepareStarted
	// The intent is appended to the prepared record's file, or on a
	// full disk the file is renamed: no new file, and no space needed.
	// Only when both fail (the record file was removed behind the
	// driver's back) is the intent written out.
	if merr := e.store.MarkUnprepare(&intent); merr != nil {
		if err := e.store.WriteIntent(&intent); err != nil {
			return nil, &ClaimError{reason: ReasonCheckpoint, err: errors.Join(merr, err)}
		}
		klog.FromContext(ctx).Info("Could not rename the checkpoint record to the unprepare "+
			"intent; wrote the intent instead", "claim", refOf(rec), "err", merr)
	}
	e.mu.Lock()
	e.records[rec.ClaimUID] = &intent
	e.metrics.preparedClaims.Dec()
	e.mu.Unlock()
	fault(faultUnprepareIntent)
	return &intent, nil
}

// vendorUnprepare runs the vendor's unprepare of each device, last
// first, with the data its prepare returned, then its claim hook.
func (e *engine) vendorUnprepare(ctx context.Context, rec *checkpoint.Record) error {
	ref := refOf(rec)
	for i := len(rec.Devices) - 1; i >= 0; i-- {
		d := rec.Devices[i]
		if err := e.preparer.UnprepareDevice(ctx, ref, allocatedOf(d), d.Data); err != nil {
			return failed(ReasonVendor, "unprepare device %s/%s of claim %s: %w",
				d.Pool, d.Device, ref, err)
		}
		fault(faultUnprepareDevice)
	}
	if e.claimHooks == nil {
		return nil
	}
	var devs []AllocatedDevice
	for _, d := range rec.Devices {
		devs = append(devs, allocatedOf(d))
	}
	if err := e.claimHooks.UnprepareClaim(ctx, ref, devs); err != nil {
		return failed(ReasonVendor, "unprepare claim %s: %w", ref, err)
	}
	fault(faultUnprepareClaim)
	return nil
}

// removeCDI removes the claim's CDI spec.
func (e *engine) removeCDI(ctx context.Context, uid types.UID) error {
	if err := e.specs.Remove(ctx, uid); err != nil {
		return &ClaimError{reason: ReasonCDI, err: err}
	}
	fault(faultUnprepareCDI)
	return nil
}

// deleteRecord removes the claim's record, durably, then drops it from
// memory and releases its devices.
func (e *engine) deleteRecord(rec *checkpoint.Record) error {
	if err := e.store.Delete(rec.ClaimUID); err != nil {
		return &ClaimError{reason: ReasonCheckpoint, err: err}
	}
	e.forget(rec)
	fault(faultUnprepareComplete)
	return nil
}

// forget drops rec from memory and releases its devices.
func (e *engine) forget(rec *checkpoint.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cur := e.records[rec.ClaimUID]; cur != nil {
		e.releaseLocked(cur)
	}
	e.releaseLocked(rec)
	delete(e.records, rec.ClaimUID)
}

func (e *engine) isLost(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lost[uid]
}

// releaseLost undoes a lost claim (one whose checkpoint record was
// quarantined) from its allocation: every device of this driver is
// unprepared with nil data, as after a crash in the middle of a prepare,
// the claim hook runs and the CDI spec is removed. The quarantined record
// is then marked released. A crash half-way leaves the claim lost, so the
// next call does it again; the vendor's unprepare is idempotent.
func (e *engine) releaseLost(ctx context.Context, obj *resourceapi.ResourceClaim) error {
	devs, err := devicesFromClaim(e.driverName, obj)
	if err != nil {
		return failed(ReasonAllocation, "claim %s (checkpoint record lost to corruption): %w",
			klog.KObj(obj), err)
	}
	rec := intentOf(obj, devs)
	klog.FromContext(ctx).Info("Undoing claim whose checkpoint record was corrupt, from its "+
		"allocation", "claim", klog.KObj(obj), "devices", len(devs))
	if err := e.undo(ctx, rec); err != nil {
		return err
	}
	if err := e.markReleased(obj.UID); err != nil {
		return err
	}
	fault(faultLostReleased)
	return nil
}

// unprepareLost unprepares a lost claim. Its devices are known only while
// the claim is in the API server; when it is gone they cannot be released,
// which is reported (log, metric, event) and not retried.
func (e *engine) unprepareLost(ctx context.Context, ref ClaimRef) error {
	var obj *resourceapi.ResourceClaim
	if e.getClaim != nil {
		var err error
		obj, err = e.getClaim(ctx, ref)
		if err != nil && !apierrors.IsNotFound(err) {
			return failed(ReasonAPI, "unprepare claim %s (checkpoint record lost to "+
				"corruption): read its allocation: %w", ref, err)
		}
	}
	if obj != nil && obj.UID == ref.UID && obj.Status.Allocation != nil {
		return e.releaseLost(ctx, obj)
	}
	e.metrics.error("unprepare", ReasonCorrupt)
	klog.FromContext(ctx).Error(nil, "Devices of a claim whose checkpoint record was corrupt "+
		"cannot be released: the claim is gone from the API server; check the node's devices",
		"claim", ref)
	if e.onUnreleased != nil {
		e.onUnreleased(ctx, ref)
	}
	// The preparer may know the claim's devices by its UID (claim-level
	// state such as partitions it made): let it release them.
	if e.claimHooks != nil {
		if err := e.claimHooks.UnprepareClaim(ctx, ref, nil); err != nil {
			return failed(ReasonVendor, "unprepare claim %s (checkpoint record lost to "+
				"corruption): %w", ref, err)
		}
	}
	if err := e.specs.Remove(ctx, ref.UID); err != nil {
		return &ClaimError{reason: ReasonCDI, err: err}
	}
	return e.markReleased(ref.UID)
}

func (e *engine) markReleased(uid types.UID) error {
	if err := e.store.Release(uid); err != nil {
		return &ClaimError{reason: ReasonCheckpoint, err: err}
	}
	e.mu.Lock()
	delete(e.lost, uid)
	e.mu.Unlock()
	return nil
}
