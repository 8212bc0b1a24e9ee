// Package defraghooks lets the tests of a vendor's layer over package
// partition/defrag in this module (package mig/defrag) reach into the
// controller: crash points, its clock, and single decisions checked on
// their own. partition/defrag sets the variables when it is initialised;
// nothing else may set them, and no program calls them.
package defraghooks

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var (
	// WithCrash returns a defrag.Option that calls hook at each step
	// point of an operation ("tainted-<n>" after its n-th taint rule,
	// "tainted" after the last, "evicted-<n>" after its n-th eviction,
	// "allocated" after the waiting claim's allocation); when hook
	// returns true the Step ends there and returns ErrCrashed, leaving
	// everything as a kill of the process would.
	WithCrash func(hook func(point string) bool) any
	// WithNow returns a defrag.Option that sets the controller's clock.
	WithNow func(now func() time.Time) any
	// ErrCrashed is what a Step ended by WithCrash's hook returns.
	ErrCrashed error
	// BudgetRefuses says why the eviction budget refuses n evictions on
	// node to controller c (a *defrag.Controller) after its memory is
	// read from the cluster, "" when it allows them.
	BudgetRefuses func(ctx context.Context, c any, node string, n int) (string, error)
	// FitsOn is the landing check's verdict on pod's replacement at node,
	// with the cluster as a Step of c (a *defrag.Controller) reads it and
	// nothing evicted: "" when the scheduler's filters would pass it.
	FitsOn func(ctx context.Context, c any, pod *corev1.Pod, node string) (string, error)
)
