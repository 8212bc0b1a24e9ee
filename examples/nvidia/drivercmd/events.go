package drivercmd

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/drakit/drakit/driver/driverflag"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// nodeWarnings returns the driver's WithWarnings report that records
// each Warning as a Warning event on node (what `kubectl describe node`
// and `kubectl events` show), and the function that flushes and stops
// the recorder.
func nodeWarnings(std *driverflag.Flags, node string) (func(nvdriver.Warning), func(), error) {
	cfg, err := std.RESTConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("node events: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("node events: %w", err)
	}
	b := record.NewBroadcaster(record.WithContext(context.Background()))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(
		scheme.Scheme,
		corev1.EventSource{Component: nvdriver.DriverName, Host: node},
	)
	// The kubelet refers to its node with the node's name as UID too.
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(node)}
	report := func(w nvdriver.Warning) {
		rec.Event(ref, corev1.EventTypeWarning, w.Reason, w.Message)
	}
	return report, b.Shutdown, nil
}
