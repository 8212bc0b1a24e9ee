package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
)

// Preparer is the per-device work a vendor implements. The runtime calls
// it once per allocated device of a claim, records the result in its
// checkpoint, writes the CDI spec and answers the kubelet. The runtime
// guarantees that PrepareDevice is not called twice for the same device of
// the same claim without an UnprepareDevice in between, and that two
// calls for the same claim never run at the same time; calls for
// different claims may run concurrently.
//
// A device that allows multiple allocations (consumable capacity,
// KEP-5075) is prepared once per share: each call gets the allocation's
// ShareID and ConsumedCapacity, and the runtime keeps each share's
// record, CDI device and guard entry as it keeps a device's, so the
// shares of one device held by several claims are each crash-safe and
// idempotent on their own. Calls for shares of one device in different
// claims may run concurrently: per-device state shared by the shares (a
// daemon serving them) must be safe for that.
type Preparer interface {
	// PrepareDevice makes one allocated device ready for the claim's
	// containers and returns the container edits to apply. When it fails
	// it must leave nothing behind: the runtime then undoes the claim's
	// other devices and reports the error to the kubelet, which retries.
	PrepareDevice(ctx context.Context, claim Claim, dev AllocatedDevice) (PreparedDevice, error)
	// UnprepareDevice undoes PrepareDevice. data is the Data that
	// PrepareDevice returned, read back from the checkpoint; it is nil when
	// the process died before PrepareDevice returned (the runtime is then
	// undoing a half-way prepare). UnprepareDevice must succeed when the
	// device is not (or no longer) prepared for the claim: it may be called
	// more than once, also by a later process after a crash.
	UnprepareDevice(ctx context.Context, claim ClaimRef, dev AllocatedDevice, data json.RawMessage) error
}

// ClaimPreparer is optionally implemented by a [Preparer] that has
// claim-level work (e.g. creating MIG partitions for all devices of a claim
// at once). PrepareClaim runs after the intent is recorded and before the
// first PrepareDevice; UnprepareClaim after the last UnprepareDevice, also
// when a failed or interrupted prepare is undone. UnprepareClaim must be
// idempotent like UnprepareDevice. For a claim whose checkpoint record
// was lost to corruption and whose allocation is gone from the API server,
// UnprepareClaim runs with no devices: a preparer that keeps claim-level
// state by claim UID releases what it holds for the claim.
type ClaimPreparer interface {
	PrepareClaim(ctx context.Context, claim Claim, devices []AllocatedDevice) error
	UnprepareClaim(ctx context.Context, claim ClaimRef, devices []AllocatedDevice) error
}

// Reconciler is optionally implemented by a [Preparer] that keeps state of
// its own about what it prepared (partitions it made, a journal of
// them). Reconcile runs once at start, after the runtime recovered its
// checkpoint (claims left half-way are undone, and after a reboot every
// claim is) and before it serves the kubelet, with every claim the
// runtime still holds: the preparer then drops what no held claim names,
// and keeps or adopts what one does. A claim in held may be prepared or
// still being undone; a lost one (its record was corrupt) has no known
// devices, and what the preparer holds for it must be kept until
// UnprepareClaim releases it. An error is logged and counted; the driver
// serves anyway.
type Reconciler interface {
	Reconcile(ctx context.Context, held []HeldClaim) error
}

// HeldClaim is a claim the runtime holds at start (see [Reconciler]).
type HeldClaim struct {
	ClaimRef
	// Prepared is true when the claim was prepared; false when an undo of
	// it failed and will be retried.
	Prepared bool
	// Lost is true when the claim's checkpoint record was corrupt: its
	// devices are unknown and Devices is empty (ClaimRef has its UID only).
	Lost bool
	// Devices are the claim's devices, each with the Data its
	// PrepareDevice returned (nil where it did not run).
	Devices []HeldDevice
}

// HeldDevice is a device of a [HeldClaim].
type HeldDevice struct {
	AllocatedDevice
	// Data is what PrepareDevice returned for the device.
	Data json.RawMessage
}

// ClaimEditor is optionally implemented by a [Preparer] whose claims need
// container edits shared by all their devices: driver libraries to mount,
// a hook to run once per container. ClaimEdits runs after the last
// PrepareDevice of a claim. Its edits go into the claim's CDI spec as
// spec-wide edits, which a container runtime applies once to a container
// that gets any device of the claim, however many it gets; every device
// of the claim then has a CDI ID, also one whose PreparedDevice had no
// edits. nil or empty edits change nothing. An error fails the prepare
// and undoes the claim's devices. The edits are not called again for a
// repeated prepare, which returns the recorded answer.
type ClaimEditor interface {
	ClaimEdits(ctx context.Context, claim Claim, devices []AllocatedDevice) (*cdi.Edits, error)
}

// ClaimRef identifies a ResourceClaim. It is all that is known when a claim
// is unprepared: the object may be gone from the API server by then.
type ClaimRef struct {
	UID       types.UID
	Namespace string
	Name      string
}

// String returns "namespace/name(uid)".
func (c ClaimRef) String() string { return c.Namespace + "/" + c.Name + "(" + string(c.UID) + ")" }

// Claim is a claim being prepared.
type Claim struct {
	ClaimRef
	// Object is the allocated claim as read from the API server. Do not
	// modify it.
	Object *resourceapi.ResourceClaim
}

// AllocatedDevice is one device that the scheduler allocated to a claim
// for this driver, exactly as in the claim's allocation result.
type AllocatedDevice struct {
	// Request is the request name of the allocation, "request/subrequest"
	// when the request had firstAvailable alternatives.
	Request string
	Pool    string
	Device  string
	// ShareID identifies this allocation of a device that allows multiple
	// allocations (consumable capacity); nil otherwise. It is unique
	// among the device's allocations and kept across restarts.
	ShareID *types.UID
	// AdminAccess is true when the claim asked for admin access: the
	// device may be in use by other claims at the same time.
	AdminAccess bool
	// ConsumedCapacity is the share of the device's capacities that this
	// allocation took (consumable capacity), nil otherwise; the
	// scheduler fills in the request policy's default for a capacity
	// the request did not name. UnprepareDevice and Reconcile get it
	// from the checkpoint; a record written before drakit kept it (issue
	// 49) gives nil, so a vendor that needs the amounts at unprepare
	// keeps them in its Data too.
	ConsumedCapacity map[resourceapi.QualifiedName]resource.Quantity
	// Config is the opaque configuration for this driver that applies to
	// the request, in precedence order: class configs first, then claim
	// configs; later entries override earlier ones. See [DecodeConfig].
	Config []OpaqueConfig
}

// ID returns "pool/device".
func (d AllocatedDevice) ID() string { return d.Pool + "/" + d.Device }

// ShareName names this allocation of the device on the node: the
// device's name, and for a share (ShareID set) "<device>-<share ID>".
// Two shares of one device have distinct names, and a share keeps its
// name across restarts. Name what a share's edits set after it
// (environment variables, files), so that two shares of one device in
// one container do not overwrite each other (see [PreparedDevice]).
func (d AllocatedDevice) ShareName() string {
	if d.ShareID == nil {
		return d.Device
	}
	return d.Device + "-" + string(*d.ShareID)
}

// BaseRequest returns the request name without the subrequest.
func (d AllocatedDevice) BaseRequest() string {
	base, _, _ := strings.Cut(d.Request, "/")
	return base
}

// OpaqueConfig is one opaque driver configuration from the claim or its
// device class.
type OpaqueConfig struct {
	// FromClass is true for configuration from the DeviceClass, false for
	// the claim's own.
	FromClass bool
	// Parameters is the raw JSON of the configuration object.
	Parameters json.RawMessage
}

// PreparedDevice is what PrepareDevice returns for one device.
type PreparedDevice struct {
	// Edits are the container edits for this device. The runtime puts them
	// into the claim's CDI spec under a device name unique to the claim
	// and returns that CDI ID to the kubelet. nil means no edits. A
	// container with several devices gets all their edits, one device
	// after the other, and a variable two devices set keeps only the
	// last value: name environment variables per device (e.g. with a
	// suffix from the device's name), see [cdi.Edits]. The shares of one
	// device in one claim each need variables of their own (named after
	// [AllocatedDevice.ShareName]): the runtime refuses a claim two of
	// whose shares of a device set the same variable.
	Edits *cdi.Edits
	// CDIDeviceIDs are additional, fully qualified CDI device IDs
	// ("vendor.com/class=name") from specs the vendor maintains itself.
	CDIDeviceIDs []string
	// Data is vendor state kept in the checkpoint and handed back to
	// UnprepareDevice. It must be JSON; keep it small.
	Data json.RawMessage
	// Metadata is what the claim's containers may read about the device
	// at run time (KEP-5304): attributes (typically those published in
	// the ResourceSlice, plus run-time ones such as a MIG instance's UUID)
	// and network data. It is kept in the checkpoint, so a repeated
	// prepare returns it unchanged, and ignored unless the driver runs
	// [WithDeviceMetadata].
	Metadata *DeviceMetadata
}

// DeviceMetadata is the kubelet plugin helper's device metadata: the
// helper writes it, per request, to a JSON file that it bind-mounts
// read-only into the claim's containers at
// /var/run/kubernetes.io/dra-device-attributes/<claim>/<request>/metadata.json.
// Attribute keys follow ResourceSlice conventions: unqualified names are
// in the driver's domain.
type DeviceMetadata = kubeletplugin.DeviceMetadata

// ErrInvalidConfig is wrapped by errors about opaque configuration that
// cannot be decoded or is not valid.
var ErrInvalidConfig = errors.New("invalid opaque device configuration")

// DecodeConfig decodes the device's opaque configurations into into, in
// precedence order, so that fields of a claim config override those of a
// class config. Unknown fields are an error (a typo in a claim must not be
// ignored silently). The error wraps [ErrInvalidConfig] and names the
// request and the source. A driver with typed configurations (apiVersion
// and kind), or one that validates them at admission too (package
// admission), registers them in a [ConfigScheme] instead.
func DecodeConfig(dev AllocatedDevice, into any) error {
	for i, c := range dev.Config {
		if err := decodeStrict(c.Parameters, into); err != nil {
			src := "claim"
			if c.FromClass {
				src = "class"
			}
			return fmt.Errorf("%w: request %q: %s config #%d: %v", ErrInvalidConfig, dev.Request, src, i, err)
		}
	}
	return nil
}

// ErrDeviceInUse is wrapped by the per-claim error when a claim's device is
// already prepared for another claim and neither allocation allows sharing
// it (admin access, or multiple allocations with distinct share IDs).
var ErrDeviceInUse = errors.New("device already prepared for another claim")

// devicesFromClaim extracts this driver's allocated devices from claim.
func devicesFromClaim(driverName string, claim *resourceapi.ResourceClaim) ([]AllocatedDevice, error) {
	alloc := claim.Status.Allocation
	if alloc == nil {
		return nil, errors.New("claim is not allocated")
	}
	var out []AllocatedDevice
	for i, r := range alloc.Devices.Results {
		if r.Driver != driverName {
			continue
		}
		if r.Pool == "" || r.Device == "" || r.Request == "" {
			return nil, fmt.Errorf("status.allocation.devices.results[%d]: pool, device and request must be set", i)
		}
		d := AllocatedDevice{
			Request:     r.Request,
			Pool:        r.Pool,
			Device:      r.Device,
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess,
		}
		if r.ShareID != nil {
			s := *r.ShareID
			d.ShareID = &s
		}
		if len(r.ConsumedCapacity) > 0 {
			d.ConsumedCapacity = make(map[resourceapi.QualifiedName]resource.Quantity, len(r.ConsumedCapacity))
			for k, v := range r.ConsumedCapacity {
				d.ConsumedCapacity[k] = v.DeepCopy()
			}
		}
		base := d.BaseRequest()
		// Class configs first, then claim configs (allocation order keeps
		// the source order within each).
		for _, fromClass := range []bool{true, false} {
			for _, c := range alloc.Devices.Config {
				if (c.Source == resourceapi.AllocationConfigSourceClass) != fromClass {
					continue
				}
				if c.Opaque == nil || c.Opaque.Driver != driverName {
					continue
				}
				if len(c.Requests) > 0 && !containsRequest(c.Requests, d.Request, base) {
					continue
				}
				d.Config = append(d.Config, OpaqueConfig{FromClass: fromClass, Parameters: json.RawMessage(c.Opaque.Parameters.Raw)})
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func containsRequest(list []string, full, base string) bool {
	for _, r := range list {
		if r == full || r == base {
			return true
		}
	}
	return false
}

// HealthIntervaler is implemented by a [Discoverer] whose health monitor
// reports on every device at a known interval (a poll, a heartbeat).
// [New] refuses a health timeout ([WithHealthTimeout]) that is not above
// it, which would flap every device to Unknown between two reports with
// no error. [device.HealthDiscoverer] implements it for [device.PollHealth].
type HealthIntervaler interface {
	// HealthInterval is the longest time between two reports on a
	// device while the monitor is alive; zero when it is not known.
	HealthInterval() time.Duration
}

// Discoverer is what a vendor implements to tell the runtime which devices
// exist and how healthy they are. Both methods must be safe to call
// concurrently with each other. [device.StaticDiscoverer] and
// [device.HealthDiscoverer] are ready-made ones.
type Discoverer interface {
	// Inventory returns the complete current inventory. The runtime calls
	// it at start, after every [device.EventInventoryChanged] that does
	// not carry the new inventory (again, with a growing delay, while it
	// fails), after a Watch that failed is restarted (a change the old
	// Watch saw may not have been sent) and every resync interval
	// ([WithResyncInterval]). Its Driver must be the driver's name or
	// empty. The runtime does not modify the result; the Discoverer must
	// not modify it afterwards either (return a fresh value or a
	// [device.Inventory.Clone]).
	Inventory(ctx context.Context) (*device.Inventory, error)
	// Watch sends events until ctx is done, then returns nil. It must not
	// block forever on a full channel after ctx is done. A Discoverer
	// without changes and without health returns [device.ErrNoChanges]
	// at once. Any other return ends watching; the runtime logs it and
	// calls Watch again after a growing delay (at most a minute).
	//
	// Health: the runtime keeps each device's last report
	// ([device.EventHealth]) with its time. Once Watch has sent a health
	// event, a device never reported on, or whose last report is older
	// than the health timeout ([WithHealthTimeout]), is Unknown to the
	// kubelet: report on each device within every timeout, also when
	// nothing changed.
	//
	// A report on a device that is not published now (a partition not
	// made yet, or withdrawn) takes effect only when the device is
	// published, until a newer report replaces it: a discoverer whose
	// devices come and go reports on each device again when it publishes
	// it, as [device.DynamicDiscoverer] does.
	Watch(ctx context.Context, events chan<- device.Event) error
}
