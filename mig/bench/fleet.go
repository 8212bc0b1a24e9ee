package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/alloc"
	"github.com/drakit/drakit/internal/allocstate"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/counter"
)

// FleetDriver is the driver name of the fleet benchmark's slices.
const FleetDriver = "gpu.drakit.io"

// FleetModel is one way for a dynamic-MIG driver to publish a node's GPUs
// and for claims to select from them: the levers of the fleet benchmark.
type FleetModel struct {
	// Name labels the model's rows.
	Name string
	// Whole publishes whole GPUs only (8 devices, no counters, no MIG):
	// the baseline of what a node of GPUs costs the scheduler.
	Whole bool
	// Profiles is the advertised profile set per product (GPU.Profiles
	// and mig.WithProfiles); nil advertises all.
	Profiles func(*mig.Product) []string
	// ClassPerProfile makes a claim name the profile's DeviceClass, whose
	// selector tests the profile, instead of the MIG class plus a request
	// selector: one CEL program per device instead of two.
	ClassPerProfile bool
	// PoolPerGPU publishes one pool per GPU instead of one per node.
	PoolPerGPU bool
	// FitOnly publishes mig.Preference(..., mig.WithFitOnly()): only the
	// devices the scheduler can still allocate.
	FitOnly bool
	// Lean drops the attributes a selector can derive from others
	// (productName, profileID, placementSize).
	Lean bool
	// ExtraAttributes adds that many string attributes to every device,
	// as a driver does that publishes GPU facts (architecture, driver
	// version, PCI root, ...) on its MIG devices too.
	ExtraAttributes int
	// Publish, when set, replaces the model: it returns what a driver
	// publishes for node name, whose GPUs (the product, indices 0 to
	// len(st)-1) run st's in-use instances, e.g. a real driver's own
	// inventory (the reference driver's row of "drakit mig bench
	// -fleet"). Its devices must be named as in the counter model
	// (mig.ParseDeviceName) and carry the type and profile attributes in
	// the driver's own domain; the inventory is published under
	// FleetDriver so that the benchmark's classes select it. The other
	// levers but ClassPerProfile are ignored.
	Publish func(p *mig.Product, name string, st []mig.FleetGPU) (*device.Inventory, error)
}

// NoMediaExtensions advertises every profile but the "+me" ones.
func NoMediaExtensions(p *mig.Product) []string {
	var out []string
	for _, pr := range p.Profiles {
		if !pr.MediaExtensions {
			out = append(out, pr.Name)
		}
	}
	return out
}

// Today is the counter model as the driver published it before issue 20:
// every profile, one pool per node, the MIG class plus a request selector.
var Today = FleetModel{Name: "today: all profiles"}

// Chosen is the model and claim pattern the benchmark chose (see the
// package mig doc): mig.DefaultProfiles, fit-only publication, a
// DeviceClass per profile, one pool per node (the planner's order).
var Chosen = FleetModel{Name: "chosen", Profiles: mig.DefaultProfiles, ClassPerProfile: true, FitOnly: true}

// FleetModels are the rows of the default fleet benchmark: the whole-GPU
// baseline, today's model, each lever alone, and the chosen combination.
func FleetModels() []FleetModel {
	return []FleetModel{
		{Name: "whole GPUs only", Whole: true},
		Today,
		{Name: "no +me profiles", Profiles: NoMediaExtensions},
		{Name: "DefaultProfiles (five)", Profiles: mig.DefaultProfiles},
		{Name: "class per profile", ClassPerProfile: true},
		{Name: "pool per GPU", PoolPerGPU: true},
		{Name: "lean attributes (5)", Lean: true},
		{Name: "8 more attributes (16)", ExtraAttributes: 8},
		{Name: "fit-only", FitOnly: true},
		Chosen,
	}
}

// Fill is how busy the benchmark's nodes are.
type Fill string

// Fills of the fleet benchmark. Every GPU is filled independently with
// in-use instances drawn from the request mix (Mix) at random placements.
const (
	// Empty nodes have no instances.
	Empty Fill = "empty"
	// Half fills each GPU to 3 or 4 of its 7 compute slices.
	Half Fill = "half"
	// NearlyFull fills each GPU until no instance of the mix fits: a
	// GPU keeps at most a memory slice no profile can use, and a 1g
	// claim fits on no node, so the allocator looks at every device
	// (the cost of a pod that waits and is retried).
	NearlyFull Fill = "nearly full"
)

// FleetConfig sizes a fleet benchmark run.
type FleetConfig struct {
	// Product is the GPU product of every node.
	Product string
	// GPUs is the number of GPUs per node.
	GPUs int
	// Nodes are the fleet sizes: each is one scheduling cycle over that
	// many nodes per pod.
	Nodes []int
	// States is the number of distinct random node states per fill;
	// node i of a fleet is in state i mod States (its own slice objects
	// and node name, sharing the state's device lists). Sharing flatters
	// the largest fleets a little: with 1,000 distinct states instead of
	// 100, 1,000 nearly full nodes cost 8% (today's model) and 10% (the
	// chosen one) more per pod, the ratio between them stays.
	States int
	// Repeats is the number of pods timed per row; the table prints
	// the mean and the spread (standard deviation) over them.
	Repeats int
	// Seed makes the node states; one seed always gives the same states.
	Seed int64
	// Fills are the node fills of the one-1g-claim table.
	Fills []Fill
	// Models are the rows; the one named like Today is the ratio base.
	Models []FleetModel
	// ShapeModels are the models of the claim-shape table.
	ShapeModels []FleetModel
	// Ks are the device counts of the "k 1g devices on one GPU" shapes.
	Ks []int
	// ShapeNodes is the number of nodes timed per claim-shape row.
	ShapeNodes int
	// Limit bounds one node's Allocate in the claim-shape table, as the
	// scheduler's filter timeout (10 s by default) does.
	Limit time.Duration
}

// FleetFull is the configuration of "drakit mig bench -fleet": 10, 100
// and 1,000 nodes of 8 H100s (a few minutes on two cores).
func FleetFull() FleetConfig {
	return FleetConfig{
		Product: "H100-80GB", GPUs: 8, Nodes: []int{10, 100, 1000}, States: 100, Repeats: 3, Seed: 1,
		Fills: []Fill{Empty, Half, NearlyFull}, Models: FleetModels(),
		ShapeModels: []FleetModel{Today, {Name: "pool per GPU", PoolPerGPU: true}, Chosen},
		Ks:          []int{2, 4, 6, 7, 8}, ShapeNodes: 3, Limit: 3 * time.Second,
	}
}

// FleetSmall is a configuration small enough for a test (seconds).
func FleetSmall() FleetConfig {
	return FleetConfig{
		Product: "H100-80GB", GPUs: 8, Nodes: []int{4}, States: 2, Repeats: 2, Seed: 1,
		Fills: []Fill{Empty, NearlyFull}, Models: []FleetModel{{Name: "whole GPUs only", Whole: true}, Today, Chosen},
		ShapeModels: []FleetModel{Today, Chosen}, Ks: []int{3}, ShapeNodes: 1, Limit: time.Second,
	}
}

// FleetRow is one row of the one-1g-claim table.
type FleetRow struct {
	// Model is the FleetModel's name; Fill the nodes' fill.
	Model string
	Fill  Fill
	// Devices is the mean number of devices published per node.
	Devices float64
	// SliceKiB is the Go heap the node's ResourceSlice objects take, as
	// the scheduler's informer holds them, per node.
	SliceKiB float64
	// NodeP50 and NodeP99 are the CPU time of one node's Allocate.
	NodeP50, NodeP99 time.Duration
	// Pod is, per fleet size, the CPU time of one pod's scheduling
	// cycle in the allocator (NewAllocator and Allocate on every node,
	// garbage collection included): mean and standard deviation.
	Pod, PodSD []time.Duration
	// Fits is the number of nodes of the largest fleet the claim fits on.
	Fits int
	// PickKept is the share of those nodes where the model picked the
	// same device as Today (the planner's choice), -1 when not compared.
	PickKept float64
}

// ShapeRow is one row of the claim-shape table.
type ShapeRow struct {
	// Model is the FleetModel's name, Shape the claim in words, Fill
	// the nodes' state in words.
	Model, Shape string
	Fill         string
	// P50 and Max are the CPU time of one node's Allocate (the limit
	// when it timed out).
	P50, Max time.Duration
	// TimedOut counts nodes whose Allocate hit the limit.
	TimedOut, Nodes int
	// Fits counts nodes where the claim was allocated.
	Fits int
}

// FleetResult is what Fleet measured.
type FleetResult struct {
	// Config is the configuration that ran.
	Config FleetConfig
	// StateProfiles are the profiles the node states are drawn from:
	// those of the request mix that every model advertises, so that
	// every model sees the same nodes.
	StateProfiles []string
	// Rows are the one-1g-claim rows, by fill, then model.
	Rows []FleetRow
	// Shapes are the claim-shape rows, by model, then k.
	Shapes []ShapeRow
}

// Fleet runs the fleet benchmark of issue 20 and writes its tables to w:
// the scheduler's cost per pod for a one-1g claim on fleets of the given
// sizes, per model and fill, and the cost of multi-device claim shapes per
// node. The allocator is the real structured allocator with the features
// kube-scheduler 1.37 enables, driven as its DRA plugin drives it: one
// NewAllocator per pod over every node's slices (PreFilter), Allocate per
// node (Filter), one CEL cache for the whole run.
func Fleet(ctx context.Context, cfg FleetConfig, w io.Writer) (*FleetResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p, err := mig.Lookup(cfg.Product)
	if err != nil {
		return nil, fmt.Errorf("fleet benchmark: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := &fleetBench{cfg: cfg, p: p, cache: cel.NewCache(1024, cel.Features{EnableConsumableCapacity: true})}
	b.classes = newClassLister(p)
	res := &FleetResult{Config: cfg, StateProfiles: commonProfiles(p, cfg.Models)}
	maxN := slices.Max(cfg.Nodes)
	for _, fill := range cfg.Fills {
		states := makeStates(rand.New(rand.NewSource(cfg.Seed)), p, cfg.GPUs, fill, cfg.States, res.StateProfiles)
		var todayPicks []string
		for _, m := range cfg.Models {
			row, picks, err := b.claimRow(ctx, m, fill, states, maxN)
			if err != nil {
				return nil, fmt.Errorf("fleet benchmark: %s, %s: %w", m.Name, fill, err)
			}
			if m.Name == Today.Name {
				todayPicks = picks
			}
			row.PickKept = -1
			if !m.Whole && todayPicks != nil && row.Fits > 0 {
				same := 0
				for i := range picks {
					if picks[i] != "" && picks[i] == todayPicks[i] {
						same++
					}
				}
				row.PickKept = float64(same) / float64(row.Fits)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	for _, m := range cfg.ShapeModels {
		for _, k := range cfg.Ks {
			for _, one := range []bool{false, true} {
				row, err := b.shapeRow(ctx, m, k, one)
				if err != nil {
					return nil, fmt.Errorf("fleet benchmark: %s, %d devices: %w", m.Name, k, err)
				}
				res.Shapes = append(res.Shapes, row)
			}
		}
	}
	res.print(w)
	return res, nil
}

func (c FleetConfig) check() error {
	switch {
	case c.GPUs < 1 || c.GPUs > 64:
		return fmt.Errorf("fleet benchmark: %d GPUs per node, want 1 to 64", c.GPUs)
	case len(c.Nodes) == 0 || slices.Min(c.Nodes) < 1:
		return fmt.Errorf("fleet benchmark: fleet sizes %v, want at least one, all positive", c.Nodes)
	case c.States < 1 || c.Repeats < 1 || c.ShapeNodes < 1:
		return fmt.Errorf("fleet benchmark: states %d, repeats %d, shape nodes %d: each must be positive", c.States, c.Repeats, c.ShapeNodes)
	case c.Limit <= 0:
		return fmt.Errorf("fleet benchmark: limit %s must be positive", c.Limit)
	}
	return nil
}

type fleetBench struct {
	cfg     FleetConfig
	p       *mig.Product
	cache   *cel.Cache
	classes classLister
}

// node is one node's published slices and held devices.
type node struct {
	obj     *v1.Node
	slices  []*resourceapi.ResourceSlice
	held    []structured.DeviceID
	devices int
}

// claimRow measures the one-1g claim on fleets of every size.
func (b *fleetBench) claimRow(ctx context.Context, m FleetModel, fill Fill, states [][]mig.FleetGPU, maxN int) (FleetRow, []string, error) {
	row := FleetRow{Model: m.Name, Fill: fill}
	base := make([]node, len(states))
	for i, st := range states {
		n, err := m.publish(b.p, fmt.Sprintf("state-%03d", i), st)
		if err != nil {
			return row, nil, err
		}
		base[i] = n
		row.Devices += float64(n.devices)
	}
	row.Devices /= float64(len(base))
	row.SliceKiB = heapKiB(base)
	claim := m.claim(b.p, 1, true)
	var picks []string
	var nodeTimes []time.Duration
	for _, n := range b.cfg.Nodes {
		fleet := expand(base, n)
		var all []*resourceapi.ResourceSlice
		state := allocstate.New()
		for _, nd := range fleet {
			all = append(all, nd.slices...)
			state.AllocatedDevices.Insert(nd.held...)
		}
		// Warm the CEL cache as a running scheduler has it.
		if _, _, err := b.pod(ctx, state, all, fleet[:1], claim, nil); err != nil {
			return row, nil, err
		}
		var pods []time.Duration
		for r := 0; r < b.cfg.Repeats; r++ {
			var times *[]time.Duration
			if n == maxN {
				times = &nodeTimes
			}
			cpu, got, err := b.pod(ctx, state, all, fleet, claim, times)
			if err != nil {
				return row, nil, err
			}
			pods = append(pods, cpu)
			if n == maxN && r == 0 {
				picks = got
				for _, g := range got {
					if g != "" {
						row.Fits++
					}
				}
			}
		}
		mean, sd := meanSD(pods)
		row.Pod = append(row.Pod, mean)
		row.PodSD = append(row.PodSD, sd)
	}
	row.NodeP50, row.NodeP99 = quantile(nodeTimes, 0.50), quantile(nodeTimes, 0.99)
	return row, picks, nil
}

// pod runs one pod's allocator work over the fleet: NewAllocator over all
// slices, then Allocate on every node. It returns the process CPU time
// taken and, per node, the device picked ("" where the claim does not
// fit); times, when not nil, gets each node's Allocate CPU time.
func (b *fleetBench) pod(ctx context.Context, state structured.AllocatedState, all []*resourceapi.ResourceSlice, fleet []node, claim *resourceapi.ResourceClaim, times *[]time.Duration) (time.Duration, []string, error) {
	runtime.GC()
	picks := make([]string, len(fleet))
	start := processCPU()
	a, err := structured.NewAllocator(ctx, alloc.Features, state, b.classes, all, b.cache)
	if err != nil {
		return 0, nil, fmt.Errorf("create allocator: %w", err)
	}
	for i, n := range fleet {
		t0 := threadCPU()
		res, err := a.Allocate(ctx, n.obj, []*resourceapi.ResourceClaim{claim})
		if times != nil {
			*times = append(*times, threadCPU()-t0)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("allocate on %s: %w", n.obj.Name, err)
		}
		if len(res) > 0 && len(res[0].Devices.Results) > 0 {
			picks[i] = res[0].Devices.Results[0].Device
		}
	}
	return processCPU() - start, picks, nil
}

// shapeRow measures a claim for k 1g devices on one GPU on ShapeNodes
// nodes whose every GPU has k-1 free 1g placements (so every GPU is one
// short and the claim fits nowhere); k beyond a GPU's 1g count runs on
// empty nodes, where it cannot fit either.
func (b *fleetBench) shapeRow(ctx context.Context, m FleetModel, k int, oneRequest bool) (ShapeRow, error) {
	shape := fmt.Sprintf("%d x 1g on one GPU, %d requests + matchAttribute", k, k)
	if oneRequest {
		shape = fmt.Sprintf("%d x 1g on one GPU, one request (count %d) + matchAttribute", k, k)
	}
	small := b.p.Profiles[0]
	fill := fmt.Sprintf("%d free 1g per GPU", k-1)
	if k > small.MaxCount {
		fill = string(Empty)
	}
	row := ShapeRow{Model: m.Name, Shape: shape, Fill: fill, Nodes: b.cfg.ShapeNodes}
	st := make([]mig.FleetGPU, b.cfg.GPUs)
	for g := range st {
		st[g] = mig.FleetGPU{Node: "n", Index: g, Product: b.p}
		if k <= small.MaxCount {
			for _, s := range small.Starts[k-1:] {
				st[g].Layout = append(st[g].Layout, mig.Instance{Profile: small.Name, Start: s, InUse: true})
			}
		}
	}
	n0, err := m.publish(b.p, "state-000", st)
	if err != nil {
		return row, err
	}
	fleet := expand([]node{n0}, b.cfg.ShapeNodes)
	var all []*resourceapi.ResourceSlice
	state := allocstate.New()
	for _, nd := range fleet {
		all = append(all, nd.slices...)
		state.AllocatedDevices.Insert(nd.held...)
	}
	claim := m.claim(b.p, k, oneRequest)
	a, err := structured.NewAllocator(ctx, alloc.Features, state, b.classes, all, b.cache)
	if err != nil {
		return row, fmt.Errorf("create allocator: %w", err)
	}
	var times []time.Duration
	for _, n := range fleet {
		runtime.GC()
		actx, cancel := context.WithTimeout(ctx, b.cfg.Limit)
		t0 := threadCPU()
		res, err := a.Allocate(actx, n.obj, []*resourceapi.ResourceClaim{claim})
		d := threadCPU() - t0
		cancel()
		switch {
		case err != nil && actx.Err() != nil && ctx.Err() == nil:
			row.TimedOut++
			d = b.cfg.Limit
		case err != nil:
			return row, fmt.Errorf("allocate on %s: %w", n.obj.Name, err)
		case len(res) > 0:
			row.Fits++
		}
		times = append(times, d)
	}
	row.P50, row.Max = quantile(times, 0.5), slices.Max(times)
	return row, nil
}

// commonProfiles are the request mix's profiles on p that every MIG
// model advertises.
func commonProfiles(p *mig.Product, models []FleetModel) []string {
	var out []string
	for _, name := range mixFor(p).profile {
		if name == "" {
			continue
		}
		all := true
		for _, m := range models {
			if !m.Whole && m.Profiles != nil && !slices.Contains(m.Profiles(p), name) {
				all = false
			}
		}
		if all {
			out = append(out, name)
		}
	}
	return out
}

// makeStates draws n node states of gpus GPUs of product p at a fill,
// with instances of the given profiles.
func makeStates(rng *rand.Rand, p *mig.Product, gpus int, fill Fill, n int, profiles []string) [][]mig.FleetGPU {
	var profs []mig.Profile
	for _, name := range profiles {
		pr, _ := p.Profile(name)
		profs = append(profs, pr)
	}
	out := make([][]mig.FleetGPU, n)
	for i := range out {
		out[i] = make([]mig.FleetGPU, gpus)
		for g := range out[i] {
			f := mig.FleetGPU{Node: "n", Index: g, Product: p}
			target := 0
			switch fill {
			case Half:
				target = p.ComputeSlices/2 + rng.Intn(2)
			case NearlyFull:
				target = p.ComputeSlices
			}
			used := 0
			for used < target {
				var cands []mig.Instance
				for _, pr := range profs {
					if used+pr.ComputeSlices > target {
						continue
					}
					for _, s := range pr.Starts {
						in := mig.Instance{Profile: pr.Name, Start: s, InUse: true}
						if p.Validate(append(slices.Clone(f.Layout), in)) == nil {
							cands = append(cands, in)
						}
					}
				}
				if len(cands) == 0 {
					break
				}
				in := cands[rng.Intn(len(cands))]
				f.Layout = append(f.Layout, in)
				pr, _ := p.Profile(in.Profile)
				used += pr.ComputeSlices
			}
			out[i][g] = f
		}
	}
	return out
}

// publish builds what the model publishes for one node in state st.
func (m FleetModel) publish(p *mig.Product, name string, st []mig.FleetGPU) (node, error) {
	n := node{obj: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	h := fnv.New32a()
	h.Write([]byte(name))
	uuid := func(g int) string { return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", h.Sum32(), g) }
	if m.Whole {
		pool := device.Pool{Name: name}
		for _, f := range st {
			d := device.New(mig.DeviceRef{GPU: f.Index}.String()).
				StringAttribute(mig.AttrType, "gpu").IntAttribute(mig.AttrIndex, int64(f.Index)).
				StringAttribute(mig.AttrProduct, p.Name).StringAttribute(mig.AttrUUID, uuid(f.Index))
			pool.Devices = append(pool.Devices, d)
			if len(f.Layout) > 0 {
				n.held = append(n.held, structured.MakeDeviceID(FleetDriver, name, d.Name()))
			}
		}
		inv := &device.Inventory{Driver: FleetDriver, Pools: []device.Pool{pool}}
		n.slices, n.devices = inv.ResourceSlices(name), len(pool.Devices)
		return n, nil
	}
	if m.Publish != nil {
		inv, err := m.Publish(p, name, st)
		if err != nil {
			return n, fmt.Errorf("publish %s: %w", name, err)
		}
		inv.Driver = FleetDriver
		inUse := map[string]bool{}
		for _, f := range st {
			for _, in := range f.Layout {
				if in.InUse {
					inUse[mig.DeviceRef{GPU: f.Index, Profile: in.Profile, Start: in.Start}.String()] = true
				}
			}
		}
		for _, pl := range inv.Pools {
			for _, d := range pl.Devices {
				if inUse[d.Name()] {
					n.held = append(n.held, structured.MakeDeviceID(FleetDriver, pl.Name, d.Name()))
				}
			}
			n.devices += len(pl.Devices)
		}
		if len(n.held) != len(inUse) {
			return n, fmt.Errorf("publish %s: %d of the %d in-use devices are published", name, len(n.held), len(inUse))
		}
		n.slices = inv.ResourceSlices(name)
		return n, nil
	}
	gpus := make([]mig.GPU, len(st))
	for i, f := range st {
		gpus[i] = mig.GPU{Index: f.Index, Product: p, UUID: uuid(f.Index)}
		if m.Profiles != nil {
			gpus[i].Profiles = m.Profiles(p)
		}
	}
	model, err := mig.NewCounterModel(gpus)
	if err != nil {
		return n, err
	}
	for _, d := range model.Devices {
		for i := 0; i < m.ExtraAttributes; i++ {
			d.Attributes[resourceapi.QualifiedName(fmt.Sprintf("fact%d", i))] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("value-%d", i))}
		}
		if m.Lean {
			delete(d.Attributes, mig.AttrProduct)
			delete(d.Attributes, mig.AttrProfileID)
			delete(d.Attributes, mig.AttrPlacementSize)
		}
	}
	var opts []counter.OrderOption
	if m.FitOnly {
		opts = append(opts, counter.WithFitOnly())
	}
	pools, err := model.PreferredPools(name, st, opts...)
	if err != nil {
		return n, err
	}
	if m.PoolPerGPU {
		pools = splitByGPU(pools[0])
	}
	poolOf := map[int]string{}
	for _, pl := range pools {
		for _, d := range pl.Devices {
			ref, err := mig.ParseDeviceName(d.Name())
			if err != nil {
				return n, err
			}
			poolOf[ref.GPU] = pl.Name
		}
		n.devices += len(pl.Devices)
	}
	for _, f := range st {
		for _, in := range f.Layout {
			if in.InUse {
				n.held = append(n.held, structured.MakeDeviceID(FleetDriver, poolOf[f.Index], mig.DeviceRef{GPU: f.Index, Profile: in.Profile, Start: in.Start}.String()))
			}
		}
	}
	inv := &device.Inventory{Driver: FleetDriver, Pools: pools}
	n.slices = inv.ResourceSlices(name)
	return n, nil
}

// splitByGPU makes one pool per GPU, named "<pool>/gpu-<index>", each with
// its GPU's counter set and devices in the given order.
func splitByGPU(pl device.Pool) []device.Pool {
	var out []device.Pool
	at := map[int]int{}
	get := func(g int) *device.Pool {
		i, ok := at[g]
		if !ok {
			i = len(out)
			at[g] = i
			out = append(out, device.Pool{Name: fmt.Sprintf("%s/gpu-%d", pl.Name, g)})
		}
		return &out[i]
	}
	for _, cs := range pl.CounterSets {
		var g int
		if _, err := fmt.Sscanf(cs.Name, "gpu-%d-counters", &g); err == nil {
			get(g).CounterSets = append(get(g).CounterSets, cs)
		}
	}
	for _, d := range pl.Devices {
		ref, _ := mig.ParseDeviceName(d.Name())
		get(ref.GPU).Devices = append(get(ref.GPU).Devices, d)
	}
	return out
}

// expand makes a fleet of n nodes from the base states: node i is named
// "node-<i>" and is in state i mod len(base), with its own slice objects
// (node name, pool names, slice names) sharing the state's device lists.
func expand(base []node, n int) []node {
	out := make([]node, n)
	for i := range out {
		b := base[i%len(base)]
		name := fmt.Sprintf("node-%04d", i)
		old := b.obj.Name
		nd := node{obj: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, devices: b.devices}
		for _, s := range b.slices {
			c := *s
			c.ObjectMeta = metav1.ObjectMeta{Name: strings.Replace(s.Name, old, name, 1)}
			c.Spec.NodeName = ptr.To(name)
			c.Spec.Pool.Name = strings.Replace(s.Spec.Pool.Name, old, name, 1)
			nd.slices = append(nd.slices, &c)
		}
		for _, h := range b.held {
			nd.held = append(nd.held, structured.MakeDeviceID(h.Driver.String(), strings.Replace(h.Pool.String(), old, name, 1), h.Device.String()))
		}
		out[i] = nd
	}
	return out
}

// claim is the model's claim for k devices of the product's smallest
// profile, on one GPU when k > 1: one request for k devices, or k
// requests of one, constrained by matchAttribute on the GPU index.
func (m FleetModel) claim(p *mig.Product, k int, oneRequest bool) *resourceapi.ResourceClaim {
	prof := p.Profiles[0].Name
	req := resourceapi.ExactDeviceRequest{AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	switch {
	case m.Whole:
		req.DeviceClassName = wholeClass
	case m.ClassPerProfile:
		req.DeviceClassName = profileClass(prof)
	default:
		req.DeviceClassName = migClass
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].%s == %q", FleetDriver, mig.AttrProfile, prof)}}}
	}
	spec := resourceapi.ResourceClaimSpec{}
	switch {
	case k == 1:
		spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}}
	case oneRequest:
		req.Count = int64(k)
		spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}}
	default:
		for i := 0; i < k; i++ {
			r := req
			spec.Devices.Requests = append(spec.Devices.Requests, resourceapi.DeviceRequest{Name: fmt.Sprintf("r%d", i), Exactly: &r})
		}
	}
	if k > 1 {
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(FleetDriver + "/" + mig.AttrIndex))}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: types.UID("claim-uid")},
		Spec:       spec,
	}
}

const (
	wholeClass = "gpu.drakit.io"
	migClass   = "mig.drakit.io"
)

// profileClass is the name of a profile's DeviceClass.
func profileClass(profile string) string {
	return "mig-" + strings.NewReplacer(".", "-", "+", "-").Replace(profile) + ".drakit.io"
}

// classLister holds the benchmark's DeviceClasses: whole GPUs, any MIG
// device, and one per profile, each selecting the driver's devices.
type classLister map[string]*resourceapi.DeviceClass

func newClassLister(p *mig.Product) classLister {
	l := classLister{}
	add := func(name, expr string) {
		l[name] = &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].%s", FleetDriver, FleetDriver, expr)}}}},
		}
	}
	add(wholeClass, mig.AttrType+` == "gpu"`)
	add(migClass, mig.AttrType+` == "mig"`)
	for _, pr := range p.Profiles {
		add(profileClass(pr.Name), fmt.Sprintf(`%s == "mig" && device.attributes[%q].%s == %q`, mig.AttrType, FleetDriver, mig.AttrProfile, pr.Name))
	}
	return l
}

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, c := range l {
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	c, ok := l[name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return c, nil
}

// heapKiB is the Go heap that deep copies of the nodes' slices take, per
// node: what an informer holding them costs. It copies the nodes round
// robin until at least 200 node copies are made, so that the heap's noise
// is small against what is measured.
func heapKiB(nodes []node) float64 {
	n := max(200, len(nodes))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	copies := make([][]*resourceapi.ResourceSlice, n)
	for i := range copies {
		for _, s := range nodes[i%len(nodes)].slices {
			copies[i] = append(copies[i], s.DeepCopy())
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(copies)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024 / float64(n)
}

// threadCPU is the CPU time of the calling OS thread (the caller has
// locked its goroutine to it).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// processCPU is the CPU time (user and system) of the whole process, the
// garbage collector's included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func meanSD(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	var sum float64
	for _, d := range ds {
		sum += float64(d)
	}
	mean := sum / float64(len(ds))
	var v float64
	for _, d := range ds {
		v += (float64(d) - mean) * (float64(d) - mean)
	}
	if len(ds) > 1 {
		v /= float64(len(ds) - 1)
	}
	return time.Duration(mean), time.Duration(math.Sqrt(v))
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

var errNoBase = errors.New("no row of the base model")

func (r *FleetResult) base(fill Fill) (FleetRow, error) {
	for _, row := range r.Rows {
		if row.Model == Today.Name && row.Fill == fill {
			return row, nil
		}
	}
	return FleetRow{}, errNoBase
}

func (r *FleetResult) print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Fleet benchmark: one pod's scheduling cycle in the real structured allocator (kube-scheduler 1.37 features): NewAllocator over all slices, Allocate per node; %d x %s per node; %d distinct random node states per fill; CPU time, mean ± sd over %d pods\n\n", c.GPUs, c.Product, c.States, c.Repeats)
	fmt.Fprintf(w, "Node states: in-use instances of %s at random placements (profiles every model advertises)\n\n", strings.Join(r.StateProfiles, ", "))
	fmt.Fprintf(w, "One %s claim\n", mixForFirst(c.Product))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "model\tfill\tdevices/node\tslices KiB/node\tnode p50\tnode p99\t"
	for _, n := range c.Nodes {
		hdr += fmt.Sprintf("per pod, %d nodes\t", n)
	}
	hdr += "vs today\tfits on\tplanner's pick\t"
	fmt.Fprintln(tw, hdr)
	for _, row := range r.Rows {
		line := fmt.Sprintf("%s\t%s\t%.0f\t%.0f\t%s\t%s\t", row.Model, row.Fill, row.Devices, row.SliceKiB, round(row.NodeP50), round(row.NodeP99))
		for i := range row.Pod {
			line += fmt.Sprintf("%s ± %s\t", roundMS(row.Pod[i]), roundMS(row.PodSD[i]))
		}
		ratio := "-"
		if b, err := r.base(row.Fill); err == nil && b.Pod[len(b.Pod)-1] > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(row.Pod[len(row.Pod)-1])/float64(b.Pod[len(b.Pod)-1]))
		}
		pick := "-"
		if row.PickKept >= 0 {
			pick = fmt.Sprintf("%.0f%%", 100*row.PickKept)
		}
		line += fmt.Sprintf("%s\t%d/%d\t%s\t", ratio, row.Fits, slices.Max(c.Nodes), pick)
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if len(r.Shapes) == 0 {
		return
	}
	fmt.Fprintf(w, "\nClaim shapes, per node (CPU time of one Allocate; limit %s, the scheduler's filter timeout is 10s); the claims fit on no node: every GPU is one 1g short\n", c.Limit)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tclaim\tnode fill\tp50\tmax\ttimed out\tfits\t")
	for _, s := range r.Shapes {
		p50, mx := round(s.P50), round(s.Max)
		if s.TimedOut > 0 {
			mx = "> " + mx
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t\n", s.Model, s.Shape, s.Fill, p50, mx, s.TimedOut, s.Nodes, s.Fits, s.Nodes)
	}
	tw.Flush()
}

func mixForFirst(product string) string {
	p, err := mig.Lookup(product)
	if err != nil {
		return "?"
	}
	return p.Profiles[0].Name
}

func roundMS(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return round(d)
	}
}
