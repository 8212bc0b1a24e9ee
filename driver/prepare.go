package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// The prepare path, one named phase per function:
//
//	prepareClaim
//	  resume        a repeated prepare, a half-way undo, a lost record
//	  validate      the allocation: this driver's devices, published
//	  reserve       the double-use guard, in memory
//	  recordIntent  the checkpoint's intent, durable before any vendor call
//	  vendorPrepare the vendor's claim hook, devices and claim edits
//	  checkShareEdits  each share of a device with variables of its own
//	  writeCDI      the claim's CDI spec
//	  record        the completed record, durable; the kubelet's answer
//
// A phase that fails after recordIntent rolls the claim back through
// undo (unprepare.go), the path a crashed prepare takes at the next start.

// preparation is one prepare of one claim as it goes through the phases.
// Only the goroutine holding the claim's lock touches it.
type preparation struct {
	obj   *resourceapi.ResourceClaim
	claim Claim
	devs  []AllocatedDevice
	// rec is the private record, filled in as the devices are prepared;
	// what others see is the published intent, a copy.
	rec *checkpoint.Record
	// spec is the claim's CDI spec; specIndex the rec.Devices index of
	// each of its devices.
	spec      cdi.Claim
	specIndex []int
}

// prepare prepares one claim. It returns the kubelet's result; the error
// is also in the result's Err.
func (e *engine) prepare(
	ctx context.Context, claim *resourceapi.ResourceClaim,
) kubeletplugin.PrepareResult {
	start := time.Now()
	defer e.metrics.observe(e.metrics.prepareSeconds, start)
	res, err := e.prepareClaim(ctx, claim)
	if err != nil {
		e.metrics.error("prepare", reasonOf(err))
		klog.FromContext(ctx).Error(err, "Prepare failed", "claim", klog.KObj(claim),
			"reason", reasonOf(err))
		return kubeletplugin.PrepareResult{Err: err}
	}
	return res
}

// prepareClaim runs the phases of one claim's prepare under its lock.
func (e *engine) prepareClaim(
	ctx context.Context, obj *resourceapi.ResourceClaim,
) (kubeletplugin.PrepareResult, error) {
	unlock := e.locks.lock(obj.UID)
	defer unlock()

	if res, done, err := e.resume(ctx, obj); done || err != nil {
		return res, err
	}
	p, err := e.validate(ctx, obj)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	if len(p.devs) == 0 {
		return kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}, nil
	}
	if err := e.reserve(p); err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	pending, err := e.recordIntent(p)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	defer pending.Close()
	if err := e.vendorPrepare(ctx, p); err != nil {
		return e.rollback(ctx, p, err)
	}
	if err := checkShareEdits(p); err != nil {
		return e.rollback(ctx, p, err)
	}
	if err := e.writeCDI(ctx, p); err != nil {
		return e.rollback(ctx, p, err)
	}
	done, err := e.record(p, pending)
	if err != nil {
		return e.rollback(ctx, p, err)
	}
	klog.FromContext(ctx).V(3).Info("Prepared claim", "claim", klog.KObj(obj),
		"devices", len(done.Devices))
	return resultOf(done), nil
}

// resume deals with what the runtime already holds of the claim: a
// prepared claim gets its recorded answer (done), with its CDI spec
// written again when it is gone; a claim left half-way by a failed
// rollback is undone first; a lost claim (its record quarantined) is
// undone from its allocation. Otherwise the prepare goes on afresh.
func (e *engine) resume(
	ctx context.Context, obj *resourceapi.ResourceClaim,
) (kubeletplugin.PrepareResult, bool, error) {
	e.mu.Lock()
	existing := e.records[obj.UID]
	e.mu.Unlock()
	if existing != nil {
		if existing.State == checkpoint.StatePrepared {
			klog.FromContext(ctx).V(5).Info("Claim already prepared", "claim", klog.KObj(obj))
			if hasCDIDevices(existing) && !e.specExists(existing.ClaimUID) {
				// The CDI folder was deleted or wiped while the claim is
				// in use: the IDs would not resolve.
				if err := e.restoreSpec(ctx, existing); err != nil {
					err = &ClaimError{reason: ReasonCDI, err: err}
					return kubeletplugin.PrepareResult{}, true, err
				}
			}
			return resultOf(existing), true, nil
		}
		// Left half-way by a failed rollback: finish undoing it first.
		if err := e.undo(ctx, existing); err != nil {
			return kubeletplugin.PrepareResult{}, true, err
		}
	}
	if e.isLost(obj.UID) {
		// Prepared before its record was corrupted: undo what the
		// allocation says was prepared, then prepare afresh.
		if err := e.releaseLost(ctx, obj); err != nil {
			return kubeletplugin.PrepareResult{}, true, err
		}
	}
	return kubeletplugin.PrepareResult{}, false, nil
}

// validate reads the claim's devices of this driver from its allocation
// and refuses a device this driver does not publish (a stale or forged
// allocation). It warns of opaque configuration no driver applies.
func (e *engine) validate(
	ctx context.Context, obj *resourceapi.ResourceClaim,
) (*preparation, error) {
	devs, err := devicesFromClaim(e.driverName, obj)
	if err != nil {
		return nil, failed(ReasonAllocation, "claim %s: %w", klog.KObj(obj), err)
	}
	if e.published != nil {
		for _, d := range devs {
			if !e.published(ctx, d.Pool, d.Device) {
				return nil, failed(ReasonAllocation, "claim %s: device %s (request %q) is not "+
					"published by driver %s on this node, so the scheduler cannot have "+
					"allocated it: the allocation is stale or forged; refusing to prepare it",
					klog.KObj(obj), d.ID(), d.Request, e.driverName)
			}
		}
	}
	ref := ClaimRef{UID: obj.UID, Namespace: obj.Namespace, Name: obj.Name}
	p := &preparation{obj: obj, devs: devs, claim: Claim{ClaimRef: ref, Object: obj}}
	if len(devs) == 0 {
		return p, nil
	}
	if unused := unusedConfigDrivers(obj); len(unused) > 0 {
		klog.FromContext(ctx).Info("Warning: the claim carries opaque configuration for "+
			"drivers that allocated none of its devices; no driver applies it",
			"claim", klog.KObj(obj), "configDrivers", unused, "driver", e.driverName)
		if e.onUnusedConfig != nil {
			e.onUnusedConfig(ctx, obj, unused)
		}
	}
	p.rec = intentOf(obj, devs)
	p.spec = cdi.Claim{UID: obj.UID, Namespace: obj.Namespace, Name: obj.Name}
	return p, nil
}

// reserve checks the double-use guard for the claim's devices and
// reserves them, publishing the intent in memory.
func (e *engine) reserve(p *preparation) error {
	intent := cloneRecord(p.rec)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.reserveLocked(intent); err != nil {
		return err
	}
	e.records[intent.ClaimUID] = intent
	return nil
}

// recordIntent writes the intent to the checkpoint, durably, before any
// vendor call: a crash from here on is undone at the next start. On
// failure the reservation is released.
func (e *engine) recordIntent(p *preparation) (*checkpoint.Pending, error) {
	pending, err := e.store.Begin(p.rec)
	if err != nil {
		e.forget(p.rec)
		return nil, &ClaimError{reason: ReasonCheckpoint, err: err}
	}
	fault(faultPrepareIntent)
	return pending, nil
}

// vendorPrepare runs the vendor's parts: the claim hook, each device's
// prepare (its data, metadata and edits go into the private record and
// the CDI spec) and the claim-wide edits.
func (e *engine) vendorPrepare(ctx context.Context, p *preparation) error {
	if e.claimHooks != nil {
		if err := e.claimHooks.PrepareClaim(ctx, p.claim, p.devs); err != nil {
			return failed(reasonFor(err), "prepare claim %s: %w", p.claim.ClaimRef, err)
		}
		fault(faultPrepareClaimHook)
	}
	for i := range p.devs {
		if err := e.prepareDevice(ctx, p, i); err != nil {
			return err
		}
	}
	return e.claimEdits(ctx, p)
}

// prepareDevice prepares the claim's i-th device.
func (e *engine) prepareDevice(ctx context.Context, p *preparation, i int) error {
	d, ref := p.devs[i], p.claim.ClaimRef
	out, err := e.preparer.PrepareDevice(ctx, p.claim, d)
	if err != nil {
		return failed(reasonFor(err), "prepare device %s for request %q of claim %s: %w",
			d.ID(), d.Request, ref, err)
	}
	fault(faultPrepareDevice)
	rd := &p.rec.Devices[i]
	if len(out.Data) > 0 {
		if !json.Valid(out.Data) {
			return failed(ReasonVendor, "prepare device %s of claim %s: Data is not valid JSON",
				d.ID(), ref)
		}
		rd.Data = slices.Clone(out.Data)
	}
	if out.Metadata != nil {
		raw, err := json.Marshal(out.Metadata)
		if err != nil {
			return failed(ReasonVendor, "prepare device %s of claim %s: encode Metadata: %w",
				d.ID(), ref, err)
		}
		rd.Metadata = raw
		fault(faultPrepareMetadata)
	}
	if out.Edits != nil && !out.Edits.IsEmpty() {
		p.addSpecDevice(i, out.Edits)
	}
	rd.CDIDeviceIDs = append(rd.CDIDeviceIDs, out.CDIDeviceIDs...)
	return nil
}

// claimEdits adds the ClaimEditor's spec-wide edits. They reach a
// container only through a device of the spec: every device gets one.
func (e *engine) claimEdits(ctx context.Context, p *preparation) error {
	if e.claimEditor == nil {
		return nil
	}
	common, err := e.claimEditor.ClaimEdits(ctx, p.claim, p.devs)
	if err != nil {
		return failed(reasonFor(err), "container edits of claim %s: %w", p.claim.ClaimRef, err)
	}
	fault(faultPrepareClaimEdits)
	if common == nil || common.IsEmpty() {
		return nil
	}
	p.spec.Common = common
	for i := range p.devs {
		if p.rec.Devices[i].CDIName == "" {
			p.addSpecDevice(i, nil)
		}
	}
	return nil
}

// addSpecDevice puts the claim's i-th device into its CDI spec.
func (p *preparation) addSpecDevice(i int, edits *cdi.Edits) {
	rd := &p.rec.Devices[i]
	rd.CDIName = cdiName(i, p.devs[i])
	p.spec.Devices = append(p.spec.Devices, cdi.Device{Name: rd.CDIName, Edits: edits})
	p.specIndex = append(p.specIndex, i)
}

// checkShareEdits refuses a claim two of whose shares of one device set
// the same environment variable: a container that gets both sees only
// the last value (a vendor's defect; [AllocatedDevice.ShareName] names
// per-share variables). Variables of the claim-wide edits are set once
// and are not concerned.
func checkShareEdits(p *preparation) error {
	type owner struct {
		share string
		i     int
	}
	set := map[deviceKey]map[string]owner{}
	for j, dev := range p.spec.Devices {
		i := p.specIndex[j]
		d := p.devs[i]
		if d.ShareID == nil {
			continue
		}
		k := deviceKey{d.Pool, d.Device}
		if set[k] == nil {
			set[k] = map[string]owner{}
		}
		for _, name := range dev.Edits.EnvNames() {
			if o, ok := set[k][name]; ok && o.i != i {
				return failed(ReasonVendor, "claim %s: shares %s and %s of device %s both set "+
					"variable %s: a container that gets both would see one value; name "+
					"per-share variables after AllocatedDevice.ShareName",
					p.claim.ClaimRef, o.share, *d.ShareID, d.ID(), name)
			}
			set[k][name] = owner{share: string(*d.ShareID), i: i}
		}
	}
	return nil
}

// writeCDI writes the claim's CDI spec, when it has devices, and puts
// each device's CDI ID first in its list.
func (e *engine) writeCDI(ctx context.Context, p *preparation) error {
	if len(p.spec.Devices) == 0 {
		return nil
	}
	ids, data, err := e.specs.WriteRecorded(ctx, p.spec)
	if err != nil {
		return &ClaimError{reason: ReasonCDI, err: err}
	}
	p.rec.CDISpec = data
	for j, id := range ids {
		rd := &p.rec.Devices[p.specIndex[j]]
		rd.CDIDeviceIDs = append([]string{id}, rd.CDIDeviceIDs...)
	}
	fault(faultPrepareCDI)
	return nil
}

// record commits the completed record, durably, and publishes it: from
// here on a repeated prepare gets this answer.
func (e *engine) record(p *preparation, pending *checkpoint.Pending) (*checkpoint.Record, error) {
	done := cloneRecord(p.rec)
	done.State = checkpoint.StatePrepared
	if err := pending.Commit(done); err != nil {
		return nil, &ClaimError{reason: ReasonCheckpoint, err: err}
	}
	e.mu.Lock()
	e.records[done.ClaimUID] = done
	e.metrics.preparedClaims.Inc()
	e.mu.Unlock()
	fault(faultPrepareComplete)
	return done, nil
}

// rollback undoes a prepare that failed after its intent was recorded
// and returns cause; when the undo fails too, the record stays for the
// next prepare or unprepare to undo, and the error says so.
func (e *engine) rollback(
	ctx context.Context, p *preparation, cause error,
) (kubeletplugin.PrepareResult, error) {
	if uerr := e.undo(ctx, p.rec); uerr != nil {
		e.metrics.error("prepare", ReasonRollback)
		err := fmt.Errorf("%w (rollback failed, will retry: %v)", cause, uerr)
		return kubeletplugin.PrepareResult{}, &ClaimError{reason: reasonOf(cause), err: err}
	}
	return kubeletplugin.PrepareResult{}, cause
}

// cloneRecord copies r deeply enough that changing the copy's devices
// (the only part prepare fills in) leaves r alone.
func cloneRecord(r *checkpoint.Record) *checkpoint.Record {
	c := *r
	c.Devices = slices.Clone(r.Devices)
	for i := range c.Devices {
		c.Devices[i].CDIDeviceIDs = slices.Clone(c.Devices[i].CDIDeviceIDs)
	}
	return &c
}

// intentOf is the intent record of preparing devs for obj.
func intentOf(obj *resourceapi.ResourceClaim, devs []AllocatedDevice) *checkpoint.Record {
	rec := &checkpoint.Record{ClaimUID: obj.UID, Namespace: obj.Namespace, Name: obj.Name,
		State: checkpoint.StatePrepareStarted}
	for _, d := range devs {
		rec.Devices = append(rec.Devices, checkpoint.Device{Request: d.Request, Pool: d.Pool,
			Device: d.Device, ShareID: d.ShareID, AdminAccess: d.AdminAccess,
			ConsumedCapacity: cloneCapacity(d.ConsumedCapacity)})
	}
	return rec
}

// cdiName is the name of a claim's i-th device in the claim's CDI spec:
// "<i>-<device>", and for a share "<i>-<device>-<share ID>"
// ([AllocatedDevice.ShareName]), so that each share has a CDI device, and
// edits, of its own.
func cdiName(i int, d AllocatedDevice) string { return strconv.Itoa(i) + "-" + d.ShareName() }

// cloneCapacity copies a share's consumed capacity; nil stays nil.
func cloneCapacity(
	in map[resourceapi.QualifiedName]resource.Quantity,
) map[resourceapi.QualifiedName]resource.Quantity {
	if in == nil {
		return nil
	}
	out := make(map[resourceapi.QualifiedName]resource.Quantity, len(in))
	for k, v := range in {
		out[k] = v.DeepCopy()
	}
	return out
}
