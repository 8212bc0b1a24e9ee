package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const guardDriver = "gpu.example.com"

// newGuard is a LayoutGuard whose client leads nowhere: these tests check
// the decisions that need no ledger (layout_cluster_test.go runs one on a
// real API server).
func newGuard(t *testing.T) *LayoutGuard {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewLayoutGuard(c, guardDriver, "ns")
	if err != nil {
		t.Fatal(err)
	}
	close(g.synced)
	return g
}

// allocated is a claim allocated to (driver, pool, device) triples.
func allocated(results ...[3]string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u", ResourceVersion: "5"},
	}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, r := range results {
		c.Status.Allocation.Devices.Results = append(
			c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{
				Request: "r" + string(rune('0'+i)),
				Driver:  r[0],
				Pool:    r[1],
				Device:  r[2],
			},
		)
	}
	return c
}

// TestLayoutGuardNeedsNoLedger: what the guard decides without reading a
// ledger (its client leads nowhere, so a read would fail the test):
// writes that do not allocate, other drivers' devices, the driver's
// devices of pools that are not layout pools, admin access.
func TestLayoutGuardNeedsNoLedger(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	admin := allocated([3]string{guardDriver, "n1/layout", "gpu-0"})
	admin.Status.Allocation.Devices.Results[0].AdminAccess = func() *bool { b := true; return &b }()
	for _, tc := range []struct {
		name       string
		old, claim *resourceapi.ResourceClaim
	}{
		{"no allocation", &resourceapi.ResourceClaim{}, &resourceapi.ResourceClaim{}},
		{"already allocated (status.devices, reservedFor)", allocated([3]string{guardDriver, "n1/layout", "gpu-0"}),
			allocated([3]string{guardDriver, "n1/layout", "gpu-0"})},
		{"another driver", &resourceapi.ResourceClaim{}, allocated([3]string{"other", "n1/layout", "gpu-0"})},
		{"not a layout pool", &resourceapi.ResourceClaim{}, allocated([3]string{guardDriver, "n1", "gpu-0"})},
		{"a per-GPU pool", &resourceapi.ResourceClaim{}, allocated([3]string{guardDriver, "n1/gpu-00", "gpu-0-1g-10gb-0"})},
		{"admin access", &resourceapi.ResourceClaim{}, admin},
	} {
		if err := g.Admit(ctx, tc.old, tc.claim); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// A layout device needs the ledger: with no API server, the write is
	// refused as unavailable, not admitted.
	resp := g.Review(
		ctx,
		review(
			t,
			&resourceapi.ResourceClaim{},
			allocated([3]string{guardDriver, "n1/layout", "gpu-0"}),
		),
	)
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable {
		t.Errorf("a layout device without a reachable ledger: %+v", resp)
	}
}

func review(t *testing.T, old, claim *resourceapi.ResourceClaim) *admissionv1.AdmissionRequest {
	t.Helper()
	o, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	n, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID:         "r",
		Operation:   admissionv1.Update,
		SubResource: "status",
		Resource: metav1.GroupVersionResource{
			Group:    resourceapi.GroupName,
			Version:  "v1",
			Resource: ResourceClaims,
		},
		Namespace: "ns",
		Name:      "c",
		Object:    runtime.RawExtension{Raw: n},
		OldObject: runtime.RawExtension{Raw: o},
	}
}
