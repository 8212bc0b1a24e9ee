package driver_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/drivertest"
)

// TestPreparesWhatThePreviousProcessPublished: after a restart (an
// upgrade, a crash) the node's slices are the previous process's until
// the new one publishes, and the scheduler may have allocated from them a
// device the new inventory lacks (a driver that publishes partitions
// only while they fit, or a layout, publishes other devices on each
// start). The new process prepares it, within WithdrawnGrace, and still
// refuses a device no slice ever listed. Before the runtime watched the
// node's slices, the new process refused it as "stale or forged": the
// reference driver's upgrade test saw it during a chart downgrade.
func TestPreparesWhatThePreviousProcessPublished(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	inv := func(names ...string) *device.Inventory {
		out := &device.Inventory{Driver: testDriver, Pools: []device.Pool{{Name: testNode}}}
		for _, n := range names {
			out.Pools[0].Devices = append(out.Pools[0].Devices, device.New(n))
		}
		return out
	}
	old := startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: inv("restart-a", "restart-b")}, hw)
	old.waitPublished(ctx, t, "the first process's slices are not published")
	old.stop(t)

	r := startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: inv("restart-a")}, hw)
	defer r.stop(t)
	r.waitPublished(ctx, t, "the second process's slices are not published")
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	dropped := createClaim(ctx, t, c, ns, "dropped", drivertest.Device{Device: "restart-b"})
	if _, err := k.Prepare(ctx, dropped); err != nil {
		t.Errorf("prepare of a device the previous process published, now replaced: %v", err)
	}
	ghost := createClaim(ctx, t, c, ns, "ghost", drivertest.Device{Device: "restart-ghost"})
	if _, err := k.Prepare(ctx, ghost); err == nil || !strings.Contains(err.Error(), "is not published") {
		t.Errorf("prepare of a device no slice listed: %v, want refused as not published", err)
	}
	if err := k.Unprepare(ctx, dropped, ghost); err != nil {
		t.Fatal(err)
	}
}

// TestPreparesWhatTheOtherInstancePublished: during a rolling update both
// instances publish the node's slices and the kubelet calls the newer
// one, so a device that only the other instance's slice listed is
// prepared. Here the other instance is a slice the test writes under the
// driver's and node's names.
func TestPreparesWhatTheOtherInstancePublished(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	node := testNode
	r := startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(1)}, hw)
	defer r.stop(t)
	r.waitPublished(ctx, t, "slices not published")
	other := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "other-instance-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   testDriver,
			NodeName: &node,
			Pool:     resourceapi.ResourcePool{Name: testNode, Generation: 1 << 20, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{{Name: "surge-1"}},
		},
	}
	created, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.ResourceV1().ResourceSlices().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	waitFor(ctx, t, "the other instance's device counts as published", func(context.Context) (bool, error) {
		return r.d.CountsAsPublished(testNode, "surge-1"), nil
	})
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	claim := createClaim(ctx, t, c, ns, "surge", drivertest.Device{Device: "surge-1"})
	if _, err := k.Prepare(ctx, claim); err != nil {
		t.Errorf("prepare of a device the other instance's slice lists: %v", err)
	}
	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
}
