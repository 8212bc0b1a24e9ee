package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
)

// DefaultResyncInterval is how often the runtime asks the discoverer for
// its inventory again without a change event, unless [WithResyncInterval]
// says otherwise: a change the discoverer missed reaches the slices within
// this interval.
const DefaultResyncInterval = 10 * time.Minute

// Retry delays of re-discovery and of the discoverer's watch: the first
// retry waits retryInitial, each next one twice as long, at most retryMax.
const (
	retryInitial = time.Second
	retryMax     = time.Minute
)

// backoff is a doubling delay with a cap.
type backoff struct{ next time.Duration }

// delay returns the delay before the next try and doubles the one after.
func (b *backoff) delay() time.Duration {
	if b.next == 0 {
		b.next = retryInitial
	}
	d := b.next
	b.next = min(2*b.next, retryMax)
	return d
}

func (b *backoff) reset() { b.next = 0 }

// accept checks an inventory from the discoverer and returns it with the
// driver's name filled in: it must be for this driver (Inventory.Driver
// is the driver's name or empty) and have node-local pools only.
func (d *Runtime) accept(inv *device.Inventory) (*device.Inventory, error) {
	if inv == nil {
		return nil, errors.New("discoverer returned no inventory")
	}
	switch inv.Driver {
	case d.name:
	case "":
		named := *inv // the discoverer's value is not modified
		named.Driver = d.name
		inv = &named
	default:
		return nil, fmt.Errorf("%w: the inventory is for driver %q, this driver is %q; its attributes without a domain would be published under the wrong name (set Inventory.Driver to %q or leave it empty)", ErrDriverMismatch, inv.Driver, d.name, d.name)
	}
	if err := nodeLocal(inv); err != nil {
		return nil, err
	}
	return inv, nil
}

// ErrDriverMismatch is wrapped by the error of [Runtime.Run] (and logged
// for a changed inventory) when the discoverer's inventory names another
// driver than the one given to [New].
var ErrDriverMismatch = errors.New("inventory of another driver")

// discover asks the discoverer for its inventory and, when it is
// accepted, makes it the current one and publishes it.
func (d *Runtime) discover(ctx context.Context) error {
	inv, err := d.o.discoverer.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("discover devices: %w", err)
	}
	if inv, err = d.accept(inv); err != nil {
		return fmt.Errorf("discover devices: %w", err)
	}
	d.setInventory(inv)
	d.kickPublish()
	return nil
}

// watch follows the discoverer's events and keeps the published inventory
// in line with the discoverer's until ctx is done. A change event makes
// the inventory dirty: it is discovered again at once and, while that
// fails, again with a growing delay (at most retryMax); every resync
// interval it is discovered again anyway. A watch that ends with an error
// is restarted with a growing delay.
func (d *Runtime) watch(ctx context.Context) {
	logger := klog.FromContext(ctx)
	events := make(chan device.Event, 16)
	watchDone := make(chan error, 1)
	var watchStarted time.Time
	startWatch := func() {
		watchStarted = time.Now()
		go func() { watchDone <- d.o.discoverer.Watch(ctx, events) }()
	}
	startWatch()

	resync := time.NewTicker(d.o.resyncInterval)
	defer resync.Stop()
	var (
		dirty                   bool
		discoverRetry, rewatch  <-chan time.Time
		discoverWait, watchWait backoff
	)
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-watchDone:
			if ctx.Err() != nil {
				continue
			}
			if errors.Is(err, device.ErrNoChanges) {
				d.health.NoHealth()
				continue
			}
			if time.Since(watchStarted) >= retryMax {
				watchWait.reset() // it ran well for a while
			}
			delay := watchWait.delay()
			if err == nil {
				err = errors.New("Watch returned before its context was done")
			}
			d.metrics.error("watch", ReasonDiscovery)
			logger.Error(err, "Device watch ended; restarting", "in", delay)
			rewatch = time.After(delay)
		case <-rewatch:
			rewatch = nil
			startWatch()
			// The Watch that failed may have seen a change it never
			// sent: discover again rather than wait for the resync.
			dirty = true
		case ev := <-events:
			switch ev.Type {
			case device.EventInventoryChanged:
				if ev.Inventory == nil {
					dirty = true
					break
				}
				inv, err := d.accept(ev.Inventory)
				if err != nil {
					d.metrics.error("discover", ReasonDiscovery)
					logger.Error(err, "Inventory of a change event refused; discovering again")
					dirty = true
					break
				}
				d.setInventory(inv)
				d.kickPublish()
				dirty = false // this inventory is as new as a discovery
			case device.EventHealth:
				if d.health.Update(ev.Health, time.Now()) {
					d.metrics.unhealthyDevices.Set(float64(d.health.UnhealthyCount()))
					d.kickPublish()
				}
			}
		case <-resync.C:
			dirty = true
		case <-d.rediscoverKick:
			dirty = true
		case <-discoverRetry:
			discoverRetry = nil
		}
		if !dirty || discoverRetry != nil {
			continue
		}
		if err := d.discover(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			delay := discoverWait.delay()
			d.metrics.error("discover", ReasonDiscovery)
			logger.Error(err, "Re-discovering devices failed; keeping the published slices and retrying", "in", delay)
			discoverRetry = time.After(delay)
			continue
		}
		dirty = false
		discoverWait.reset()
	}
}

// rediscover asks the watch loop to discover the inventory again.
func (d *Runtime) rediscover() {
	select {
	case d.rediscoverKick <- struct{}{}:
	default:
	}
}
