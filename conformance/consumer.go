package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// consumerImage is the image of the consumer pod's container. It never
// resolves (.invalid is reserved by RFC 2606), so that a kubelet on the
// node, if there is one, never starts the pod; a pod that waits for its
// image is not done, and the resource claim controller keeps the
// reservations for it.
const consumerImage = "conformance.drakit.invalid/never-started:0"

// managedBy labels everything the suite creates in the API server.
var managedBy = map[string]string{"app.kubernetes.io/managed-by": "drakit-conformance"}

// createConsumer creates the pod that the suite's claims are reserved for:
// bound to the node under test (spec.nodeName, so no scheduler is
// involved), tolerating every taint, naming no claim in its spec (so a
// kubelet on the node does not prepare the suite's claims itself), with
// an image that never resolves. The kubelet prepares only claims reserved
// for a pod (pkg/kubelet/cm/dra/manager.go: IsReservedForPod), and
// drivers may look that pod up, so the consumer is a real Pod.
func createConsumer(ctx context.Context, client kubernetes.Interface, ns, node, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: managedBy},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(int64(65534)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "never-started",
				Image: consumerImage,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	// The ServiceAccount admission plugin refuses pods until the
	// namespace's default ServiceAccount exists, which the controller
	// manager creates shortly after the namespace.
	deadline := time.Now().Add(30 * time.Second)
	for {
		created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			return created, nil
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "service account") || time.Now().After(deadline) {
			return nil, fmt.Errorf("create consumer pod %s/%s: %w", ns, name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create consumer pod %s/%s: %w", ns, name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteConsumer deletes the consumer pod at once (grace period 0: a node
// without kubelet would never confirm a graceful deletion).
func deleteConsumer(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) {
	if pod == nil {
		return
	}
	_ = client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
}

// consumerRef is the reservedFor entry naming pod.
func consumerRef(pod *corev1.Pod) resourceapi.ResourceClaimConsumerReference {
	return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID}
}
