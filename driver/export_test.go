package driver

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// This file exposes internals to the external tests of package driver.

const CDIClass = cdiClass

var (
	FaultPoints      = faultPoints
	DevicesFromClaim = devicesFromClaim
)

// SetFaultHook sets the hook that fault points call.
func SetFaultHook(f func(point string)) { faultHook = f }

// TestEngine is the prepare engine without gRPC.
type TestEngine struct{ e *engine }

func NewTestEngine(driverName string, store *checkpoint.Store, specs *cdi.Writer, p Preparer) *TestEngine {
	return &TestEngine{e: newEngine(driverName, store, specs, p, newMetrics(driverName))}
}

func (t *TestEngine) Recover(ctx context.Context) error { return t.e.recover(ctx) }
func (t *TestEngine) Prepare(ctx context.Context, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	return t.e.prepare(ctx, c)
}
func (t *TestEngine) Unprepare(ctx context.Context, ref ClaimRef) error {
	return t.e.unprepare(ctx, ref)
}
func (t *TestEngine) Store() *checkpoint.Store { return t.e.store }
func (t *TestEngine) Specs() *cdi.Writer       { return t.e.specs }

// ErrorCount reads drakit_driver_errors_total{operation,reason}.
func (t *TestEngine) ErrorCount(op, reason string) float64 {
	return ErrorCount(t.e.metrics.registry, op, reason)
}

// SetClaimGetter sets how the engine reads a claim from the API server.
func (t *TestEngine) SetClaimGetter(f func(context.Context, ClaimRef) (*resourceapi.ResourceClaim, error)) {
	t.e.getClaim = f
}

// OnUnreleased sets what the engine calls for a claim whose devices it
// cannot release.
func (t *TestEngine) OnUnreleased(f func(context.Context, ClaimRef)) { t.e.onUnreleased = f }

// Collect runs one round of the engine's housekeeping.
func (t *TestEngine) Collect(ctx context.Context) { t.e.collect(ctx) }

// SetPublished sets what the engine takes for the published devices.
func (t *TestEngine) SetPublished(f func(pool, device string) bool) {
	t.e.published = func(_ context.Context, pool, dev string) bool { return f(pool, dev) }
}

// Records reads every record the engine holds, each device field
// included, under the engine's lock only (as a metrics scrape or a debug
// handler would).
func (t *TestEngine) Records() []checkpoint.Record {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	var out []checkpoint.Record
	for _, r := range t.e.records {
		c := *r
		c.Devices = nil
		for _, d := range r.Devices {
			d.CDIDeviceIDs = append([]string(nil), d.CDIDeviceIDs...)
			d.Data = append([]byte(nil), d.Data...)
			c.Devices = append(c.Devices, d)
		}
		out = append(out, c)
	}
	return out
}

// NodeWarning records a warning event on the driver's node, as the
// runtime does for a corrupt checkpoint record.
func (d *Runtime) NodeWarning(reason, message string) { d.nodeWarning(reason, message) }

// RuntimeHelperOptionNames are the kubeletplugin functions whose options
// the runtime states after the vendor's.
func RuntimeHelperOptionNames(d *Runtime) []string {
	var names []string
	for _, n := range d.runtimeHelperOptions(nil) {
		names = append(names, n.name)
	}
	return names
}

// SetBootID sets the boot ID the engine compares with the checkpoint's
// at its next Recover.
func (t *TestEngine) SetBootID(id string) { t.e.bootID = id }

// OnUnusedConfig sets what the engine calls for a claim with opaque
// configuration no allocating driver applies.
func (t *TestEngine) OnUnusedConfig(f func(context.Context, *resourceapi.ResourceClaim, []string)) {
	t.e.onUnusedConfig = f
}

// CountsAsPublished says whether a prepare of the device passes the
// published check now, without reading the API server.
func (d *Runtime) CountsAsPublished(pool, dev string) bool {
	return d.published != nil && d.published.Has(pool, dev)
}
