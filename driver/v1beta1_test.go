package driver_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/drivertest"
)

// TestV1beta1Service: a kubelet that only speaks DRA v1beta1 (1.33 and
// older) gets the same answers as a v1 kubelet, and can unprepare what a
// v1 kubelet prepared.
func TestV1beta1Service(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(2)}, hw)
	claim := createClaim(ctx, t, c, ns, "old-kubelet", drivertest.Device{Request: "r/sub", Device: "dev-1"})

	conn, err := grpc.NewClient("unix://"+d.draSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	old := drapbv1beta1.NewDRAPluginClient(conn)
	ref := []*drapbv1beta1.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	got, err := old.NodePrepareResources(ctx, &drapbv1beta1.NodePrepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatalf("v1beta1 prepare: %v", err)
	}
	res := got.GetClaims()[string(claim.UID)]
	if res == nil || res.GetError() != "" || len(res.GetDevices()) != 1 {
		t.Fatalf("v1beta1 prepare result: %v", got)
	}
	dev := res.GetDevices()[0]
	if dev.GetPoolName() != testNode || dev.GetDeviceName() != "dev-1" || !cmp.Equal(dev.GetRequestNames(), []string{"r"}) || len(dev.GetCdiDeviceIds()) != 1 {
		t.Errorf("v1beta1 device = %v, want pool %s, device dev-1, request r (the helper strips the subrequest, as the kubelet matches base names), one CDI ID", dev, testNode)
	}

	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	v1, err := k.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	v1dev := v1[string(claim.UID)].GetDevices()[0]
	if !cmp.Equal(v1dev.GetCdiDeviceIds(), dev.GetCdiDeviceIds()) || v1dev.GetDeviceName() != dev.GetDeviceName() || !cmp.Equal(v1dev.GetRequestNames(), dev.GetRequestNames()) {
		t.Errorf("v1 and v1beta1 answers differ: %v vs %v", v1dev, dev)
	}

	un, err := old.NodeUnprepareResources(ctx, &drapbv1beta1.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatalf("v1beta1 unprepare: %v", err)
	}
	if e := un.GetClaims()[string(claim.UID)]; e == nil || e.GetError() != "" {
		t.Fatalf("v1beta1 unprepare result: %v", un)
	}
	if holders, _ := hw.Holders(); len(holders) != 0 || d.specCount(t) != 0 {
		t.Errorf("after v1beta1 unprepare: devices %v, %d CDI specs", holders, d.specCount(t))
	}
}
