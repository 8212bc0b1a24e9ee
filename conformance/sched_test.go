package conformance

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

// testSlices is a node-local pool: two plain devices, a shared device and
// a partitionable device in two partitions over one counter set (in its
// own slice, as the API requires since 1.35).
func testSlices(driver, node string) []*resourceapi.ResourceSlice {
	pool := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	consume := func(q string) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: "mem", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(q)}}}}
	}
	return []*resourceapi.ResourceSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "s0"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: pool,
			SharedCounters: []resourceapi.CounterSet{{Name: "mem", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("8Gi")}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: pool, Devices: []resourceapi.Device{
			{Name: "a"}, {Name: "b"},
			{Name: "shared", AllowMultipleAllocations: ptr.To(true), Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bw": {
				Value: resource.MustParse("4"), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("1"))}}}},
			{Name: "full", ConsumesCounters: consume("8Gi")},
			{Name: "half", ConsumesCounters: consume("4Gi")},
		}}},
	}
}

func testScheduler(t *testing.T) *scheduler {
	const driver, node = "d.example.com", "n1"
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
		CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "d.example.com"`}}}}}
	return &scheduler{
		driver: driver, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		classes: classLister{classes: []*resourceapi.DeviceClass{class}}, slices: testSlices(driver, node),
		celCache: cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}),
		inUse:    map[types.UID]*resourceapi.ResourceClaim{},
	}
}

// hold records alloc as committed for a claim of the given UID.
func (s *scheduler) hold(uid string, alloc *resourceapi.AllocationResult) {
	c := testClaim(uid)
	c.Status.Allocation = alloc
	s.inUse[types.UID(uid)] = c
}

func testClaim(uid string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)}, Spec: claimSpec(reqs...)}
}

func TestAllocateOnlyDevice(t *testing.T) {
	s := testScheduler(t)
	for _, dev := range []string{"a", "b", "shared", "full", "half"} {
		t.Run(dev, func(t *testing.T) {
			alloc, err := s.allocate(t.Context(), testClaim("u-"+dev, exactRequest("r", "c", 1)), &devRef{"n1", dev})
			if err != nil || alloc == nil {
				t.Fatalf("allocate: %v %v", alloc, err)
			}
			res := alloc.Devices.Results
			if len(res) != 1 || res[0].Device != dev || res[0].Request != "r" {
				t.Errorf("got %+v, want device %s for request r", res, dev)
			}
			if (dev == "shared") != (res[0].ShareID != nil) {
				t.Errorf("share ID %v for device %s", res[0].ShareID, dev)
			}
		})
	}
}

func TestAllocateRespectsInUse(t *testing.T) {
	s := testScheduler(t)
	ctx := t.Context()
	// "full" takes all counters: "half" cannot be allocated next to it.
	full, err := s.allocate(ctx, testClaim("u1", exactRequest("r", "c", 1)), &devRef{"n1", "full"})
	if err != nil || full == nil {
		t.Fatalf("allocate full: %v", err)
	}
	s.hold("u1", full)
	if alloc, err := s.allocate(ctx, testClaim("u2", exactRequest("r", "c", 1)), &devRef{"n1", "half"}); err != nil || alloc != nil {
		t.Errorf("half next to full: got %+v, %v; want no allocation", alloc, err)
	}
	// A device in use is not handed out again, a shared one is.
	a, _ := s.allocate(ctx, testClaim("u3", exactRequest("r", "c", 1)), &devRef{"n1", "a"})
	s.hold("u3", a)
	if alloc, _ := s.allocate(ctx, testClaim("u4", exactRequest("r", "c", 1)), &devRef{"n1", "a"}); alloc != nil {
		t.Errorf("device a allocated twice: %+v", alloc)
	}
	sh, _ := s.allocate(ctx, testClaim("u5", exactRequest("r", "c", 1)), &devRef{"n1", "shared"})
	s.hold("u5", sh)
	if alloc, _ := s.allocate(ctx, testClaim("u6", exactRequest("r", "c", 1)), &devRef{"n1", "shared"}); alloc == nil {
		t.Errorf("shared device not allocated a second time")
	}
	// Admin access may take a device in use.
	admin := exactRequest("r", "c", 1)
	admin.Exactly.AdminAccess = ptr.To(true)
	if alloc, err := s.allocate(ctx, testClaim("u7", admin), &devRef{"n1", "a"}); err != nil || alloc == nil {
		t.Errorf("admin access on a device in use: %v", err)
	}
	// firstAvailable falls through to the subrequest that can be met.
	fa := resourceapi.DeviceRequest{Name: "pick", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "none", DeviceClassName: "c", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "x.invalid"`}}}},
		{Name: "any", DeviceClassName: "c", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}
	alloc, err := s.allocate(ctx, testClaim("u8", fa), nil)
	if err != nil || alloc == nil || alloc.Devices.Results[0].Request != "pick/any" {
		t.Errorf("firstAvailable: %+v %v", alloc, err)
	}
}

// cardSlices is a partitionable card as a partitionable driver lists it:
// the whole card first, then its two halves, all on one counter set.
func cardSlices(driver, node string) []*resourceapi.ResourceSlice {
	pool := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	consume := func(q string) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: "card-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(q)}}}}
	}
	return []*resourceapi.ResourceSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "s0"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: pool,
			SharedCounters: []resourceapi.CounterSet{{Name: "card-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("8Gi")}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: pool, Devices: []resourceapi.Device{
			{Name: "card-0-whole", ConsumesCounters: consume("8Gi")},
			{Name: "card-0-half-0", ConsumesCounters: consume("4Gi")},
			{Name: "card-0-half-1", ConsumesCounters: consume("4Gi")},
		}}},
	}
}

// TestAllocateLeavesRoom: claims for any device take a card's halves
// before the whole card the driver lists first, so that a second claim
// still fits; when nothing fits, the reason names the claims that hold
// the devices and the counter they use up.
func TestAllocateLeavesRoom(t *testing.T) {
	s := testScheduler(t)
	s.setSlices(cardSlices("d.example.com", "n1"))
	ctx := t.Context()
	var got []string
	for i, uid := range []string{"first", "second"} {
		alloc, err := s.allocate(ctx, testClaim(uid, exactRequest("r", "c", 1)), nil)
		if err != nil || alloc == nil {
			t.Fatalf("claim %d: %+v, %v; want an allocation", i, alloc, err)
		}
		got = append(got, alloc.Devices.Results[0].Device)
		s.hold(uid, alloc)
	}
	if want := []string{"card-0-half-0", "card-0-half-1"}; !slices.Equal(got, want) {
		t.Errorf("any-device claims got %q, want %q (the halves before the whole card)", got, want)
	}
	third := testClaim("third", exactRequest("r", "c", 1))
	if alloc, err := s.allocate(ctx, third, nil); err != nil || alloc != nil {
		t.Fatalf("third claim: %+v, %v; want no allocation", alloc, err)
	}
	why := s.whyNoFit(ctx, third, nil)
	t.Logf("why:%s", why)
	for _, want := range []string{"first: n1/card-0-half-0", "second: n1/card-0-half-1", "counter", "card-0"} {
		if !strings.Contains(why, want) {
			t.Errorf("the reason lacks %q:%s", want, why)
		}
	}
	if why := s.whyNoFit(ctx, third, &devRef{"n1", "card-0-whole"}); why != "" {
		t.Errorf("a claim pinned to one device gets a reason %q; its message names the device", why)
	}
	// The driver's own order is left alone.
	if s.slices[1].Spec.Devices[0].Name != "card-0-whole" {
		t.Errorf("roomFirst reordered the scheduler's slices: %v", s.slices[1].Spec.Devices)
	}
}

// TestAllocateCurrentView: a claim that finds no room in the slices the
// suite read is tried again on those the API server shows now (a driver
// may publish its pools one after another, or republish), and only then
// gets no allocation; relist is not asked while the first view has room.
func TestAllocateCurrentView(t *testing.T) {
	const driver, node = "d.example.com", "n1"
	s := testScheduler(t)
	s.setSlices(cardSlices(driver, node))
	ctx := t.Context()
	whole, err := s.allocate(ctx, testClaim("u1", exactRequest("r", "c", 1)), &devRef{node, "card-0-whole"})
	if err != nil || whole == nil {
		t.Fatalf("allocate the whole card: %v", err)
	}
	s.hold("u1", whole)

	relisted := 0
	second := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s2"},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node + "-card-1", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "card-1-whole"}}}}
	s.relist = func(context.Context) bool {
		relisted++
		return false
	}
	if alloc, err := s.allocateCurrent(ctx, testClaim("u2", exactRequest("r", "c", 1)), nil); err != nil || alloc != nil {
		t.Fatalf("no room and no new slices: got %+v, %v; want no allocation", alloc, err)
	}
	if relisted != 1 {
		t.Fatalf("relist asked %d times, want 1", relisted)
	}
	s.relist = func(context.Context) bool {
		relisted++
		s.setSlices(append(cardSlices(driver, node), second))
		return true
	}
	alloc, err := s.allocateCurrent(ctx, testClaim("u3", exactRequest("r", "c", 1)), nil)
	if err != nil || alloc == nil || alloc.Devices.Results[0].Device != "card-1-whole" {
		t.Fatalf("the pool published since: got %+v, %v; want card-1-whole", alloc, err)
	}
	s.hold("u3", alloc)
	relisted = 0
	delete(s.inUse, "u1")
	if alloc, err := s.allocateCurrent(ctx, testClaim("u4", exactRequest("r", "c", 1)), nil); err != nil || alloc == nil {
		t.Fatalf("room in the first view: %+v, %v", alloc, err)
	}
	if relisted != 0 {
		t.Errorf("relist asked %d times while the first view had room", relisted)
	}
}
