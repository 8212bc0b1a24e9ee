package driver

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
)

// nodeLocal rejects pools that are not the node's own: the kubelet plugin
// helper publishes every slice with the node's name, which the API server
// refuses next to a NodeSelector or AllNodes.
func nodeLocal(inv *device.Inventory) error {
	for _, p := range inv.Pools {
		if p.NodeSelector != nil || p.AllNodes {
			return fmt.Errorf("publish devices: pool %q has a NodeSelector or AllNodes (network-attached devices): a node's driver publishes its own node's devices only; publish such pools from a controller, with resourceslice.StartController and Inventory.DriverResources", p.Name)
		}
	}
	return nil
}

// kickPublish asks the publish loop to publish the current inventory.
func (d *Runtime) kickPublish() {
	select {
	case d.publishKick <- struct{}{}:
	default: // a publish is pending; it will read the latest inventory
	}
}

// publishLoop publishes the current inventory, with health taints, each
// time it is kicked, until ctx is done. The first publish waits for the
// API server (the helper's slice controller syncs its informer first);
// the kubelet is served meanwhile, and readiness says so.
func (d *Runtime) publishLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.publishKick:
		}
		start := time.Now()
		first := !d.slicesSynced.Load()
		var waiting *time.Timer
		if first {
			// Replace the slices only once what they list is recorded:
			// the scheduler may have allocated from them.
			d.awaitObserved(ctx)
			waiting = time.AfterFunc(5*time.Second, func() {
				logger.Info("Waiting for the API server to publish ResourceSlices; the kubelet is served meanwhile")
			})
		}
		err := d.publish(ctx, d.published.Inventory())
		if waiting != nil {
			waiting.Stop()
		}
		if err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Publishing devices failed")
			}
			continue
		}
		d.metrics.apiReachable.Set(1)
		if first {
			d.slicesSynced.Store(true)
			logger.Info("Publishing ResourceSlices", "waitedForAPIServer", time.Since(start).Round(time.Millisecond))
		}
	}
}

// publish hands inv, with health taints, to the slice controller while
// this process is the node's publisher (publisher.go); a follower hands
// the change over to the publisher. inv has passed nodeLocal.
func (d *Runtime) publish(ctx context.Context, inv *device.Inventory) error {
	tainted, err := d.health.Taint(inv)
	if err != nil {
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	}
	res, err := tainted.DriverResources()
	if err != nil {
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	}
	// One publisher per node (publisher.go): a follower hands its
	// change to the publisher instead.
	switch publishing, err := d.slices.role(ctx); {
	case err != nil:
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	case !publishing:
		if err := d.slices.handOver(); err != nil {
			return fmt.Errorf("publish devices: hand the change to the publisher: %w", err)
		}
		return nil
	}
	if err := d.slices.write(ctx, res); err != nil {
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	}
	n := 0
	for _, p := range inv.Pools {
		n += len(p.Devices)
	}
	d.metrics.publishedDevices.Set(float64(n))
	klog.FromContext(ctx).V(3).Info("Published devices", "devices", n)
	return nil
}

// setInventory makes inv the inventory the slices and the health streams
// are built from: the publication set keeps it, the health streams read
// it from there.
func (d *Runtime) setInventory(inv *device.Inventory) {
	d.published.Store(inv)
	d.health.InventoryChanged()
}

// awaitObserved waits, at most observeWait, until the watch of the node's
// slices (observeSlices) has listed them, so that the devices of the
// slices the first publish replaces (the previous process's) count as
// published for publication.WithdrawnGrace.
func (d *Runtime) awaitObserved(ctx context.Context) {
	if d.observed.HasSynced() {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, observeWait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), d.observed.HasSynced) && ctx.Err() == nil {
		klog.FromContext(ctx).Info("The node's ResourceSlices were not listed in time; publishing without them: a claim allocated from them may be refused until it is listed", "waited", observeWait)
	}
}
