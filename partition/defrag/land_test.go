package defrag

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeAdmits checks the node selection an evicted pod's replacement
// must pass at its destination node.
func TestNodeAdmits(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"kubernetes.io/hostname": "b", "zone": "z1"}}}
	cordoned := node.DeepCopy()
	cordoned.Spec.Unschedulable = true
	tainted := node.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "reserved", Effect: corev1.TaintEffectNoSchedule}}
	preferOnly := node.DeepCopy()
	preferOnly.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectPreferNoSchedule}}
	affinity := func(op corev1.NodeSelectorOperator, values ...string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: op, Values: values}}}},
		}}}
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		node *corev1.Node
		want string // in the error; "" for none
	}{
		{name: "no selection", node: node},
		{name: "selector matches", spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "z1"}}, node: node},
		{name: "selector excludes", spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "a"}}, node: node, want: "node selector or required node affinity excludes node b"},
		{name: "affinity matches", spec: corev1.PodSpec{Affinity: affinity(corev1.NodeSelectorOpIn, "z1", "z2")}, node: node},
		{name: "affinity excludes", spec: corev1.PodSpec{Affinity: affinity(corev1.NodeSelectorOpNotIn, "z1")}, node: node, want: "excludes node b"},
		{name: "cordoned", node: cordoned, want: "node b is cordoned"},
		{name: "untolerated taint", node: tainted, want: "does not tolerate node b's taint gpu=reserved:NoSchedule"},
		{name: "tolerated taint", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}, node: tainted},
		{name: "PreferNoSchedule", node: preferOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := nodeAdmits(&corev1.Pod{Spec: tc.spec}, tc.node)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("nodeAdmits: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("nodeAdmits: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
