package device

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

// allocate runs the scheduler's own allocator on the slices of inv for a
// claim asking for count devices that match selector, and returns the
// names of the devices it picked (nil when it cannot satisfy the claim).
func allocate(t *testing.T, inv *Inventory, count int64, selector string) []string {
	t.Helper()
	slices := inv.ResourceSlices("node-1")
	if err := Validate(slices...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", inv.Driver)}}},
	}}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "uid-c"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "r",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}},
			},
		}}}},
	}
	ctx := context.Background()
	features := structured.Features{PartitionableDevices: true, DeviceTaints: true, ConsumableCapacity: true, DeviceBindingAndStatus: true, PrioritizedList: true}
	alloc, err := structured.NewAllocator(ctx, features, structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}, classes{class}, slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatalf("NewAllocator: %v", err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	results, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if len(results) == 0 {
		return nil
	}
	var out []string
	for _, r := range results[0].Devices.Results {
		out = append(out, r.Device)
	}
	return out
}

// TestAllocatorUsesSlices feeds the slices of partitionable GPUs to the
// scheduler's allocator: the counter sets in their own slices are found,
// counters limit what fits, and the first devices in inventory order are
// picked first.
func TestAllocatorUsesSlices(t *testing.T) {
	pool := Pool{Name: "node-1"}
	for g := 0; g < 2; g++ {
		pool.CounterSets = append(pool.CounterSets, CounterSet{Name: fmt.Sprintf("gpu-%d", g),
			Counters: map[string]resource.Quantity{"memory": q("80Gi")}})
	}
	// 100 plain devices first, so that the partitions land in later
	// slices than their counter sets and than each other.
	for i := 0; i < 100; i++ {
		pool.Devices = append(pool.Devices, New(fmt.Sprintf("nic-%d", i)).StringAttribute("type", "nic"))
	}
	for g := 0; g < 2; g++ {
		for p := 0; p < 10; p++ {
			pool.Devices = append(pool.Devices, New(fmt.Sprintf("gpu-%d-part-%d", g, p)).StringAttribute("type", "part").
				ConsumesCounters(fmt.Sprintf("gpu-%d", g), map[string]resource.Quantity{"memory": q("10Gi")}))
		}
	}
	inv := &Inventory{Driver: testDriver, Pools: []Pool{pool}}
	if n := len(inv.ResourceSlices("node-1")); n != 3 {
		t.Fatalf("got %d slices, want 3 (counters, 100 nics, 20 partitions)", n)
	}
	sel := `device.attributes["gpu.example.com"].type == "part"`
	// 80Gi per GPU, 10Gi per partition: 8 fit per GPU, 16 in all.
	got := allocate(t, inv, 16, sel)
	var want []string
	for g := 0; g < 2; g++ {
		for p := 0; p < 8; p++ {
			want = append(want, fmt.Sprintf("gpu-%d-part-%d", g, p))
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocated (-want +got):\n%s", diff)
	}
	if got := allocate(t, inv, 17, sel); got != nil {
		t.Errorf("17 partitions allocated although counters allow 16: %v", got)
	}
	// First fit in inventory order across slices.
	if got := allocate(t, inv, 1, `device.attributes["gpu.example.com"].type == "nic"`); !cmp.Equal(got, []string{"nic-0"}) {
		t.Errorf("first nic = %v, want [nic-0]", got)
	}
}
