package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// plugin implements kubeletplugin.DRAPlugin for a Runtime.
type plugin Runtime

var _ kubeletplugin.DRAPlugin = (*plugin)(nil)

// PrepareResourceClaims prepares each claim (concurrently for a batch).
func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	defer p.metrics.request("prepare")()
	return each(ctx, p, claims, func(c *resourceapi.ResourceClaim) types.UID { return c.UID }, p.engine.prepare)
}

// UnprepareResourceClaims unprepares each claim from the checkpoint.
func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	defer p.metrics.request("unprepare")()
	return each(ctx, p, claims, func(c kubeletplugin.NamespacedObject) types.UID { return c.UID },
		func(ctx context.Context, c kubeletplugin.NamespacedObject) error {
			return p.engine.unprepare(ctx, ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name})
		})
}

// each runs one kubelet call: it waits for its turn (enterCall), reads
// the checkpoint other instances may have changed, and runs op on every
// claim, concurrently for a batch.
func each[C, R any](ctx context.Context, p *plugin, claims []C, uid func(C) types.UID, op func(context.Context, C) R) (map[types.UID]R, error) {
	exit, err := (*Runtime)(p).enterCall()
	if err != nil {
		return nil, err
	}
	defer exit()
	if err := p.engine.syncFromDisk(ctx); err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	out := make(map[types.UID]R, len(claims))
	if len(claims) == 1 {
		out[uid(claims[0])] = op(ctx, claims[0])
		return out, nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			r := op(ctx, c)
			mu.Lock()
			out[uid(c)] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// HandleError logs background errors; a non-recoverable one stops Run.
func (p *plugin) HandleError(ctx context.Context, err error, msg string) {
	logger := klog.FromContext(ctx)
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		// Background errors come from the ResourceSlice controller.
		p.metrics.error("background", ReasonPublish)
		p.metrics.apiReachable.Set(0)
		logger.Error(err, msg)
		return
	}
	logger.Error(err, msg+"; stopping the driver")
	p.mu.Lock()
	if p.fatal == nil {
		p.fatal = fmt.Errorf("%s: %w", msg, err)
	}
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
}

// WatchHealthStatus streams device health to the kubelet.
func (p *plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return p.health.Stream(ctx, reports)
}
