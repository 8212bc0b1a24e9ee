package cluster

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
)

type state struct{}

// Start brings up a cluster and returns when the API server answers, the
// default ServiceAccount exists and (WithNode) the node is Ready. On error
// everything already started is stopped.
func Start(ctx context.Context, opts ...Option) (*Cluster, error) {
	return nil, errors.New("not implemented yet")
}

// Stop stops every process Start launched, by PID, undoes the kubelet's
// host changes and removes a temporary Dir. It is safe to call twice.
func (c *Cluster) Stop() error { return nil }

// AddFakeNode creates a Node with no kubelet: Ready, schedulable, with the
// given labels and allocatable resources (default: 16 CPUs, 64Gi memory,
// 110 pods). The scheduler binds pods to it and allocates claims against
// ResourceSlices whose nodeName is name; nothing runs the pods.
func (c *Cluster) AddFakeNode(ctx context.Context, name string, labels map[string]string, allocatable corev1.ResourceList) error {
	return errors.New("not implemented yet")
}
