package defrag

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// FitsOn is the landing check's verdict (landing.fits) on pod's
// replacement at node, with the cluster as a Step reads it and nothing
// evicted: "" when the scheduler's filters would pass it there.
func FitsOn(ctx context.Context, c *Controller, pod *corev1.Pod, node string) (string, error) {
	cl, err := c.readCluster(ctx)
	if err != nil {
		return "", err
	}
	n := nodeOf(cl, node)
	if err := nodeAdmits(pod, n); err != nil {
		return err.Error(), nil
	}
	return c.newLanding(cl, &plan{}).fits(ctx, replacementOf(pod, node), n), nil
}
