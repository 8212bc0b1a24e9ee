package topology

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// NodeClient is the part of a Node client that LabelNode uses;
// kubernetes.Interface's CoreV1().Nodes() satisfies it.
type NodeClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	Update(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error)
}

// LabelNode reads the node, plans its labels (see Plan) and writes the
// result with an Update, retried on write conflicts with a fresh read and
// a fresh plan. With dryRun the API server validates the update
// (dryRun=All) but stores nothing. A node whose plan is empty is not
// written. It returns the plan that was applied.
func (l *Labeler) LabelNode(ctx context.Context, nodes NodeClient, name string, dryRun bool) (Plan, error) {
	logger := klog.FromContext(ctx)
	var plan Plan
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		plan = l.Plan(node)
		if plan.Empty() {
			return nil
		}
		node = node.DeepCopy()
		plan.ApplyTo(node)
		opts := metav1.UpdateOptions{FieldManager: "drakit-topology"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = nodes.Update(ctx, node, opts)
		return err
	})
	if err != nil {
		return Plan{}, fmt.Errorf("label node %s: %w", name, err)
	}
	logger.V(2).Info("Planned node topology labels", "node", name, "changes", len(plan.Changes), "conflicts", len(plan.Conflicts), "dryRun", dryRun)
	return plan, nil
}
