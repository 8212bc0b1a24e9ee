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
	exit, err := (*Runtime)(p).enterCall()
	if err != nil {
		return nil, err
	}
	defer exit()
	e := p.engine
	if err := e.syncFromDisk(ctx); err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	if len(claims) == 1 {
		out[claims[0].UID] = e.prepare(ctx, claims[0])
		return out, nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			r := e.prepare(ctx, c)
			mu.Lock()
			out[c.UID] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// UnprepareResourceClaims unprepares each claim from the checkpoint.
func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	exit, err := (*Runtime)(p).enterCall()
	if err != nil {
		return nil, err
	}
	defer exit()
	e := p.engine
	if err := e.syncFromDisk(ctx); err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	out := make(map[types.UID]error, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			err := e.unprepare(ctx, ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name})
			mu.Lock()
			out[c.UID] = err
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
