package podstatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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
