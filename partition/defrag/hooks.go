package defrag

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drakit/drakit/internal/defraghooks"
)

// init lets the tests of mig/defrag reach into the controller (see
// package internal/defraghooks).
func init() {
	defraghooks.WithCrash = func(hook func(point string) bool) any {
		return Option(func(o *options) error { o.crash = hook; return nil })
	}
	defraghooks.WithNow = func(now func() time.Time) any {
		return Option(func(o *options) error { o.now = now; return nil })
	}
	defraghooks.ErrCrashed = errCrashed
	defraghooks.BudgetRefuses = func(
		ctx context.Context, c any, node string, n int,
	) (string, error) {
		ctl := c.(*Controller)
		if err := ctl.seed(ctx); err != nil {
			return "", err
		}
		return ctl.budgetRefuses(node, n), nil
	}
	defraghooks.FitsOn = func(
		ctx context.Context, c any, pod *corev1.Pod, node string,
	) (string, error) {
		ctl := c.(*Controller)
		cl, err := ctl.readCluster(ctx)
		if err != nil {
			return "", err
		}
		n := nodeOf(cl, node)
		if err := nodeAdmits(pod, n); err != nil {
			return err.Error(), nil
		}
		return ctl.newLanding(cl, &plan{}).fits(ctx, replacementOf(pod, node), n), nil
	}
}
