package driver_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// densityArrivals are the small-model pods of the density benchmark:
// n pods of 4, 8, 12 or 20 GiB, drawn with a fixed seed so that every
// mode gets the same arrivals in the same order.
func densityArrivals(n int) []int64 {
	r := rand.New(rand.NewPCG(49, 1))
	sizes := []int64{4, 8, 12, 20}
	out := make([]int64, n)
	for i := range out {
		out[i] = sizes[r.IntN(len(sizes))]
	}
	return out
}

// densityNode is one simulated DGX H200 published by the reference
// driver with opts, and the allocator's view of what is allocated on it.
type densityNode struct {
	slices []*resourceapi.ResourceSlice
	state  structured.AllocatedState
	n      int
}

func newDensityNode(b *testing.B, migGPUs []int, opts ...nvdriver.Option) *densityNode {
	b.Helper()
	dir := b.TempDir()
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: migGPUs}))
	if err != nil {
		b.Fatal(err)
	}
	d, err := nvdriver.New(sim, "node-1",
		append([]nvdriver.Option{nvdriver.WithStateDir(filepath.Join(dir, "state"))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	inv, err := d.Inventory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return &densityNode{slices: inv.ResourceSlices("node-1"), state: structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection()}}
}

// place allocates req with the scheduler's allocator against what is
// allocated; false when it does not fit.
func (d *densityNode) place(b *testing.B, req resourceapi.DeviceRequest) bool {
	b.Helper()
	ctx := context.Background()
	features := structured.Features{PartitionableDevices: true, PrioritizedList: true,
		DeviceTaints:       true,
		ConsumableCapacity: true}
	var cls classList = nvdriver.DeviceClasses(mig.DefaultProfiles(mustH200(b)))
	al, err := structured.NewAllocator(ctx, features, d.state, cls, d.slices,
		cel.NewCache(64, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		b.Fatal(err)
	}
	d.n++
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("c", d.n),
		Namespace: "default",
		UID:       types.UID(fmt.Sprint("uid-", d.n))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{req}}}}
	res, err := al.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		[]*resourceapi.ResourceClaim{c})
	if err != nil {
		b.Fatal(err)
	}
	if len(res) == 0 {
		return false
	}
	r := res[0].Devices.Results[0]
	id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
	if r.ShareID == nil {
		d.state.AllocatedDevices.Insert(id)
	} else {
		d.state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		d.state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id,
			r.ConsumedCapacity))
	}
	return true
}

func mustH200(b *testing.B) *mig.Product {
	p, err := mig.Lookup("H200")
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkFleetDensity places one fleet of small-model pods (4, 8, 12
// and 20 GiB, the same arrivals in each mode) on one simulated DGX H200
// with the scheduler's own allocator and the reference driver's
// publication, three ways, and reports the pods placed and the GiB they
// asked:
//
//   - shares: every GPU shared (-shared-gpus=all); a pod asks its memory
//     and a compute share in proportion (ceil(GiB x 100 / 141) percent);
//   - dynamic MIG: every GPU a dynamic MIG GPU (placements publication);
//     a pod asks for the smallest advertised profile with its memory,
//     then the next (firstAvailable), as a user asking for "at least its
//     memory" would;
//   - whole GPUs: eight full GPUs, a GPU per pod.
//
// Placing is deterministic: the numbers are counts, not times.
func BenchmarkFleetDensity(b *testing.B) {
	arrivals := densityArrivals(200)
	prod := mustH200(b)
	// Per size, the profile classes that hold it, smallest first.
	sizes := map[int64][]string{}
	for _, gib := range []int64{4, 8, 12, 20} {
		var classes []string
		for _, name := range mig.DefaultProfiles(prod) {
			p, _ := prod.Profile(name)
			if p.MemoryMiB >= gib*1024 {
				classes = append(classes, nvdriver.ProfileClass(name))
			}
		}
		sizes[gib] = classes
	}
	type result struct {
		name        string
		pods        int
		gib         int64
		firstRefuse int
	}
	var results []result
	for range b.N {
		results = results[:0]
		modes := []struct {
			name string
			node *densityNode
			req  func(gib int64) resourceapi.DeviceRequest
		}{
			{"shares (MPS, -shared-gpus=all)", newDensityNode(b, []int{},
				nvdriver.WithSharedGPUs("all")),
				func(gib int64) resourceapi.DeviceRequest {
					compute := (gib*100 + 140) / 141
					req := exactOne(nvdriver.ClassShared)
					req.Exactly.Capacity = &resourceapi.CapacityRequirements{
						Requests: map[resourceapi.QualifiedName]resource.Quantity{
							mig.CapMemory: *resource.NewQuantity(gib<<30, resource.BinarySI),
							nvdriver.CapCompute: *resource.NewQuantity(compute,
								resource.DecimalSI)}}
					return req
				}},
			{"dynamic MIG (smallest profile that fits)", newDensityNode(b, nil, dynamicMIG(nil)),
				func(gib int64) resourceapi.DeviceRequest {
					var subs []resourceapi.DeviceSubRequest
					for i, c := range sizes[gib] {
						subs = append(subs, resourceapi.DeviceSubRequest{Name: fmt.Sprint("p", i),
							DeviceClassName: c,
							AllocationMode:  resourceapi.DeviceAllocationModeExactCount, Count: 1})
					}
					return resourceapi.DeviceRequest{Name: "r", FirstAvailable: subs}
				}},
			{"whole GPUs", newDensityNode(b, []int{}),
				func(int64) resourceapi.DeviceRequest { return exactOne(nvdriver.ClassGPU) }},
		}
		for _, m := range modes {
			r := result{name: m.name, firstRefuse: -1}
			for i, gib := range arrivals {
				if m.node.place(b, m.req(gib)) {
					r.pods++
					r.gib += gib
				} else if r.firstRefuse < 0 {
					r.firstRefuse = i
				}
			}
			results = append(results, r)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "mode\tpods placed of %d\tGiB placed\tfirst pod refused\tvs dynamic MIG\n",
		len(arrivals))
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t#%d\t%.2fx\n", r.name, r.pods, r.gib, r.firstRefuse+1,
			float64(r.pods)/float64(results[1].pods))
	}
	tw.Flush()
	b.ReportMetric(float64(results[0].pods), "pods/shares")
	b.ReportMetric(float64(results[1].pods), "pods/mig")
	b.ReportMetric(float64(results[2].pods), "pods/whole")
}

// exactOne is a request for one device of class.
func exactOne(class string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, Count: 1,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount}}
}
