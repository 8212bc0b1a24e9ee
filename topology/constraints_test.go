package topology_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/topology"
)

var gpuAndNIC = []topology.Request{
	{Name: "gpu", DeviceClassName: "gpu.example.com"},
	{Name: "nic", DeviceClassName: "nic.example.com"},
}

func TestClaimSpec(t *testing.T) {
	spec, err := topology.ClaimSpec([]topology.Request{
		{Name: "gpu", DeviceClassName: "gpu.example.com", Count: 2, Selectors: []string{`device.attributes["gpu.example.com"].model == "H100"`}},
		{Name: "nic", DeviceClassName: "nic.example.com"},
	}, topology.SamePCIeRoot("gpu", "nic"), topology.SameNUMANode())
	if err != nil {
		t.Fatal(err)
	}
	want := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpu.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.example.com"].model == "H100"`}}},
			}},
			{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "nic.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			}},
		},
		Constraints: []resourceapi.DeviceConstraint{
			{Requests: []string{"gpu", "nic"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("resource.kubernetes.io/pcieRoot"))},
			{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode"))},
		},
	}}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("ClaimSpec (-want +got):\n%s", diff)
	}
}

func TestClaimSpecErrors(t *testing.T) {
	many := make([]topology.Request, 33)
	for i := range many {
		many[i] = topology.Request{Name: fmt.Sprintf("r%d", i), DeviceClassName: "c"}
	}
	tests := []struct {
		name        string
		requests    []topology.Request
		constraints []resourceapi.DeviceConstraint
		wantField   string
	}{
		{"no requests", nil, nil, "spec.devices.requests"},
		{"too many requests", many, nil, "spec.devices.requests: 33 entries"},
		{"bad request name", []topology.Request{{Name: "GPU", DeviceClassName: "c"}}, nil, "spec.devices.requests[0].name"},
		{"duplicate request", []topology.Request{{Name: "a", DeviceClassName: "c"}, {Name: "a", DeviceClassName: "c"}}, nil, "spec.devices.requests[1].name"},
		{"bad class", []topology.Request{{Name: "a", DeviceClassName: "GPU"}}, nil, "spec.devices.requests[0].exactly.deviceClassName"},
		{"negative count", []topology.Request{{Name: "a", DeviceClassName: "c", Count: -1}}, nil, "spec.devices.requests[0].exactly.count"},
		{"count above limit", []topology.Request{{Name: "a", DeviceClassName: "c", Count: 33}}, nil, "spec.devices.requests[0].exactly.count"},
		{"empty selector", []topology.Request{{Name: "a", DeviceClassName: "c", Selectors: []string{" "}}}, nil, "spec.devices.requests[0].exactly.selectors[0]"},
		{"unknown request", gpuAndNIC, []resourceapi.DeviceConstraint{topology.SamePCIeRoot("gpu", "nci")}, `spec.devices.constraints[0].requests[1] "nci"`},
		{"duplicate reference", gpuAndNIC, []resourceapi.DeviceConstraint{topology.SamePCIeRoot("gpu", "gpu")}, "spec.devices.constraints[0].requests[1]"},
		{"no matchAttribute", gpuAndNIC, []resourceapi.DeviceConstraint{{Requests: []string{"gpu"}}}, "spec.devices.constraints[0].matchAttribute"},
		{"unqualified attribute", gpuAndNIC, []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("pcieRoot"))}}, "spec.devices.constraints[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := topology.ClaimSpec(tt.requests, tt.constraints...)
			if !errors.Is(err, topology.ErrInvalidClaim) {
				t.Fatalf("ClaimSpec = %+v, %v; want ErrInvalidClaim", spec, err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("error %q does not name %q", err, tt.wantField)
			}
		})
	}
}

func TestMatchAttribute(t *testing.T) {
	c, err := topology.MatchAttribute("gpu.example.com/nvlinkDomain", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	want := resourceapi.DeviceConstraint{Requests: []string{"a", "b"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("gpu.example.com/nvlinkDomain"))}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("MatchAttribute (-want +got):\n%s", diff)
	}
	for _, bad := range []resourceapi.FullyQualifiedName{"", "nodomain", "/x", "Bad_Domain/x", "example.com/", "example.com/1x", "example.com/" + resourceapi.FullyQualifiedName(strings.Repeat("x", 33))} {
		if _, err := topology.MatchAttribute(bad); !errors.Is(err, topology.ErrInvalidClaim) {
			t.Errorf("MatchAttribute(%q) = %v, want ErrInvalidClaim", bad, err)
		}
	}
}

func TestSameAttribute(t *testing.T) {
	c := topology.SameAttribute("gpu.example.com/card", "a", "b")
	want := resourceapi.DeviceConstraint{Requests: []string{"a", "b"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("gpu.example.com/card"))}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("SameAttribute (-want +got):\n%s", diff)
	}
	reqs := []topology.Request{{Name: "a", DeviceClassName: "gpu.example.com"}, {Name: "b", DeviceClassName: "gpu.example.com"}}
	if _, err := topology.ClaimSpec(reqs, c); err != nil {
		t.Errorf("ClaimSpec with SameAttribute: %v", err)
	}
	// A bad name is caught where the claim is built, with the field named.
	for _, bad := range []resourceapi.FullyQualifiedName{"", "nodomain", "example.com/1x"} {
		_, err := topology.ClaimSpec(reqs, topology.SameAttribute(bad, "a", "b"))
		if !errors.Is(err, topology.ErrInvalidClaim) || !strings.Contains(err.Error(), "matchAttribute") {
			t.Errorf("ClaimSpec(SameAttribute(%q)) = %v, want ErrInvalidClaim naming matchAttribute", bad, err)
		}
	}
}

func TestYAML(t *testing.T) {
	spec, err := topology.ClaimSpec(gpuAndNIC, topology.SamePCIeRoot("gpu", "nic"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := topology.YAML(topology.ClaimTemplate("default", "gpu-nic", spec))
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gpu-nic
  namespace: default
spec:
  spec:
    devices:
      constraints:
      - matchAttribute: resource.kubernetes.io/pcieRoot
        requests:
        - gpu
        - nic
      requests:
      - exactly:
          allocationMode: ExactCount
          count: 1
          deviceClassName: gpu.example.com
        name: gpu
      - exactly:
          allocationMode: ExactCount
          count: 1
          deviceClassName: nic.example.com
        name: nic
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("YAML (-want +got):\n%s", diff)
	}
	// It must read back into the same object.
	var back resourceapi.ResourceClaimTemplate
	if err := yaml.UnmarshalStrict(out, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec, back.Spec.Spec); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// classes is a DeviceClassLister for the real allocator.
type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, x := range c {
		if x.Name == name {
			return x, nil
		}
	}
	return nil, fmt.Errorf("no class %s", name)
}

func driverClass(driver string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
}

// slice publishes devices name->pcieRoot for one driver on node-1, in the
// order given (the allocator's first-fit order).
func slice(driver string, devs ...[2]string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
			NodeName: ptr.To("node-1"),
		},
	}
	for _, d := range devs {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name:       d[0],
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{topology.PCIeRootAttribute: {StringValue: ptr.To(d[1])}},
		})
	}
	return s
}

// TestSamePCIeRootWithRealAllocator runs the constraint through the
// allocator kube-scheduler uses. The NICs are listed in the opposite order
// of the GPUs, so first fit without the constraint picks a misaligned pair.
func TestSamePCIeRootWithRealAllocator(t *testing.T) {
	ctx := context.Background()
	slices := []*resourceapi.ResourceSlice{
		slice("gpu.example.com", [2]string{"gpu-0", "pci0000:00"}, [2]string{"gpu-1", "pci0000:80"}),
		slice("nic.example.com", [2]string{"nic-0", "pci0000:80"}, [2]string{"nic-1", "pci0000:00"}),
	}
	root := map[string]string{"gpu-0": "pci0000:00", "gpu-1": "pci0000:80", "nic-0": "pci0000:80", "nic-1": "pci0000:00"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	allocate := func(t *testing.T, state structured.AllocatedState, constraints ...resourceapi.DeviceConstraint) []resourceapi.DeviceRequestAllocationResult {
		t.Helper()
		spec, err := topology.ClaimSpec(gpuAndNIC, constraints...)
		if err != nil {
			t.Fatal(err)
		}
		claim := topology.Claim("default", "c", spec)
		claim.UID = types.UID("uid-c")
		a, err := structured.NewAllocator(ctx, structured.Features{}, state, classes{driverClass("gpu.example.com"), driverClass("nic.example.com")}, slices, cel.NewCache(10, cel.Features{}))
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
		if err != nil {
			t.Fatal(err)
		}
		if res == nil {
			return nil
		}
		return res[0].Devices.Results
	}
	empty := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}

	// Control: without the constraint first fit gives gpu-0 + nic-0, on
	// different roots. Otherwise the test below could not fail.
	got := allocate(t, empty)
	if len(got) != 2 || root[got[0].Device] == root[got[1].Device] {
		t.Fatalf("control allocation %+v: want a misaligned pair", got)
	}

	taken := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
	for round := range 2 {
		got := allocate(t, taken, topology.SamePCIeRoot("gpu", "nic"))
		if len(got) != 2 {
			t.Fatalf("round %d: allocation %+v, want a GPU and a NIC", round, got)
		}
		if root[got[0].Device] != root[got[1].Device] {
			t.Errorf("round %d: %s on %s and %s on %s: not on one PCIe root", round, got[0].Device, root[got[0].Device], got[1].Device, root[got[1].Device])
		}
		for _, r := range got {
			taken.AllocatedDevices.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	if got := allocate(t, taken, topology.SamePCIeRoot("gpu", "nic")); got != nil {
		t.Errorf("with both aligned pairs taken the allocator gave %+v, want nothing", got)
	}
}

// TestClaimSpecWithoutClass builds a spec whose request names no class, as
// conformance.Config.ExtraClaims accepts (the suite fills in its class).
func TestClaimSpecWithoutClass(t *testing.T) {
	spec, err := topology.ClaimSpec([]topology.Request{{Name: "fpga", Count: 2}}, topology.SamePCIeRoot())
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Devices.Requests[0].Exactly; got.DeviceClassName != "" || got.Count != 2 {
		t.Errorf("request %+v, want no class and count 2", got)
	}
}
