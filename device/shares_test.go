package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// gpuShares is memory in whole GiB from 1 GiB, compute in percent points.
func gpuShares(t testing.TB) *Shares {
	t.Helper()
	s, err := NewShares(
		ShareCapacity{Name: "memory", Capacity: resource.MustParse("80Gi"),
			Default: resource.MustParse("4Gi"), Min: qp("1Gi"), Step: qp("1Gi")},
		ShareCapacity{Name: "compute", Capacity: resource.MustParse("100"),
			Default: resource.MustParse("10"), Min: qp("1"), Step: qp("1")},
	)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// badShares are models the API server's rules (or the model's own)
// refuse, each with a word the error must carry.
var badShares = []struct {
	name string
	c    ShareCapacity
	want string
}{
	{"no name", ShareCapacity{Capacity: q("8"), Default: q("1"), Min: qp("1")}, "name is empty"},
	{"no form", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("1")}, "neither"},
	{"two forms", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("1"), Min: qp("1"),
		Values: []resource.Quantity{q("1")}}, "both"},
	{"step without min", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("1"),
		Step: qp("1")}, "without Min"},
	{"default off step", ShareCapacity{Name: "m", Capacity: q("8Gi"), Default: q("1536Mi"),
		Min: qp("1Gi"), Step: qp("1Gi")}, "not a multiple"},
	{"default below min", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("1"),
		Min: qp("2")}, "less than min"},
	{"min above capacity", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("9"),
		Min: qp("9")}, "larger than capacity"},
	{"max above capacity", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("1"),
		Min: qp("1"), Max: qp("9")}, "max is larger than capacity"},
	{"default above capacity", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("9"),
		Min: qp("1")}, "more than the capacity"},
	{"values unsorted", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("2"),
		Values: []resource.Quantity{q("4"), q("2")}}, "ascending"},
	{"default not a value", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("3"),
		Values: []resource.Quantity{q("2"), q("4")}}, "default value is not valid"},
	{"fraction", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("500m"),
		Min: qp("500m")}, "whole"},
	{"zero step", ShareCapacity{Name: "m", Capacity: q("8"), Default: q("1"), Min: qp("1"),
		Step: qp("0")}, "Step is zero"},
}

func TestNewSharesRefuses(t *testing.T) {
	for _, tc := range badShares {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewShares(tc.c)
			if !errors.Is(err, ErrInvalidShares) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewShares: %v, want %v naming %q", err, ErrInvalidShares, tc.want)
			}
		})
	}
	c := gpuShares(t).caps[0]
	if _, err := NewShares(c, c); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a capacity twice: %v", err)
	}
	if _, err := NewShares(); !errors.Is(err, ErrInvalidShares) {
		t.Errorf("no capacity: %v", err)
	}
}

// shareAllocator allocates claims one at a time with the scheduler's own
// allocator, each against what the earlier ones took, as the scheduler
// does for pods that arrive one after the other.
type shareAllocator struct {
	t      *testing.T
	slices []*resourceapi.ResourceSlice
	state  structured.AllocatedState
	class  *resourceapi.DeviceClass
	n      int
}

func newShareAllocator(t *testing.T, inv *Inventory) *shareAllocator {
	slices := inv.ResourceSlices("node-1")
	if err := Validate(slices...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return &shareAllocator{t: t, slices: slices,
		state: structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		},
		class: &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "shared"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf("device.driver == %q", inv.Driver)}}}}}}
}

// allocate asks for one share with the given capacity requests (nil:
// the defaults) and returns its result, nil when it does not fit.
func (a *shareAllocator) allocate(
	requests map[string]string,
) *resourceapi.DeviceRequestAllocationResult {
	t := a.t
	t.Helper()
	a.n++
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: a.class.Name,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if requests != nil {
		req.Capacity = &resourceapi.CapacityRequirements{
			Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for k, v := range requests {
			req.Capacity.Requests[resourceapi.QualifiedName(k)] = resource.MustParse(v)
		}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", a.n), Namespace: "default",
			UID: types.UID(fmt.Sprintf("uid-%d", a.n))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: req}}}},
	}
	ctx := context.Background()
	features := structured.Features{PartitionableDevices: true, DeviceTaints: true,
		ConsumableCapacity: true, PrioritizedList: true}
	alloc, err := structured.NewAllocator(ctx, features, a.state, classes{a.class}, a.slices,
		cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatalf("NewAllocator: %v", err)
	}
	results, err := alloc.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		[]*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if len(results) == 0 {
		return nil
	}
	r := results[0].Devices.Results[0]
	id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
	a.state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
	a.state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
	return &r
}

// TestSharesWithAllocator publishes two shareable GPUs of the model and
// lets the scheduler's allocator place shares on them: defaults fill a
// request that names no amount, a request between steps is rounded up,
// the sum stays within each GPU's capacity (first fit fills gpu-0, then
// gpu-1), a request above the range is never allocated, every share has
// its own ID, and Of reads each allocation back.
func TestSharesWithAllocator(t *testing.T) {
	s := gpuShares(t)
	inv := &Inventory{Driver: "gpu.example.com", Pools: []Pool{{Name: "node-1"}}}
	for i := range 2 {
		inv.Pools[0].Devices = append(inv.Pools[0].Devices, s.Apply(New(fmt.Sprintf("gpu-%d", i))))
	}
	a := newShareAllocator(t, inv)

	def := a.allocate(nil)
	if def == nil {
		t.Fatal("a share with the defaults does not fit an empty GPU")
	}
	sh, err := s.Of(def.ConsumedCapacity)
	if err != nil {
		t.Fatal(err)
	}
	if m, c := sh["memory"], sh["compute"]; m.String() != "4Gi" || c.String() != "10" {
		t.Errorf("default share %v, want memory 4Gi and compute 10", sh)
	}
	rounded := a.allocate(map[string]string{"memory": "12800Mi"}) // 12.5Gi
	if m := rounded.ConsumedCapacity["memory"]; m.String() != "13Gi" {
		t.Errorf("12.5Gi took %s, want 13Gi (rounded up to the step)", &m)
	}
	if a.allocate(map[string]string{"memory": "81Gi"}) != nil {
		t.Error("a share larger than the GPU was allocated")
	}
	// gpu-0 has 80-4-13 = 63Gi left: five 12Gi shares, then gpu-1.
	var on []string
	ids := map[types.UID]bool{*def.ShareID: true, *rounded.ShareID: true}
	for range 7 {
		r := a.allocate(map[string]string{"memory": "12Gi"})
		if r == nil {
			t.Fatal("a 12Gi share did not fit two 80Gi GPUs")
		}
		on = append(on, r.Device)
		if ids[*r.ShareID] {
			t.Errorf("share ID %s given twice", *r.ShareID)
		}
		ids[*r.ShareID] = true
	}
	want := "gpu-0 gpu-0 gpu-0 gpu-0 gpu-0 gpu-1 gpu-1"
	if got := strings.Join(on, " "); got != want {
		t.Errorf("12Gi shares on %s, want %s", got, want)
	}
	// Both capacities bound: every share so far took the default 10%.
	// gpu-0 has 3Gi and 30% left (three 1Gi shares), gpu-1 56Gi and 80%
	// (eight).
	n := 0
	for a.allocate(map[string]string{"memory": "1Gi", "compute": "10"}) != nil {
		n++
	}
	if n != 11 {
		t.Errorf("%d more 1Gi 10%% shares fit, want 11", n)
	}
	offStep := map[resourceapi.QualifiedName]resource.Quantity{"memory": q("1536Mi")}
	if _, err := s.Of(offStep); err == nil {
		t.Error("Of took an amount off the step")
	}
	if p := s.Percent(Share{"compute": q("25")}, "compute"); p != 25 {
		t.Errorf("Percent = %d, want 25", p)
	}
}

// ExampleShares makes a GPU shareable by memory (whole GiB, 4 GiB by
// default) and compute (percent points, 10 by default), and reads what
// one allocation took.
func ExampleShares() {
	shares, err := NewShares(
		ShareCapacity{Name: "memory", Capacity: resource.MustParse("141Gi"),
			Default: resource.MustParse("4Gi"), Min: qp("1Gi"), Step: qp("1Gi")},
		ShareCapacity{Name: "compute", Capacity: resource.MustParse("100"),
			Default: resource.MustParse("10"), Min: qp("1"), Step: qp("1")},
	)
	if err != nil {
		panic(err)
	}
	gpu := shares.Apply(New("gpu-0-shared").StringAttribute("model", "h200"))
	fmt.Println(gpu)

	// What the scheduler wrote into an allocation that asked for 12Gi.
	share, err := shares.Of(map[resourceapi.QualifiedName]resource.Quantity{
		"memory": resource.MustParse("12Gi"), "compute": resource.MustParse("10")})
	if err != nil {
		panic(err)
	}
	mem := share["memory"]
	fmt.Println(mem.String(), shares.Percent(share, "compute"))
	// Output:
	// gpu-0-shared{model="h200" compute=100 memory=141Gi}
	// 12Gi 10
}
