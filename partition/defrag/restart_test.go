package defrag

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Restartable are the pods whose controller recreates an evicted pod
// without counting a failure: a ReplicaSet's, a StatefulSet's, a
// ReplicationController's, and a Job's only when its pod failure policy
// ignores disruptions; a Job with backoffLimit 0 would fail whole, and a
// DaemonSet's pod or a custom controller's are not moved.
func TestRestartable(t *testing.T) {
	owned := func(apiVersion, kind string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns",
				Name:      "p",
				OwnerReferences: []metav1.OwnerReference{
					{
						APIVersion: apiVersion,
						Kind:       kind,
						Name:       "owner",
						UID:        "owner-uid",
						Controller: ptr.To(true),
					}},
			},
		}
	}
	jobs := func(backoff int32, rules ...batchv1.PodFailurePolicyRule) map[types.UID]*batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "owner-uid"},
			Spec:       batchv1.JobSpec{BackoffLimit: ptr.To(backoff)},
		}
		if rules != nil {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: rules}
		}
		return map[types.UID]*batchv1.Job{"owner-uid": j}
	}
	job := owned("batch/v1", "Job")
	ignoreDisruptions := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
		}}
	failOnDisruption := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget},
		}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		jobs map[types.UID]*batchv1.Job
		want string // in the refusal; "" restartable
	}{
		{name: "ReplicaSet", pod: owned("apps/v1", "ReplicaSet")},
		{name: "StatefulSet", pod: owned("apps/v1", "StatefulSet")},
		{name: "ReplicationController", pod: owned("v1", "ReplicationController")},
		{name: "Job ignoring disruptions", pod: job, jobs: jobs(0, ignoreDisruptions)},
		{name: "Job with backoffLimit 0", pod: job, jobs: jobs(0),
			want: "would count the eviction as a failure (backoffLimit 0"},
		{name: "Job failing on disruptions", pod: job, jobs: jobs(6, failOnDisruption),
			want: "backoffLimit 6"},
		{name: "Job not found", pod: job, want: "Job owner is not found"},
		{name: "DaemonSet", pod: owned("apps/v1", "DaemonSet"),
			want: "controller is a apps/v1 DaemonSet"},
		{name: "a gang controller", pod: owned("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
			want: "LeaderWorkerSet, which is not known to start an evicted pod again"},
		{name: "bare pod", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}},
			want: "has no controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := restartable(tc.pod, tc.jobs)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("restartable = %q, want %q", got, tc.want)
			}
		})
	}
}

// A Job's pod with backoffLimit 0 is not moved: its instance is not
// restartable for the planner (mayMove), whatever else allows it.
func TestJobWithBackoffLimitZeroIsNotMoved(t *testing.T) {
	c := &Controller{n: names{optIn: "example.com/defrag"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "pod-uid",
		Annotations: map[string]string{"example.com/defrag": AllowValue},
		OwnerReferences: []metav1.OwnerReference{
			{
				APIVersion: "batch/v1",
				Kind:       "Job",
				Name:       "train",
				UID:        "job-uid",
				Controller: ptr.To(true),
			},
		}}}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-gpu",
			OwnerReferences: []metav1.OwnerReference{
				{
					APIVersion: "v1",
					Kind:       "Pod",
					Name:       "train",
					UID:        "pod-uid",
					Controller: ptr.To(true),
				},
			}},
	}
	h := &holder{claim: claim, pods: []*corev1.Pod{pod}}
	for backoff, want := range map[int32]string{0: "backoffLimit 0", 6: "backoffLimit 6"} {
		cl := &cluster{
			jobs: map[types.UID]*batchv1.Job{
				"job-uid": {
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "job-uid"},
					Spec:       batchv1.JobSpec{BackoffLimit: ptr.To(backoff)},
				},
			},
		}
		if got := c.mayMove(cl, h, map[types.UID]int{"pod-uid": 1}); !strings.Contains(got, want) {
			t.Errorf("backoffLimit %d: mayMove = %q, want a refusal naming %q", backoff, got, want)
		}
	}
}
