package driver

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// startEvents starts recording events through client-go's event
// broadcaster (which aggregates repeats and filters spam) and returns the
// function that stops it.
func (d *Runtime) startEvents(ctx context.Context, client kubernetes.Interface) (stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	d.events = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: d.name, Host: d.o.nodeName})
	return b.Shutdown
}

// nodeWarning records a warning event on the node (best effort).
func (d *Runtime) nodeWarning(reason, message string) {
	if d.events == nil {
		return
	}
	// The kubelet refers to its node with the node's name as UID too.
	node := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: d.o.nodeName, UID: types.UID(d.o.nodeName)}
	d.events.Event(node, corev1.EventTypeWarning, reason, message)
}

// EventUnusedConfig is the reason of the Warning event on a claim's pods
// whose allocation carries opaque configuration for a driver that
// allocated none of the claim's devices: no driver applies it.
const EventUnusedConfig = "UnusedOpaqueConfig"

// reportUnusedConfig records a Warning event on every pod the claim is
// reserved for (and on the claim when none is), saying that its opaque
// configuration for drivers is applied by no driver.
func (d *Runtime) reportUnusedConfig(_ context.Context, obj *resourceapi.ResourceClaim, drivers []string) {
	if d.events == nil {
		return
	}
	msg := fmt.Sprintf("claim %s/%s carries opaque configuration for driver %s, which allocated none of its devices: no driver applies it (the devices are %s's; its configuration names driver %s)",
		obj.Namespace, obj.Name, strings.Join(drivers, ", "), d.name, d.name)
	var pods int
	for _, r := range obj.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			d.events.Event(&corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: obj.Namespace, Name: r.Name, UID: r.UID}, corev1.EventTypeWarning, EventUnusedConfig, msg)
			pods++
		}
	}
	if pods == 0 {
		d.events.Event(&corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID}, corev1.EventTypeWarning, EventUnusedConfig, msg)
	}
}

// reportCorrupt records an event on the node for a quarantined checkpoint
// record.
func (d *Runtime) reportCorrupt(_ context.Context, c checkpoint.Corrupt) {
	d.nodeWarning(ReasonCorrupt, fmt.Sprintf("DRA driver %s quarantined a corrupt checkpoint record %s to %s: %v", d.name, filepath.Base(c.File), c.QuarantinedTo, c.Err))
}

// reportUnreleased records an event on the node for a claim whose devices
// the driver could not release.
func (d *Runtime) reportUnreleased(_ context.Context, ref ClaimRef) {
	d.nodeWarning(ReasonCorrupt, fmt.Sprintf("DRA driver %s could not release the devices of claim %s: its checkpoint record was corrupt and the claim is gone from the API server; check the node's devices", d.name, ref))
}
