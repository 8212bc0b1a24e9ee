package driver

import (
	"context"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/internal/slicepool"
)

// Published is closed once the driver's devices are in the API server as
// the scheduler needs them: every pool of the current inventory is
// complete (all its ResourceSlices of the newest generation present) and
// lists exactly the inventory's devices. It is closed after
// [Runtime.Ready]; a pod created before may stay Unschedulable until the
// scheduler retries it, so a test waits for it before creating pods
// (testenv.Env.WaitForPools does the same from outside the process).
// /readyz ([WithHTTPAddress]) reports ready only after it. Waiting for it
// sends no API request; an inventory that changes faster than its slices
// are written delays it.
func (d *Runtime) Published() <-chan struct{} { return d.firstPublish }

// awaitFirstPublish closes firstPublish once the API server holds the
// current inventory complete (see Published), or returns when ctx ends.
func (d *Runtime) awaitFirstPublish(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !d.slicesSynced.Load() || !d.observed.HasSynced() {
			continue // the first publish still waits for the API server
		}
		var got []*resourceapi.ResourceSlice
		for _, o := range d.observed.GetStore().List() {
			if s, ok := o.(*resourceapi.ResourceSlice); ok {
				got = append(got, s)
			}
		}
		if d.inventoryPublished(slicepool.Group(got)) {
			logger.Info("ResourceSlices published: every pool complete")
			close(d.firstPublish)
			return
		}
	}
}

// inventoryPublished reports whether pools hold every pool of the
// current inventory, complete, with exactly its devices.
func (d *Runtime) inventoryPublished(pools map[string]*slicepool.Pool) bool {
	inv := d.published.Inventory()
	if inv == nil {
		return false
	}
	for _, p := range inv.Pools {
		got, ok := pools[p.Name]
		if !ok || !got.Complete() {
			return false
		}
		want := make([]string, 0, len(p.Devices))
		for _, dev := range p.Devices {
			want = append(want, dev.Name())
		}
		have := got.Devices()
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(want, have) {
			return false
		}
	}
	return true
}
