package defrag

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drakit/drakit/internal/defraghooks"
)

// WithHook is defraghooks.WithCrash.
func WithHook(hook func(point string) bool) Option {
	return defraghooks.WithCrash(hook).(Option)
}

// WithNow sets the controller's clock.
func WithNow(now func() time.Time) Option { return defraghooks.WithNow(now).(Option) }

// ErrCrashed is what a Step ended by WithHook returns.
var ErrCrashed = defraghooks.ErrCrashed

// BudgetRefuses is the controller's budget check after the guards'
// memory is read from the cluster.
func BudgetRefuses(ctx context.Context, c *Controller, node string, n int) (string, error) {
	return defraghooks.BudgetRefuses(ctx, c, node, n)
}

// FitsOn is the landing check's verdict on pod's replacement at node.
func FitsOn(ctx context.Context, c *Controller, pod *corev1.Pod, node string) (string, error) {
	return defraghooks.FitsOn(ctx, c, pod, node)
}
