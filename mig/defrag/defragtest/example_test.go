package defragtest_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/mig/defrag/defragtest"
	"github.com/drakit/drakit/testenv"
)

// A scene on a cluster with a fake node: an opted-in 1g.10gb pod and a
// 4g.40gb pod that waits, then what the controller's step did.
func Example() {
	var t *testing.T // the test's own
	env := testenv.Start(t)
	ctx := context.Background()
	s := &defragtest.Scene{T: t, Ctx: ctx, Client: env.Client, Namespace: "default",
		Class:   func(profile string) string { return "mig-" + profile + ".example.com" },
		PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	s.Deployment("small", "1g.10gb", "", true)
	before := s.WaitPlaced("small")
	s.Pod("big", "4g.40gb", "")
	s.WaitUnschedulable("big")

	c, _ := defrag.New(env.Client, "mig.example.com")
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("small was on %s; tainted now: %v; big's events: %v", before.Device, s.TaintedDevices(), s.Events("big"))
}
