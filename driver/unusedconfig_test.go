package driver

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// A claim written for NVIDIA's driver with only its class renamed: its
// devices are this driver's, its opaque configuration still names
// gpu.nvidia.com. The Warning event goes to the claim's pods and says
// which driver the configuration names and which it should; a claim
// whose configurations name allocating drivers gets none.
func TestReportUnusedConfig(t *testing.T) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gpu", UID: "u1"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	claim.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.nvidia.drakit.dev", Pool: "node-1", Device: "gpu-0"},
		{Request: "nic", Driver: "nic.example.com", Pool: "node-1", Device: "nic-0"},
	}
	opaque := func(driver string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}
	}
	claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{opaque("gpu.nvidia.drakit.dev"), opaque("nic.example.com")}
	if got := unusedConfigDrivers(claim); len(got) != 0 {
		t.Errorf("configurations of allocating drivers reported unused: %v", got)
	}
	claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, opaque("gpu.nvidia.com"), opaque("gpu.nvidia.com"))
	got := unusedConfigDrivers(claim)
	if len(got) != 1 || got[0] != "gpu.nvidia.com" {
		t.Fatalf("unused configuration drivers %v, want [gpu.nvidia.com]", got)
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer", UID: "p1"}}
	rec := record.NewFakeRecorder(10)
	d := &Runtime{name: "gpu.nvidia.drakit.dev", events: rec}
	d.reportUnusedConfig(context.Background(), claim, got)
	select {
	case ev := <-rec.Events:
		for _, want := range []string{"Warning", EventUnusedConfig, "ns/gpu", "gpu.nvidia.com", "no driver applies it", "gpu.nvidia.drakit.dev"} {
			if !strings.Contains(ev, want) {
				t.Errorf("event %q does not say %q", ev, want)
			}
		}
	default:
		t.Fatal("no event for the claim's pod")
	}
}
