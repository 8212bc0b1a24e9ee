// Package clustertest starts a local cluster for a test and stops it when
// the test ends, also when it fails or panics.
package clustertest

import (
	"context"
	"testing"

	"github.com/drakit/drakit/internal/cluster"
)

// Start starts a cluster for t. If the binaries are missing the test fails
// with a message that says to run hack/setup.sh. With -short the test is
// skipped.
func Start(t testing.TB, opts ...cluster.Option) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real cluster; skipped with -short")
	}
	c, err := cluster.Start(context.Background(), append([]cluster.Option{cluster.WithDieWithParent()}, opts...)...)
	if err != nil {
		t.Fatalf("start local cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop local cluster: %v", err)
		}
	})
	return c
}
