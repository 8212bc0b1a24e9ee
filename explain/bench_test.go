package explain_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/mig"
)

const migDriver = "gpu.drakit.io"

// migFleet is nodes nodes of 8 H100s with dynamic MIG devices (the mig
// package's counter model), one 1g.10gb instance allocated on every GPU
// (one claim per node), and a claim for a 7g.80gb instance, which then
// fits nowhere: every node's explanation runs the allocator on the full
// problem and on its reductions and reads the counters. With uuids, every
// GPU's devices carry the GPU's UUID, so no two nodes' devices look the
// same to CEL.
func migFleet(tb testing.TB, nodes int, uuids bool) (*explain.Snapshot, *resourceapi.ResourceClaim) {
	tb.Helper()
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		tb.Fatal(err)
	}
	modelOf := func(n int) mig.CounterModel {
		gpus := make([]mig.GPU, 8)
		for i := range gpus {
			gpus[i] = mig.GPU{Index: i, Product: p}
			if uuids {
				gpus[i].UUID = fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", n, i)
			}
		}
		model, err := mig.NewCounterModel(gpus)
		if err != nil {
			tb.Fatal(err)
		}
		return model
	}
	model := modelOf(0)
	snap := &explain.Snapshot{Classes: []*resourceapi.DeviceClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "mig.drakit.io"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].%s == "mig"`, migDriver, migDriver, mig.AttrType)}}}},
	}}}
	for n := range nodes {
		name := fmt.Sprintf("gpu-node-%04d", n)
		snap.Nodes = append(snap.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if uuids {
			model = modelOf(n)
		}
		snap.Slices = append(snap.Slices, model.Slices(migDriver, name, name, 1)...)
		held := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "small-" + name, Namespace: "default", UID: types.UID("uid-" + name)},
			Status: resourceapi.ResourceClaimStatus{
				Allocation:  &resourceapi.AllocationResult{},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "small-" + name, UID: types.UID("pod-" + name)}},
			},
		}
		for g := range 8 {
			held.Status.Allocation.Devices.Results = append(held.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: "mig", Driver: migDriver, Pool: name, Device: mig.DeviceRef{GPU: g, Profile: "1g.10gb", Start: 0}.String(),
			})
		}
		snap.Claims = append(snap.Claims, held)
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "default", UID: "uid-big"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "mig",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "mig.drakit.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes[%q].%s == "7g.80gb"`, migDriver, mig.AttrProfile)}}},
			},
		}}}},
	}
	return snap, claim
}

// allocateEverywhere is the baseline: what the scheduler's allocator does
// for the claim on every node (one Allocate per node), nothing else.
func allocateEverywhere(ctx context.Context, tb testing.TB, snap *explain.Snapshot, claim *resourceapi.ResourceClaim) int {
	a := fullAllocator(ctx, tb, snap)
	fit := 0
	for _, n := range snap.Nodes {
		res, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim})
		if err != nil {
			tb.Fatal(err)
		}
		fit += len(res)
	}
	return fit
}

// fullAllocator is the scheduler's allocator on the whole snapshot, with
// the devices of the snapshot's claims allocated.
func fullAllocator(ctx context.Context, tb testing.TB, snap *explain.Snapshot) structured.Allocator {
	tb.Helper()
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, c := range snap.Claims {
		for _, r := range c.Status.Allocation.Devices.Results {
			st.AllocatedDevices.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	a, err := structured.NewAllocator(ctx, explain.DefaultFeatures, st, classes(snap.Classes), snap.Slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

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

// BenchmarkExplainMIGFleet explains a 7g.80gb claim against 1,000 nodes
// of 8 H100s with dynamic MIG devices, next to the baseline of running
// the allocator once per node. With -v it prints the figure: median and
// spread of both over the repetitions, and their ratio. "identical": the
// nodes' devices look the same to CEL (no UUIDs), so they share CEL
// results; "uuids": every GPU has its UUID attribute, so none do.
func BenchmarkExplainMIGFleet(b *testing.B) {
	for _, uuids := range []bool{false, true} {
		name := map[bool]string{false: "identical", true: "uuids"}[uuids]
		b.Run(name, func(b *testing.B) { benchmarkFleet(b, uuids) })
	}
}

func benchmarkFleet(b *testing.B, uuids bool) {
	ctx := context.Background()
	snap, claim := migFleet(b, 1000, uuids)
	devices := 0
	for _, s := range snap.Slices {
		devices += len(s.Spec.Devices)
	}
	var explainT, explainCPU, baseT []time.Duration
	for b.Loop() {
		start := time.Now()
		if fit := allocateEverywhere(ctx, b, snap, claim); fit != 0 {
			b.Fatalf("the claim fits on %d nodes, want none", fit)
		}
		baseT = append(baseT, time.Since(start))
		start, cpu0 := time.Now(), cpuTime()
		rep, err := explain.Claim(ctx, snap, claim)
		if err != nil {
			b.Fatal(err)
		}
		explainT = append(explainT, time.Since(start))
		explainCPU = append(explainCPU, cpuTime()-cpu0)
		if rep.Fits || len(rep.Nodes) != 1000 || rep.Nodes[0].Requests[0].Reasons[0].Kind != explain.CounterExhausted {
			b.Fatalf("unexpected report: fits=%v nodes=%d first %+v", rep.Fits, len(rep.Nodes), rep.Nodes[0])
		}
	}
	me, se := medianSpread(explainT)
	mb, sb := medianSpread(baseT)
	b.ReportMetric(me.Seconds(), "explain-s")
	b.ReportMetric(mb.Seconds(), "allocator-s")
	b.ReportMetric(me.Seconds()/mb.Seconds(), "ratio")
	mc, sc := medianSpread(explainCPU)
	b.ReportMetric(mc.Seconds(), "explain-cpu-s")
	b.Logf("1000 nodes x 8 H100 (dynamic MIG), %d devices, %d slices, %d runs, GOMAXPROCS %d: explain %v wall (spread %v), %v CPU (spread %v); allocator alone on every node %v (spread %v); ratio explain/allocator %.2f",
		devices, len(snap.Slices), len(explainT), runtime.GOMAXPROCS(0), me.Round(time.Millisecond), se.Round(time.Millisecond), mc.Round(time.Millisecond), sc.Round(time.Millisecond),
		mb.Round(time.Millisecond), sb.Round(time.Millisecond), me.Seconds()/mb.Seconds())
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianSpread(ds []time.Duration) (median, spread time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[len(s)-1] - s[0]
}
