package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// Fault points: places in prepare and unprepare where a test binary can
// make the process die (see faultHook). They sit right after each durable
// step.
const (
	faultPrepareCreated    = "prepare/record-created"
	faultPrepareIntent     = "prepare/intent-written"
	faultPrepareClaimHook  = "prepare/claim-hook-done"
	faultPrepareDevice     = "prepare/device-prepared"
	faultPrepareMetadata   = "prepare/metadata-recorded"
	faultPrepareClaimEdits = "prepare/claim-edits-done"
	faultPrepareCDI        = "prepare/cdi-written"
	faultPrepareAppended   = "prepare/completion-appended"
	faultPrepareComplete   = "prepare/completed"
	faultUnprepareIntent   = "unprepare/intent-written"
	faultUnprepareDevice   = "unprepare/device-unprepared"
	faultUnprepareClaim    = "unprepare/claim-hook-done"
	faultUnprepareCDI      = "unprepare/cdi-removed"
	faultUnprepareUnlinked = "unprepare/record-unlinked"
	faultUnprepareComplete = "unprepare/record-deleted"
	faultLostReleased      = "lost/released"
)

// faultPoints lists the fault points in the order they are reached.
var faultPoints = []string{
	faultPrepareCreated, faultPrepareIntent, faultPrepareClaimHook, faultPrepareDevice, faultPrepareMetadata, faultPrepareClaimEdits, faultPrepareCDI, faultPrepareAppended, faultPrepareComplete,
	faultUnprepareIntent, faultUnprepareDevice, faultUnprepareClaim, faultUnprepareCDI, faultUnprepareUnlinked, faultUnprepareComplete,
	faultLostReleased,
}

// faultHook is nil in every program except the driver's own test binary,
// which sets it (from a _test.go file) to kill the process at a fault
// point.
var faultHook func(point string)

func fault(point string) {
	if faultHook != nil {
		faultHook(point)
	}
}

// engine owns the prepared-claim state: checkpoint, in-memory index,
// device guard and CDI specs. It knows nothing about gRPC.
type engine struct {
	driverName    string
	store         *checkpoint.Store
	specs         *cdi.Writer
	preparer      Preparer
	claimHooks    ClaimPreparer
	claimEditor   ClaimEditor
	metrics       *metrics
	reloadPerCall bool
	onCorrupt     func(ctx context.Context, c checkpoint.Corrupt)
	// getClaim reads a claim from the API server (nil: no API server,
	// every claim counts as gone). It serves claims whose record was
	// lost to corruption.
	getClaim func(ctx context.Context, ref ClaimRef) (*resourceapi.ResourceClaim, error)
	// onUnreleased reports a lost claim whose devices could not be
	// released because the claim is gone.
	onUnreleased func(ctx context.Context, ref ClaimRef)
	// onUnusedConfig, when set, is told of a claim whose allocation
	// carries opaque configuration for drivers that allocated none of
	// its devices (unusedConfigDrivers); the engine logs it either way.
	onUnusedConfig func(ctx context.Context, obj *resourceapi.ResourceClaim, drivers []string)
	// published says whether the driver publishes a device (nil: no
	// check). A claim allocated a device it does not publish is refused.
	published func(ctx context.Context, pool, device string) bool
	// bootID is the node's boot ID ("" turns reboot detection off).
	bootID string
	// reconciler is the preparer's Reconciler, nil if it has none.
	reconciler Reconciler

	locks keyedMutex

	// mu guards the maps below. A record in records is immutable once
	// stored: a change stores a new record under mu, so a reader may keep
	// and read what it got under mu after unlocking. The work on one
	// claim (prepare, undo) is done on a private record by the holder of
	// the claim's lock (locks), the only one that replaces the claim's
	// record.
	mu      sync.Mutex
	records map[types.UID]*checkpoint.Record
	holders map[deviceKey]map[types.UID]holder
	// lost holds the claims whose checkpoint record was corrupt and
	// quarantined: what was prepared for them is known only from their
	// allocation in the API server (see releaseLost).
	lost map[types.UID]bool
}

func newEngine(driverName string, store *checkpoint.Store, specs *cdi.Writer, p Preparer, m *metrics) *engine {
	e := &engine{
		driverName: driverName, store: store, specs: specs, preparer: p, metrics: m,
		records: map[types.UID]*checkpoint.Record{},
		holders: map[deviceKey]map[types.UID]holder{},
		lost:    map[types.UID]bool{},
	}
	if cp, ok := p.(ClaimPreparer); ok {
		e.claimHooks = cp
	}
	// A crash point between a record's unlink and the group-committed
	// folder fsync that makes it durable.
	store.OnUnlinked = func(types.UID) { fault(faultUnprepareUnlinked) }
	// Crash points inside the record's two writes: the file created but
	// still empty, and the completed record appended but not fsynced.
	store.OnCreated = func(types.UID) { fault(faultPrepareCreated) }
	store.OnAppended = func(types.UID) { fault(faultPrepareAppended) }
	if ce, ok := p.(ClaimEditor); ok {
		e.claimEditor = ce
	}
	if r, ok := p.(Reconciler); ok {
		e.reconciler = r
	}
	return e
}

// preparedCount is the number of claims held (prepared or half-way).
func (e *engine) preparedCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.records)
}

// setPreparedGauge counts the prepared records (O(n): only after a load;
// prepare and unprepare adjust the gauge by one).
func (e *engine) setPreparedGauge() {
	n := 0
	for _, r := range e.records {
		if r.State == checkpoint.StatePrepared {
			n++
		}
	}
	e.metrics.preparedClaims.Set(float64(n))
}

// load reads the checkpoint into memory (replacing what was there) and
// returns the records that are half-way.
func (e *engine) load(ctx context.Context) ([]*checkpoint.Record, error) {
	records, corrupt, err := e.store.Load()
	if err != nil {
		return nil, err
	}
	for _, c := range corrupt {
		e.metrics.error("recover", ReasonCorrupt)
		klog.FromContext(ctx).Error(c.Err, "Quarantined corrupt checkpoint record; its claim keeps its CDI spec and is undone from its allocation in the API server when the kubelet prepares or unprepares it", "file", c.File, "quarantinedTo", c.QuarantinedTo, "claimUIDs", c.Claims)
		if e.onCorrupt != nil {
			e.onCorrupt(ctx, c)
		}
	}
	lost, err := e.store.Lost()
	if err != nil {
		return nil, err
	}
	// A record written after the quarantine supersedes it; release the
	// quarantined one so that it cannot come back once this record goes.
	held := make(map[types.UID]bool, len(records))
	for _, r := range records {
		held[r.ClaimUID] = true
	}
	lost = slices.DeleteFunc(lost, func(uid types.UID) bool {
		if !held[uid] {
			return false
		}
		if err := e.store.Release(uid); err != nil {
			klog.FromContext(ctx).Error(err, "Could not release a superseded quarantined checkpoint record", "claimUID", uid)
		}
		return true
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lost = make(map[types.UID]bool, len(lost))
	for _, uid := range lost {
		e.lost[uid] = true
	}
	e.records = make(map[types.UID]*checkpoint.Record, len(records))
	e.holders = map[deviceKey]map[types.UID]holder{}
	var halfway []*checkpoint.Record
	for _, r := range records {
		e.records[r.ClaimUID] = r
		// Reserve without the guard check: what is on disk is the truth.
		for _, d := range r.Devices {
			k := deviceKey{d.Pool, d.Device}
			if e.holders[k] == nil {
				e.holders[k] = map[types.UID]holder{}
			}
			e.holders[k][r.ClaimUID] = holderOf(d)
		}
		if r.State != checkpoint.StatePrepared {
			halfway = append(halfway, r)
		}
	}
	e.setPreparedGauge()
	return halfway, nil
}

// recover loads the checkpoint, undoes claims left half-way, writes lost
// CDI specs of prepared claims again and removes orphaned CDI specs. It
// must finish before the driver serves the kubelet.
func (e *engine) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	halfway, err := e.load(ctx)
	if err != nil {
		return fmt.Errorf("recover checkpoint: %w", err)
	}
	// A prepared claim whose CDI spec is missing or unreadable cannot be
	// used by a new container. After a reboot (the CDI folder on tmpfs,
	// or a power loss) it is undone, so that the kubelet's next prepare
	// does it afresh; without one its spec is written again from its
	// record, as its devices still serve running containers.
	rebooted, err := e.rebooted()
	if err != nil {
		return fmt.Errorf("recover checkpoint: %w", err)
	}
	e.mu.Lock()
	var lostSpec []*checkpoint.Record
	for _, r := range e.records {
		// After a reboot no prepared claim is: its devices were reset,
		// and its CDI spec may name a device or file that is gone. Every
		// record is undone (the vendor's unprepare is idempotent), so
		// the kubelet's next prepare does it afresh instead of getting
		// the recorded answer.
		switch {
		case r.State != checkpoint.StatePrepared:
		case rebooted:
			halfway = append(halfway, r)
		case hasCDIDevices(r) && !e.specReadable(r.ClaimUID):
			// Without a reboot the claim's devices still serve its
			// containers: its spec is written again, never undone.
			lostSpec = append(lostSpec, r)
		}
	}
	e.mu.Unlock()
	for _, r := range lostSpec {
		if err := e.restoreSpec(ctx, r); err != nil {
			logger.Error(err, "A prepared claim's CDI spec is lost; its next prepare fails until it is unprepared", "claim", refOf(r))
		}
	}
	if rebooted {
		logger.Info("The node rebooted since the checkpoint was written; undoing every claim it holds", "claims", len(halfway), "bootID", e.bootID)
	}
	var failedUndo error
	for _, r := range halfway {
		logger.Info("Undoing claim left by a previous process", "claim", refOf(r), "state", r.State, "rebooted", rebooted)
		if err := e.undo(ctx, r); err != nil {
			// Keep serving: the record stays and is retried on the next
			// prepare or unprepare of the claim.
			logger.Error(err, "Undo of claim failed; will retry", "claim", refOf(r))
			failedUndo = errors.Join(failedUndo, err)
		}
	}
	if rebooted && failedUndo != nil {
		// A record kept from before the reboot would be handed to the
		// kubelet as if it were prepared: do not serve.
		return fmt.Errorf("recover checkpoint after a reboot: undo the claims prepared before it: %w", failedUndo)
	}
	if err := e.recordBootID(ctx); err != nil {
		return fmt.Errorf("recover checkpoint: %w", err)
	}
	e.reconcile(ctx)
	e.collect(ctx)
	return nil
}

// reconcile tells the preparer's Reconciler which claims the runtime
// holds after recovery. A failure is logged and counted, never fatal: the
// driver must still serve the claims it holds.
func (e *engine) reconcile(ctx context.Context) {
	if e.reconciler == nil {
		return
	}
	e.mu.Lock()
	held := make([]HeldClaim, 0, len(e.records)+len(e.lost))
	for _, r := range e.records {
		h := HeldClaim{ClaimRef: refOf(r), Prepared: r.State == checkpoint.StatePrepared}
		for _, d := range r.Devices {
			h.Devices = append(h.Devices, HeldDevice{AllocatedDevice: allocatedOf(d), Data: slices.Clone(d.Data)})
		}
		held = append(held, h)
	}
	for uid := range e.lost {
		held = append(held, HeldClaim{ClaimRef: ClaimRef{UID: uid}, Lost: true})
	}
	e.mu.Unlock()
	slices.SortFunc(held, func(a, b HeldClaim) int { return strings.Compare(string(a.UID), string(b.UID)) })
	if err := e.reconciler.Reconcile(ctx, held); err != nil {
		e.metrics.error("recover", ReasonVendor)
		klog.FromContext(ctx).Error(err, "The preparer's reconcile with the held claims failed; serving anyway")
	}
}

// collect removes the CDI specs of claims that are neither held nor lost
// and temporary files left by crashed writes. A failure is logged and
// counted, never returned: the next collection tries again, and a
// leftover spec harms no one (its claim's IDs are never handed out again).
func (e *engine) collect(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if err := e.specs.RemoveStaleTemp(ctx); err != nil {
		e.metrics.error("housekeeping", ReasonCDI)
		logger.Error(err, "Could not remove temporary CDI files; will retry")
	}
	orphans, err := e.specs.Orphans(ctx, func(uid types.UID) bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.records[uid] != nil || e.lost[uid]
	})
	if err != nil {
		e.metrics.error("housekeeping", ReasonCDI)
		logger.Error(err, "Could not list CDI specs; will retry")
		return
	}
	var removed []types.UID
	stuck := 0
	for _, uid := range orphans {
		// Again under the claim's lock: a prepare of the claim cannot
		// write its spec between the check and the removal.
		unlock := e.locks.lock(uid)
		e.mu.Lock()
		live := e.records[uid] != nil || e.lost[uid]
		e.mu.Unlock()
		// A lost claim's CDI spec stays: its containers may still be
		// restarted with the IDs they were given.
		if !live {
			if err := e.specs.Remove(ctx, uid); err != nil {
				stuck++
				e.metrics.error("housekeeping", ReasonCDI)
				logger.Error(err, "Could not remove orphaned CDI spec; will retry", "claimUID", uid)
			} else {
				removed = append(removed, uid)
			}
		}
		unlock()
	}
	e.metrics.orphanedSpecs.Set(float64(stuck))
	if len(removed) > 0 {
		logger.Info("Removed orphaned CDI specs", "claimUIDs", removed)
	}
}

func hasCDIDevices(r *checkpoint.Record) bool {
	for _, d := range r.Devices {
		if d.CDIName != "" {
			return true
		}
	}
	return false
}

// restoreSpec writes a prepared claim's lost CDI spec again from its
// record. A record written before specs were kept cannot: the error says
// what to do (unprepare the claim; undoing it here would take its devices
// from the containers that use them).
func (e *engine) restoreSpec(ctx context.Context, r *checkpoint.Record) error {
	if len(r.CDISpec) == 0 {
		return fmt.Errorf("the CDI spec of prepared claim %s is gone (the CDI folder was deleted?) and its checkpoint record, older than this driver, does not keep it: delete the claim's pods so that it is unprepared, then prepared again", refOf(r))
	}
	return e.specs.Restore(ctx, r.ClaimUID, r.CDISpec)
}

// specExists says whether the claim's CDI spec file is there (written
// atomically, it is whole when it is there; recovery parses it too).
func (e *engine) specExists(uid types.UID) bool {
	path, err := e.specs.SpecPath(uid)
	if err != nil {
		return false
	}
	_, err = os.Stat(path)
	return err == nil
}

// specReadable says whether the claim's CDI spec parses.
func (e *engine) specReadable(uid types.UID) bool {
	path, err := e.specs.SpecPath(uid)
	if err != nil {
		return false
	}
	_, err = cdiapi.ReadSpec(path, 0)
	return err == nil
}

func refOf(r *checkpoint.Record) ClaimRef {
	return ClaimRef{UID: r.ClaimUID, Namespace: r.Namespace, Name: r.Name}
}

// allocatedOf is the allocated device a record keeps: what the vendor's
// unprepare and reconcile get (no opaque configuration).
func allocatedOf(d checkpoint.Device) AllocatedDevice {
	return AllocatedDevice{Request: d.Request, Pool: d.Pool, Device: d.Device,
		ShareID: d.ShareID, AdminAccess: d.AdminAccess,
		ConsumedCapacity: cloneCapacity(d.ConsumedCapacity)}
}

func resultOf(r *checkpoint.Record) kubeletplugin.PrepareResult {
	res := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
	for _, d := range r.Devices {
		kd := kubeletplugin.Device{
			Requests:     []string{d.Request},
			PoolName:     d.Pool,
			DeviceName:   d.Device,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs),
		}
		if d.ShareID != nil {
			s := *d.ShareID
			kd.ShareID = &s
		}
		if len(d.Metadata) > 0 {
			// Written by prepare from the same type and checksummed with
			// the record, so it decodes.
			kd.Metadata = &kubeletplugin.DeviceMetadata{}
			if err := json.Unmarshal(d.Metadata, kd.Metadata); err != nil {
				kd.Metadata = nil
			}
		}
		res.Devices = append(res.Devices, kd)
	}
	return res
}

// syncFromDisk replaces the in-memory state with the checkpoint when
// several driver instances share it (rolling update). The caller holds
// the helper's cross-process lock.
func (e *engine) syncFromDisk(ctx context.Context) error {
	if !e.reloadPerCall {
		return nil
	}
	_, err := e.load(ctx)
	return err
}

// unusedConfigDrivers are the drivers, sorted, that the opaque
// configurations of obj's allocation name although none of them
// allocated a device of the claim: a claim written for another driver
// (NVIDIA's gpu.nvidia.com) with only its class renamed keeps the other
// driver's name in its configuration, and every driver skips it.
func unusedConfigDrivers(obj *resourceapi.ResourceClaim) []string {
	if obj.Status.Allocation == nil {
		return nil
	}
	allocated := map[string]bool{}
	for _, r := range obj.Status.Allocation.Devices.Results {
		allocated[r.Driver] = true
	}
	var out []string
	for _, c := range obj.Status.Allocation.Devices.Config {
		if c.Opaque != nil && !allocated[c.Opaque.Driver] && !slices.Contains(out, c.Opaque.Driver) {
			out = append(out, c.Opaque.Driver)
		}
	}
	slices.Sort(out)
	return out
}

// keyedMutex serializes work per claim UID.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[types.UID]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(uid types.UID) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[types.UID]*keyedEntry{}
	}
	ent := k.locks[uid]
	if ent == nil {
		ent = &keyedEntry{}
		k.locks[uid] = ent
	}
	ent.refs++
	k.mu.Unlock()
	ent.mu.Lock()
	return func() {
		ent.mu.Unlock()
		k.mu.Lock()
		ent.refs--
		if ent.refs == 0 {
			delete(k.locks, uid)
		}
		k.mu.Unlock()
	}
}
