package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
)

// TestSchedSyntheticShapes checks every shape "drakit bench sched" builds
// itself: its slices pass the API server's and the pool rules, and the
// scheduler's allocator gives a pod's claim a device on the node, and each
// shape is what its name says.
func TestSchedSyntheticShapes(t *testing.T) {
	for i, sh := range schedShapes {
		if sh.synth == nil {
			continue
		}
		t.Run(fmt.Sprintf("%d", i+1), func(t *testing.T) {
			f, err := sh.synth()
			if err != nil {
				t.Fatal(err)
			}
			ss := f.slices("node-0001")
			if err := device.Validate(ss...); err != nil {
				t.Fatalf("%s: %v", sh.name, err)
			}
			st := shapeStats(ss)
			got := allocateOne(t, f, ss)
			switch i + 1 {
			case 7:
				if st.pools != 1 || st.slices != 9 || st.devices != 208 || st.counterSets != 8 {
					t.Errorf("%s: %+v, want 1 pool of 9 slices, 208 devices, 8 counter sets", sh.name, st)
				}
				for _, s := range ss {
					for _, cs := range s.Spec.SharedCounters {
						if len(cs.Counters) != 15 {
							t.Errorf("counter set %s: %d counters, want 15", cs.Name, len(cs.Counters))
						}
					}
					for _, d := range s.Spec.Devices {
						if !strings.Contains(d.Name, "-mig-") {
							continue
						}
						n := len(d.ConsumesCounters[0].Counters)
						if len(d.Attributes) != 13 || len(d.Capacity) != 7 || n < 8 || n > 15 {
							t.Errorf("%s: %d attributes, %d capacities, %d counters consumed; want 13, 7, 8-15", d.Name, len(d.Attributes), len(d.Capacity), n)
						}
					}
				}
				if !strings.HasSuffix(got, "-mig-1g18gb-19-0") {
					t.Errorf("allocated %s, want a 1g.18gb", got)
				}
			case 8, 9, 10, 14:
				want := 1
				if i+1 == 9 {
					want = 8
				}
				if st.devices != 56 || st.counterSets != 0 || st.consumers != 0 || st.pools != want || st.slices != want {
					t.Errorf("%s: %+v, want 56 devices without counters, %d pools of one slice", sh.name, st, want)
				}
				if i+1 != 10 {
					checkNoOverlap(t, ss)
				}
			case 15:
				if st.devices != 16 || st.pools != 8 || st.counterSets != 8 || st.consumers != 16 {
					t.Errorf("%s: %+v, want a pool per GPU: 16 devices on 8 counter sets", sh.name, st)
				}
				if !strings.HasSuffix(got, "-shared") {
					t.Errorf("allocated %s, want a share of a shared GPU", got)
				}
			case 11, 12, 13:
				if st.devices != 48 || st.pools != 8 || st.counterSets != 8 {
					t.Errorf("%s: %+v, want 48 devices in 8 pools with counters", sh.name, st)
				}
			}
			if i+1 == 12 || i+1 == 13 {
				for _, s := range ss {
					for _, cs := range s.Spec.SharedCounters {
						if len(cs.Counters) != 8 {
							t.Errorf("%s: counter set %s has %d counters, want the 8 memory slices", sh.name, cs.Name, len(cs.Counters))
						}
					}
				}
			}
			if i+1 == 13 || i+1 == 10 {
				want := map[int]int{13: 2, 10: 4}[i+1]
				for _, s := range ss {
					for _, d := range s.Spec.Devices {
						if strAttr(d, mig.AttrType) == "mig" && len(d.Attributes) != want {
							t.Errorf("%s: %s has %d attributes, want %d", sh.name, d.Name, len(d.Attributes), want)
						}
					}
				}
			}
		})
	}
}

type sliceStats struct{ pools, slices, devices, counterSets, consumers int }

func shapeStats(ss []*resourceapi.ResourceSlice) sliceStats {
	pools := map[string]bool{}
	var st sliceStats
	for _, s := range ss {
		pools[s.Spec.Pool.Name] = true
		st.slices++
		st.devices += len(s.Spec.Devices)
		st.counterSets += len(s.Spec.SharedCounters)
		for _, d := range s.Spec.Devices {
			if len(d.ConsumesCounters) > 0 {
				st.consumers++
			}
		}
	}
	st.pools = len(pools)
	return st
}

// allocateOne runs the scheduler's allocator for one pod's claim on the
// node and returns the device it got.
func allocateOne(t *testing.T, f *synthFleet, ss []*resourceapi.ResourceSlice) string {
	t.Helper()
	classes := benchClasses{}
	for _, c := range f.classes {
		classes[c.Name] = c
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "uid"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "d", Exactly: ptr.To(f.request)}}}}}
	claim.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	claim.Spec.Devices.Requests[0].Exactly.Count = 1
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, schedFeatures, structured.AllocatedState{AggregatedCapacity: structured.NewConsumedCapacityCollection()},
		classes, ss, cel.NewCache(16, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0001"}}, []*resourceapi.ResourceClaim{claim})
	if err != nil || len(res) != 1 {
		t.Fatalf("allocate: %v (%d results)", err, len(res))
	}
	return res[0].Devices.Results[0].Device
}

// checkNoOverlap fails when two published devices of one GPU cover a
// common memory slice: without counters, the scheduler could give both.
func checkNoOverlap(t *testing.T, ss []*resourceapi.ResourceSlice) {
	t.Helper()
	prod, err := mig.Lookup("H200")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]string{}
	for _, s := range ss {
		for _, d := range s.Spec.Devices {
			gpu, start := strAttr(d, "parentUUID"), intAttr(d, mig.AttrPlacementStart)
			p, err := prod.Profile(strAttr(d, mig.AttrProfile))
			if gpu == "" || start < 0 || err != nil {
				t.Fatalf("%s: no parentUUID, placementStart or known profile (%v)", d.Name, err)
			}
			for m := start; m < start+int64(p.MemorySlices); m++ {
				k := fmt.Sprintf("%s/%d", gpu, m)
				if other, ok := used[k]; ok {
					t.Errorf("%s and %s both cover memory slice %d of %s", other, d.Name, m, gpu)
				}
				used[k] = d.Name
			}
		}
	}
}
