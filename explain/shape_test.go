package explain

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// sameGPUClaim asks for n devices of class gpu.example.com on one NUMA
// node: n requests of one device, or one request of n.
func sameGPUClaim(n int, oneRequest bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "same", Namespace: "default"}}
	req := func(name string, count int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.example.com"].model == "H100"`}}},
		}}
	}
	if oneRequest {
		c.Spec.Devices.Requests = []resourceapi.DeviceRequest{req("gpus", int64(n))}
	} else {
		for i := range n {
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, req(fmt.Sprintf("gpu%d", i), 1))
		}
	}
	c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("gpu.example.com/numa"))}}
	return c
}

// TestShapeWarnings: four or more requests for the same devices under a
// constraint get a warning naming the one-request form; fewer, a count,
// different kinds of devices or no constraint do not.
func TestShapeWarnings(t *testing.T) {
	differ := sameGPUClaim(4, false)
	for i := range differ.Spec.Devices.Requests {
		differ.Spec.Devices.Requests[i].Exactly.Selectors[0].CEL.Expression += fmt.Sprintf(" && %d == %d", i, i)
	}
	free := sameGPUClaim(5, false)
	free.Spec.Devices.Constraints = nil
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{"four requests", sameGPUClaim(4, false), "requests gpu0, gpu1, gpu2, gpu3 ask for the same devices one request each under matchAttribute gpu.example.com/numa"},
		{"eight requests", sameGPUClaim(8, false), "ask for one request with count 8 and the same constraint instead"},
		{"three requests", sameGPUClaim(3, false), ""},
		{"one request of eight", sameGPUClaim(8, true), ""},
		{"different selectors", differ, ""},
		{"no constraint", free, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shapeWarnings([]*resourceapi.ResourceClaim{tt.claim}, []string{"default/same"})
			if tt.want == "" {
				if len(got) != 0 {
					t.Errorf("unexpected warnings %q", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tt.want) || !strings.HasPrefix(got[0], "claim default/same: ") {
				t.Errorf("warnings %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// TestShapeWarningInReport: Claim reports the warning, and the text
// output prints it under the claims.
func TestShapeWarningInReport(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	rep, err := Claim(context.Background(), snap, sameGPUClaim(5, false), WithNodes("node-d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 1 {
		t.Fatalf("warnings %q, want one", rep.Warnings)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nwarning: claim default/same: requests gpu0, gpu1, gpu2, gpu3, gpu4 ") {
		t.Errorf("text output lacks the warning:\n%s", b.String())
	}
	rep, err = Claim(context.Background(), snap, sameGPUClaim(5, true), WithNodes("node-d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("one request of five: warnings %q", rep.Warnings)
	}
}
