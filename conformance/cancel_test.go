package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/internal/cluster"
)

// testClusterRunCanceled: RunCluster canceled in the middle of its run
// (here while it waits for a driver that never publishes) still deletes
// what it created before it returns: its DeviceClass is gone and its
// namespace is gone or being deleted. Run by TestDrivers on its control
// plane: cluster mode's setup needs no kubelet.
func testClusterRunCanceled(t *testing.T, c *cluster.Cluster) {
	const driverName = "canceled.drakit.dev"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sel := labels.SelectorFromSet(labels.Set{
		conformance.ClusterLabel: nodeName, conformance.ClusterDriverLabel: driverName,
	}).String()
	done := make(chan error, 1)
	go func() {
		_, err := conformance.RunCluster(ctx, conformance.ClusterConfig{
			DriverName: driverName, NodeName: nodeName, Client: c.Client,
			Image: "busybox", PodTimeout: 30 * time.Second, PublishTimeout: 2 * time.Minute,
		})
		done <- err
	}()
	// Cancel once the run has made its DeviceClass (its namespace comes
	// first).
	for {
		l, err := c.Client.ResourceV1().DeviceClasses().List(t.Context(),
			metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("RunCluster returned before it was canceled: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	nss, err := c.Client.CoreV1().Namespaces().List(t.Context(),
		metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(nss.Items) == 0 {
		t.Fatalf("the run's namespace: %v, %v", nss, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RunCluster canceled: %v, want an error wrapping context.Canceled", err)
	}
	classes, err := c.Client.ResourceV1().DeviceClasses().List(t.Context(),
		metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range classes.Items {
		t.Errorf("DeviceClass %s left after a canceled run", cl.Name)
	}
	for _, ns := range nss.Items {
		got, err := c.Client.CoreV1().Namespaces().Get(t.Context(), ns.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Fatal(err)
		case got.DeletionTimestamp == nil:
			t.Errorf("namespace %s left after a canceled run", ns.Name)
		}
	}
}
