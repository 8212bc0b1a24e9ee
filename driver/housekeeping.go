package driver

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"
)

// housekeep collects orphaned CDI specs and leftover temporary files
// every housekeeping interval until ctx is done. Failures are logged and
// counted, and tried again on the next round.
func (d *Runtime) housekeep(ctx context.Context) {
	t := time.NewTicker(d.o.housekeepingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := d.withCrossInstanceLock(func() error {
			if err := d.engine.syncFromDisk(ctx); err != nil {
				return fmt.Errorf("read checkpoint: %w", err)
			}
			d.engine.collect(ctx)
			return nil
		})
		if err != nil {
			d.metrics.error("housekeeping", ReasonCheckpoint)
			klog.FromContext(ctx).Error(err, "Housekeeping failed; will retry", "in", d.o.housekeepingInterval)
		}
	}
}
