package defrag

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// restartable says why an eviction of pod would not simply have its
// controller start it again, "" when it would. Restartable are the pods
// of the workload kinds that recreate an evicted pod without counting a
// failure: a ReplicaSet's (a Deployment's), a ReplicationController's, a
// StatefulSet's, and a Job's whose pod failure policy ignores
// disruptions (a rule with action Ignore on the DisruptionTarget
// condition, which an eviction sets); any other Job counts the eviction
// against its backoffLimit (with backoffLimit 0 the Job fails whole). A
// DaemonSet's pod comes back on its own node only, and other controllers
// (gang schedulers that restart a whole group, operators of training
// jobs) are not known to recreate one pod and go on: neither is moved.
func restartable(pod *corev1.Pod, jobs map[types.UID]*batchv1.Job) string {
	name := pod.Namespace + "/" + pod.Name
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return "pod " + name + " has no controller to start it again"
	}
	switch owner.APIVersion + "/" + owner.Kind {
	case "apps/v1/ReplicaSet", "apps/v1/StatefulSet", "v1/ReplicationController":
		return ""
	case "batch/v1/Job":
		job := jobs[owner.UID]
		if job == nil {
			return "pod " + name + "'s Job " + owner.Name + " is not found"
		}
		if ignoresDisruptions(job) {
			return ""
		}
		limit := int32(6)
		if job.Spec.BackoffLimit != nil {
			limit = *job.Spec.BackoffLimit
		}
		return fmt.Sprintf(
			"pod %s's Job %s would count the eviction as a failure (backoffLimit %d; a "+
				"podFailurePolicy rule with action Ignore on the DisruptionTarget condition "+
				"makes it restartable)",
			name,
			job.Name,
			limit,
		)
	}
	return fmt.Sprintf(
		"pod %s's controller is a %s %s, which is not known to start an evicted pod again "+
			"without counting a failure",
		name,
		owner.APIVersion,
		owner.Kind,
	)
}

// ignoresDisruptions reports whether job's pod failure policy ignores a
// pod failure caused by a disruption (an eviction).
func ignoresDisruptions(job *batchv1.Job) bool {
	if job.Spec.PodFailurePolicy == nil {
		return false
	}
	for _, r := range job.Spec.PodFailurePolicy.Rules {
		if r.Action != batchv1.PodFailurePolicyActionIgnore {
			continue
		}
		for _, c := range r.OnPodConditions {
			if c.Type == corev1.DisruptionTarget &&
				(c.Status == "" || c.Status == corev1.ConditionTrue) {
				return true
			}
		}
	}
	return false
}

// readJobs reads the Jobs that control opted-in pods (only those may
// move), by UID.
func (c *Controller) readJobs(
	ctx context.Context,
	pods map[types.UID]*corev1.Pod,
) (map[types.UID]*batchv1.Job, error) {
	out := map[types.UID]*batchv1.Job{}
	for _, p := range pods {
		owner := metav1.GetControllerOf(p)
		if p.Annotations[c.n.optIn] != AllowValue || owner == nil ||
			owner.APIVersion != "batch/v1" ||
			owner.Kind != "Job" ||
			out[owner.UID] != nil {
			continue
		}
		job, err := c.client.BatchV1().Jobs(p.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read Job %s/%s: %w", p.Namespace, owner.Name, err)
		}
		if job.UID == owner.UID {
			out[owner.UID] = job
		}
	}
	return out, nil
}
