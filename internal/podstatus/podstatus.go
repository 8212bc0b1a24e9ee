// Package podstatus says in one line why a pod does not run, for error
// messages of the conformance suite and the demos.
package podstatus

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

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
