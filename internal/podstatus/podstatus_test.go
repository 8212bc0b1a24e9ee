package podstatus

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestWhy(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Message: "0/1 nodes are available"},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, Message: "ignored"},
		},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CreateContainerError", Message: "cdi"}}},
			{Name: "b", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Error", ExitCode: 2}}},
		},
	}}
	want := "PodScheduled: 0/1 nodes are available; container a waiting: " +
		"CreateContainerError cdi; container b terminated: Error  (exit 2)"
	if got := Why(p); got != want {
		t.Errorf("Why = %q, want %q", got, want)
	}
	if got := Why(&corev1.Pod{}); got != "no condition says why" {
		t.Errorf("Why of a pod with no status = %q", got)
	}
}

// TestClaimNames: a claim named in the spec is named as it is, one made
// from a template once the pod's status records it, and one whose claim
// is not made yet is left out.
func TestClaimNames(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "direct", ResourceClaimName: ptr.To("shared-claim")},
		{Name: "made", ResourceClaimTemplateName: ptr.To("tmpl")},
		{Name: "not-yet", ResourceClaimTemplateName: ptr.To("tmpl")},
	}}, Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{
		{Name: "made", ResourceClaimName: ptr.To("pod-made-x7k2p")},
	}}}
	got := ClaimNames(p)
	if want := []string{"shared-claim", "pod-made-x7k2p"}; !slices.Equal(got, want) {
		t.Errorf("ClaimNames = %v, want %v", got, want)
	}
}
