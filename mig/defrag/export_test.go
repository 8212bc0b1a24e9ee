package defrag

import (
	"context"
	"time"
)

// WithHook calls hook at each step point of an operation ("tainted-<n>"
// after its n-th taint rule, "tainted" after the last, "evicted-<n>"
// after its n-th eviction, "allocated" after the waiting claim's
// allocation); when it returns true the Step ends there and returns
// ErrCrashed, leaving everything as a kill of the process would.
func WithHook(hook func(point string) bool) Option {
	return func(o *options) error { o.crash = hook; return nil }
}

// WithNow sets the controller's clock.
func WithNow(now func() time.Time) Option {
	return func(o *options) error { o.now = now; return nil }
}

// ErrCrashed is what a Step ended by WithHook returns.
var ErrCrashed = errCrashed

// BudgetRefuses is budgetRefuses after the guards' memory is read from
// the cluster.
func BudgetRefuses(ctx context.Context, c *Controller, node string, n int) (string, error) {
	if err := c.seed(ctx); err != nil {
		return "", err
	}
	return c.budgetRefuses(node, n), nil
}
