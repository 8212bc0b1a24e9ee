package main

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/device"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// BenchmarkSchedFilterShapes is the per-node half of "drakit bench
// sched" without a cluster: the scheduler's allocator
// (k8s.io/dynamic-resource-allocation/structured, kube-scheduler 1.37's
// features) driven as its DRA plugin drives it for one pod (NewAllocator
// over every slice of 100 nodes, then Allocate on each node, for a claim
// of one device), on empty nodes of each slice shape. Each iteration runs
// the shape and upstream's simple shape (10 devices, one attribute) one
// after the other; it reports the process CPU time (the garbage
// collections during the pod included) per node of the shape, and its ratio to the simple shape's in
// the same iterations ("x-simple"). The rows split a dynamic-MIG node's
// cost: the device count alone (simple, 112 devices), the counters
// ("no counters" is not a valid MIG model, only the bound without them),
// the pool per GPU (one pool), the profiles advertised; "one counter per
// device" (not a valid model either) and "4 attributes" (type, profile,
// parentUUID, migMode) say whether the number of counters a device
// consumes, or its attributes, matter.
//
//	go test ./cmd/drakit -run '^$' -bench SchedFilterShapes -count 3
func BenchmarkSchedFilterShapes(b *testing.B) {
	proto, profiles, err := fleetInventory("dgx-h200", "proto", true)
	if err != nil {
		b.Fatal(err)
	}
	only1g, _, err := fleetInventory("dgx-h200", "proto", true, "1g.18gb")
	if err != nil {
		b.Fatal(err)
	}
	whole, _, err := fleetInventory("dgx-h200", "proto", false)
	if err != nil {
		b.Fatal(err)
	}
	classes := benchClasses{"simple": &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "simple"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", simpleDriver)}}}}}}
	for _, c := range nvdriver.DeviceClasses(profiles) {
		classes[c.Name] = c
	}
	mig := nvdriver.ProfileClass(profiles[0])
	simple := benchFleet(b, simpleSlices(10), resourceapi.ExactDeviceRequest{DeviceClassName: "simple"}, classes)
	for _, sh := range []struct {
		name   string
		slices func(node string) []*resourceapi.ResourceSlice
		class  string
	}{
		{"simple-10-devices", simpleSlices(10), "simple"},
		{"simple-112-devices", simpleSlices(112), "simple"},
		{"nvidia-whole-GPU", driverSlices(whole, nil), nvdriver.ClassGPU},
		{"nvidia-1g-MIG-shipped", driverSlices(proto, nil), mig},
		{"nvidia-1g-MIG-only-1g-advertised", driverSlices(only1g, nil), mig},
		{"nvidia-1g-MIG-one-pool", driverSlices(proto, onePoolSlices), mig},
		{"nvidia-1g-MIG-no-counters-bound", driverSlices(proto, noCounterSlices), mig},
		{"nvidia-1g-MIG-one-counter-per-device", driverSlices(proto, oneCounterSlices), mig},
		{"nvidia-1g-MIG-4-attributes", driverSlices(proto, keepAttributes("type", "profile", "parentUUID", "migMode")), mig},
	} {
		b.Run(sh.name, func(b *testing.B) {
			simple.versus(b, benchFleet(b, sh.slices, resourceapi.ExactDeviceRequest{DeviceClassName: sh.class}, classes))
		})
	}
	// The shapes "drakit bench sched" builds itself (NVIDIA's DynamicMIG,
	// the candidate publications), by their number there.
	for i, sh := range schedShapes {
		if sh.synth == nil {
			continue
		}
		b.Run(fmt.Sprintf("shape-%d", i+1), func(b *testing.B) {
			f, err := sh.synth()
			if err != nil {
				b.Fatal(err)
			}
			own := benchClasses{}
			for _, c := range f.classes {
				own[c.Name] = c
			}
			simple.versus(b, benchFleet(b, f.slices, f.request, own))
		})
	}
}

// versus runs f and s (upstream's simple shape) one after the other in
// each iteration and reports f's CPU per node and its ratio to s's.
func (s *benchFleetState) versus(b *testing.B, f *benchFleetState) {
	var cpu, base time.Duration
	for b.Loop() {
		base += s.pod(b)
		cpu += f.pod(b)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*len(f.nodes)), "cpu-ns/node")
	b.ReportMetric(float64(cpu)/float64(base), "x-simple")
}

// benchFleetNodes is the fleet size of BenchmarkSchedFilterShapes.
const benchFleetNodes = 100

type benchFleetState struct {
	slices []*resourceapi.ResourceSlice
	nodes  []*v1.Node
	claim  *resourceapi.ResourceClaim
	cache  *cel.Cache
	class  benchClasses
}

func benchFleet(b *testing.B, perNode func(node string) []*resourceapi.ResourceSlice, req resourceapi.ExactDeviceRequest, classes benchClasses) *benchFleetState {
	f := &benchFleetState{cache: cel.NewCache(64, cel.Features{EnableConsumableCapacity: true}), class: classes}
	for i := range benchFleetNodes {
		name := fmt.Sprintf("node-%04d", i)
		f.nodes = append(f.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		f.slices = append(f.slices, perNode(name)...)
	}
	f.claim = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "uid"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}}}}}
	req.AllocationMode, req.Count = resourceapi.DeviceAllocationModeExactCount, 1
	f.pod(b) // compile the CEL programs once
	return f
}

// schedFeatures are the allocator features kube-scheduler 1.37 enables by
// default (they pick the implementation it runs, "incubating").
var schedFeatures = structured.Features{AdminAccess: true, PartitionableDevices: true, PrioritizedList: true,
	DeviceTaints: true, DeviceBindingAndStatus: true, ConsumableCapacity: true}

// pod runs one pod's allocator work over the fleet and returns the
// process CPU time it took: the garbage of the pod before it is collected
// first, outside the measurement; the collections its own garbage
// triggers while it runs count.
func (f *benchFleetState) pod(b *testing.B) time.Duration {
	ctx := context.Background()
	runtime.GC()
	t0 := selfCPU(b)
	st := structured.AllocatedState{AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	a, err := structured.NewAllocator(ctx, schedFeatures, st, f.class, f.slices, f.cache)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range f.nodes {
		res, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{f.claim})
		if err != nil || len(res) != 1 {
			b.Fatalf("node %s: %v (%d results)", n.Name, err, len(res))
		}
	}
	return selfCPU(b) - t0
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// simpleSlices is upstream's scheduler_perf DRA shape with n devices.
func simpleSlices(n int) func(node string) []*resourceapi.ResourceSlice {
	return func(node string) []*resourceapi.ResourceSlice {
		p := device.Pool{Name: node}
		for d := range n {
			p.Devices = append(p.Devices, device.New(fmt.Sprintf("dev-%d", d)).StringAttribute("dra.example.com/slice", "big"))
		}
		return (&device.Inventory{Driver: simpleDriver, Pools: []device.Pool{p}}).ResourceSlices(node)
	}
}

// onePoolSlices merges a node's pools into one: the counter sets in one
// slice, the devices 64 per slice (the shape before the pool per GPU).
func onePoolSlices(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	node := *ss[0].Spec.NodeName
	counters := ss[0].DeepCopy()
	counters.Spec.SharedCounters = nil
	var devs []resourceapi.Device
	var template *resourceapi.ResourceSlice
	for _, s := range ss {
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, s.Spec.SharedCounters...)
		devs = append(devs, s.Spec.Devices...)
		if len(s.Spec.Devices) > 0 {
			template = s
		}
	}
	counters.Name, counters.Spec.Pool.Name = node+"-counters", node
	out := []*resourceapi.ResourceSlice{counters}
	for i := 0; i < len(devs); i += resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
		d := template.DeepCopy()
		d.Name, d.Spec.Pool.Name = fmt.Sprintf("%s-devices-%d", node, i), node
		d.Spec.Devices = devs[i:min(i+resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures, len(devs))]
		out = append(out, d)
	}
	for _, s := range out {
		s.Spec.Pool.ResourceSliceCount = int64(len(out))
	}
	return out
}

// noCounterSlices drops the counter sets and every device's counter
// consumption: not a valid MIG model (placements may then overlap), only
// what the same devices cost without counters.
func noCounterSlices(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, s := range ss {
		if len(s.Spec.SharedCounters) > 0 {
			continue
		}
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].ConsumesCounters = nil
		}
		s.Spec.Pool.ResourceSliceCount = 1
		out = append(out, s)
	}
	return out
}

// oneCounterSlices leaves each device's counter consumption with one
// counter (the first by name): not a valid MIG model.
func oneCounterSlices(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	for _, s := range ss {
		for i := range s.Spec.Devices {
			for _, cc := range s.Spec.Devices[i].ConsumesCounters {
				names := slices.Sorted(maps.Keys(cc.Counters))
				for _, n := range names[1:] {
					delete(cc.Counters, n)
				}
			}
		}
	}
	return ss
}

type benchClasses map[string]*resourceapi.DeviceClass

func (l benchClasses) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l benchClasses) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}
