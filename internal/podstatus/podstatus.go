// Package podstatus reads a pod: why it does not run, in one line, for
// error messages of the conformance suite and the demos, and the names of
// the claims it uses, for the fleet planner and the defragmenter.
package podstatus

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// ClaimNames returns the names of the ResourceClaims p uses, in the order
// of its spec: a claim made from a template only once the ResourceClaim
// controller has made it and recorded it in p's status.
func ClaimNames(p *corev1.Pod) []string {
	var out []string
	for i := range p.Spec.ResourceClaims {
		// An error: a claim from a template not made yet.
		name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
		if err == nil && name != nil {
			out = append(out, *name)
		}
	}
	return out
}

// Why summarizes why p does not run: its conditions that are not true
// (the scheduler's reason among them) and its containers that wait or
// ended, with their reasons; "no condition says why" when none does.
func Why(p *corev1.Pod) string {
	var out []string
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			out = append(out, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			out = append(out, fmt.Sprintf("container %s waiting: %s %s", s.Name, w.Reason,
				w.Message))
		}
		if t := s.State.Terminated; t != nil {
			out = append(out, fmt.Sprintf("container %s terminated: %s %s (exit %d)", s.Name,
				t.Reason, t.Message, t.ExitCode))
		}
	}
	if len(out) == 0 {
		return "no condition says why"
	}
	return strings.Join(out, "; ")
}
