package main

import (
	"context"
	"fmt"
	"github.com/drakit/drakit/partition/plan"
	"maps"
	"net"
	"slices"
	"strings"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/device"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/ledger"
)

// synthFleet is a shape "drakit bench sched" builds itself instead of
// reading it from the reference driver: another driver's published shape,
// or a candidate publication before any driver publishes it.
type synthFleet struct {
	// slices are one node's ResourceSlices.
	slices func(node string) []*resourceapi.ResourceSlice
	// classes are created once; request is every pod's one request.
	classes []*resourceapi.DeviceClass
	request resourceapi.ExactDeviceRequest
	// setup, when set, runs once the nodes' slices are published and
	// before the pods are made: what the shape needs besides its slices
	// (the layout's ledgers and webhook); stop undoes it.
	setup func(ctx context.Context, cs kubernetes.Interface, nodes []string, slices func(node string) []*resourceapi.ResourceSlice) (stop func(), err error)
}

// NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) with its
// DynamicMIG feature gate, as it publishes a node of 8 H200s on
// Kubernetes 1.35 and later (/work/shared/notes/nvidia-dra-driver.md):
// one pool per node, named after the node, in one slice with every GPU's
// counter set and one slice per GPU; per GPU the full GPU and every MIG
// profile x placement (26 devices); a counter set of 15 counters (one per
// capacity, the maximum over the profiles, and memory-slice-0..7); a MIG
// device with 13 attributes and 7 capacities consumes the 7 capacity
// counters and its memory slices. Claims use its class mig.nvidia.com and
// select the profile in the request.
const (
	nvidiaDriver   = "gpu.nvidia.com"
	nvidiaMIGClass = "mig.nvidia.com"
	nvidiaGPUs     = 8
)

// nvidiaDynamicMIG builds NVIDIA's DynamicMIG shape for a node of 8 H200s
// from the MIG catalog's H200 profiles and placements.
func nvidiaDynamicMIG() (*synthFleet, error) {
	prod, err := mig.Lookup("H200")
	if err != nil {
		return nil, err
	}
	// The GPU's capacities: each the maximum over the profiles (NVIDIA's
	// maxCapacities), memory the 7g's.
	maxCaps := map[string]int64{}
	for _, p := range prod.Profiles {
		for name, q := range nvidiaCaps(p) {
			maxCaps[name] = max(maxCaps[name], q)
		}
	}
	qty := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.BinarySI) }
	counters := func(caps map[string]int64, start, size int) map[string]resourceapi.Counter {
		out := map[string]resourceapi.Counter{}
		for name, v := range caps {
			out[camelToDash(name)] = resourceapi.Counter{Value: qty(v)}
		}
		for s := start; s < start+size; s++ {
			out[fmt.Sprintf("memory-slice-%d", s)] = resourceapi.Counter{Value: qty(1)}
		}
		return out
	}
	capacity := func(caps map[string]int64) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
		out := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
		for name, v := range caps {
			out[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: qty(v)}
		}
		return out
	}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	ver := func(s string) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
	}
	gpuAttrs := func(gpu int) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"productName":                     str("NVIDIA H200"),
			"brand":                           str("Nvidia"),
			"architecture":                    str("Hopper"),
			"cudaComputeCapability":           ver("9.0.0"),
			"driverVersion":                   ver("580.95.5"),
			"cudaDriverVersion":               ver("13.0.0"),
			"addressingMode":                  str("None"),
			"resource.kubernetes.io/pciBusID": str(fmt.Sprintf("0000:%02x:00.0", 0x1b+gpu*0x10)),
			"resource.kubernetes.io/pcieRoot": str(fmt.Sprintf("pci0000:%02x", 0x15+gpu*0x10)),
			"resource.kubernetes.io/numaNode": {IntValue: ptr.To(int64(gpu / 4))},
		}
	}
	uuid := func(gpu int) string { return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", gpu, gpu) }

	var counterSets []resourceapi.CounterSet
	gpuDevices := make([][]resourceapi.Device, nvidiaGPUs)
	for g := range nvidiaGPUs {
		set := fmt.Sprintf("gpu-%d-counter-set", g)
		counterSets = append(counterSets, resourceapi.CounterSet{Name: set, Counters: counters(maxCaps, 0, prod.MemorySlices)})
		full := resourceapi.Device{
			Name:             fmt.Sprintf("gpu-%d", g),
			Attributes:       gpuAttrs(g),
			Capacity:         capacity(maxCaps),
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: counters(maxCaps, 0, prod.MemorySlices)}},
		}
		full.Attributes["type"] = str("gpu")
		full.Attributes["uuid"] = str(uuid(g))
		full.Attributes["index"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g))}
		gpuDevices[g] = append(gpuDevices[g], full)
		for _, p := range prod.Profiles {
			caps := nvidiaCaps(p)
			for _, start := range p.Starts {
				d := resourceapi.Device{
					Name:             fmt.Sprintf("gpu-%d-mig-%s-%d-%d", g, strings.NewReplacer(".", "", "+", "-").Replace(p.Name), p.ID, start),
					Attributes:       gpuAttrs(g),
					Capacity:         capacity(caps),
					ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: counters(caps, start, p.MemorySlices)}},
				}
				d.Attributes["type"] = str("mig")
				d.Attributes["parentUUID"] = str(uuid(g))
				d.Attributes["profile"] = str(p.Name)
				gpuDevices[g] = append(gpuDevices[g], d)
			}
		}
	}
	perNode := func(node string) []*resourceapi.ResourceSlice {
		slice := func(name string) *resourceapi.ResourceSlice {
			return &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: node + "-" + nvidiaDriver + "-" + name},
				Spec: resourceapi.ResourceSliceSpec{Driver: nvidiaDriver, NodeName: ptr.To(node),
					Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1 + nvidiaGPUs}},
			}
		}
		cs := slice("counters")
		cs.Spec.SharedCounters = counterSets
		out := []*resourceapi.ResourceSlice{cs}
		for g := range nvidiaGPUs {
			s := slice(fmt.Sprintf("gpu-%d", g))
			s.Spec.Devices = gpuDevices[g]
			out = append(out, s)
		}
		return out
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: nvidiaMIGClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == \"mig\"", nvidiaDriver, nvidiaDriver)}}}}}
	return &synthFleet{
		slices:  perNode,
		classes: []*resourceapi.DeviceClass{class},
		request: resourceapi.ExactDeviceRequest{DeviceClassName: nvidiaMIGClass, Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].profile == %q", nvidiaDriver, prod.Profiles[0].Name)}}}},
	}, nil
}

// nvidiaCaps are a MIG profile's 7 capacities as NVIDIA's driver
// publishes them (its CommonCapacitiesMig): the six engines and memory in
// bytes.
func nvidiaCaps(p mig.Profile) map[string]int64 {
	e := p.Engines
	return map[string]int64{
		"multiprocessors": int64(e.Multiprocessors), "copyEngines": int64(e.CopyEngines), "decoders": int64(e.Decoders),
		"encoders": int64(e.Encoders), "jpegEngines": int64(e.JpegEngines), "ofaEngines": int64(e.OfaEngines),
		"memory": p.MemoryMiB << 20,
	}
}

// camelToDash turns a capacity name into NVIDIA's counter name
// (copyEngines: copy-engines).
func camelToDash(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// drakitFleet is a candidate publication made from the reference driver's
// own devices for a simulated DGX H200 with dynamic MIG on every GPU
// (their attributes, capacities and counters), edited per node; pods ask
// for one 1g device through the driver's profile class.
func drakitFleet(edit func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice) func() (*synthFleet, error) {
	return func() (*synthFleet, error) {
		proto, profiles, err := fleetInventory("dgx-h200", "proto", true)
		if err != nil {
			return nil, err
		}
		return &synthFleet{
			slices:  driverSlices(proto, edit),
			classes: nvdriver.DeviceClasses(profiles),
			request: resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ProfileClass(profiles[0])},
		}, nil
	}
}

// drakitLayoutFleet is the reference driver's own layout publication
// (-mig-publication=layout) of a simulated DGX H200 with dynamic MIG on
// every GPU, while pending claims ask for 56 1g devices (what the bench's
// pods ask of each node): the driver lays each GPU out as seven 1g
// devices, one pool of one slice per node, no counters. Pods ask for one
// 1g device through the driver's profile class.
func drakitLayoutFleet() (*synthFleet, error) {
	profiles := mig.DefaultProfiles(mustProduct("NVIDIA H200"))
	demand := plan.Demand{profiles[0]: 56}
	agent := ledger.NewMemoryAgent("proto", demand, nvdriver.LayoutOptions()...)
	proto, profiles, err := fleetInventoryWith("dgx-h200", "proto", true, []nvdriver.Option{nvdriver.WithMIGLayout(agent)})
	if err != nil {
		return nil, err
	}
	return &synthFleet{
		slices:  driverSlices(proto, nil),
		classes: nvdriver.DeviceClasses(profiles),
		request: resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ProfileClass(profiles[0])},
	}, nil
}

// drakitLedgerFleet is drakitLayoutFleet on the chart's allocation path:
// every node's layout ledger (seeded, its 56 1g devices open, as the
// planner and the node's agent leave it for 1g demand) and the layout
// webhook (admission.LayoutGuard, by URL, failure policy Fail, in the
// bench's process): every allocation write of a pod moves its device from
// Open to Held in the node's ledger, by compare-and-swap, before it is
// admitted. The slices do not change (Held devices stay published), as
// for a 1g burst on the driver.
func drakitLedgerFleet() (*synthFleet, error) {
	f, err := drakitLayoutFleet()
	if err != nil {
		return nil, err
	}
	f.setup = ledgerWebhook
	return f, nil
}

// ledgerWebhook seeds every node's ledger with its published layout
// devices open and serves the layout webhook.
func ledgerWebhook(ctx context.Context, cs kubernetes.Interface, nodes []string,
	slices func(node string) []*resourceapi.ResourceSlice) (func(), error) {
	const ns = "kube-system"
	store, err := ledger.NewStore(cs, ns, nvdriver.DriverName)
	if err != nil {
		return nil, err
	}
	if err := parallel(ctx, len(nodes), func(ctx context.Context, i int) error {
		node := nodes[i]
		var open []ledger.Device
		for _, s := range slices(node) {
			if !ledger.IsLayoutPool(s.Spec.Pool.Name) {
				continue
			}
			for _, d := range s.Spec.Devices {
				open = append(open, ledger.Device{Pool: s.Spec.Pool.Name, Name: d.Name})
			}
		}
		_, err := store.Update(ctx, node, true, func(l *ledger.Ledger) error {
			l.Seeded, l.Open = true, open
			return nil
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("seed the ledgers: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	g, err := admission.NewLayoutGuard(cs, nvdriver.DriverName, ns)
	if err != nil {
		return nil, err
	}
	const cfg = "bench-layout-webhook"
	vwc := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg},
		Webhooks: []admissionregv1.ValidatingWebhook{admission.LayoutWebhook(nvdriver.DriverName,
			admissionregv1.WebhookClientConfig{URL: ptr.To("https://" + addr + admission.LayoutPath)}, admissionregv1.Fail)}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	srv, err := admission.NewServer(nil, admission.WithAddress(addr), admission.WithLayoutGuard(g), admission.WithDrain(0),
		admission.WithSelfSignedCert(admission.SelfSigned{Client: cs, Namespace: ns, Secret: cfg + "-tls",
			WebhookConfiguration: cfg, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(wctx) }()
	select {
	case <-srv.Started():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("layout webhook: %w", err)
	}
	return func() { cancel(); <-done }, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func mustProduct(name string) *mig.Product {
	p, err := mig.Lookup(name)
	if err != nil {
		panic(err)
	}
	return p
}

// driverSlices is the driver's inventory renamed for node, then edited.
func driverSlices(proto *device.Inventory, edit func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice) func(node string) []*resourceapi.ResourceSlice {
	return func(node string) []*resourceapi.ResourceSlice {
		inv := proto.Clone()
		for i := range inv.Pools {
			inv.Pools[i].Name = strings.Replace(inv.Pools[i].Name, "proto", node, 1)
		}
		s := inv.ResourceSlices(node)
		if edit != nil {
			s = edit(s)
		}
		return s
	}
}

// layoutSlices is candidate (a): each GPU's free space laid out by the
// planner and published as devices that do not overlap, with no counters
// and no counter sets. The layout of an empty GPU for 1g demand is seven
// 1g devices (placements 0 to 6), the most devices any H200 layout has;
// the full GPU and the other placements are not published. With onePool
// the node's 56 devices are one pool in one slice, else a pool per GPU of
// one slice each: either way a pool is one slice, complete whenever the
// scheduler sees it.
func layoutSlices(onePool bool) func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	return func(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
		var out []*resourceapi.ResourceSlice
		for _, s := range ss {
			if len(s.Spec.SharedCounters) > 0 {
				continue
			}
			s.Spec.Devices = slices.DeleteFunc(s.Spec.Devices, func(d resourceapi.Device) bool {
				return strAttr(d, mig.AttrType) != nvdriver.TypeMIG || !strings.HasPrefix(strAttr(d, mig.AttrProfile), "1g.")
			})
			for i := range s.Spec.Devices {
				s.Spec.Devices[i].ConsumesCounters = nil
			}
			s.Spec.Pool.ResourceSliceCount = 1
			out = append(out, s)
		}
		if !onePool {
			return out
		}
		node := *out[0].Spec.NodeName
		merged := out[0]
		for _, s := range out[1:] {
			merged.Spec.Devices = append(merged.Spec.Devices, s.Spec.Devices...)
		}
		merged.Name, merged.Spec.Pool.Name = node+"-layout", node
		return []*resourceapi.ResourceSlice{merged}
	}
}

// nextPlacementSlices is candidate (b): per GPU the full GPU and, for each
// profile, only the placement the planner would choose next (on an empty
// GPU the last one), on the shipped counter model (a pool per GPU, its
// counter set in its own slice).
func nextPlacementSlices(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	for _, s := range ss {
		last := map[string]int{}
		for i, d := range s.Spec.Devices {
			if p := strAttr(d, mig.AttrProfile); p != "" {
				if j, ok := last[p]; !ok || intAttr(d, mig.AttrPlacementStart) > intAttr(s.Spec.Devices[j], mig.AttrPlacementStart) {
					last[p] = i
				}
			}
		}
		keep := slices.Collect(maps.Values(last))
		n := 0
		for i, d := range s.Spec.Devices {
			if strAttr(d, mig.AttrType) != nvdriver.TypeMIG || slices.Contains(keep, i) {
				s.Spec.Devices[n] = d
				n++
			}
		}
		s.Spec.Devices = s.Spec.Devices[:n]
	}
	return ss
}

// memorySliceCountersOnly is candidate (c): counters stay, but a device
// consumes only its memory slices and the counter set has only those (the
// compute-slice counter goes: on the 8-memory/7-compute geometry no
// placements that share no memory slice exceed the compute slices).
func memorySliceCountersOnly(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	isMem := func(name string) bool { return strings.HasPrefix(name, "memory-slice-") }
	for _, s := range ss {
		for i := range s.Spec.SharedCounters {
			maps.DeleteFunc(s.Spec.SharedCounters[i].Counters, func(n string, _ resourceapi.Counter) bool { return !isMem(n) })
		}
		for i := range s.Spec.Devices {
			for _, cc := range s.Spec.Devices[i].ConsumesCounters {
				maps.DeleteFunc(cc.Counters, func(n string, _ resourceapi.Counter) bool { return !isMem(n) })
			}
		}
	}
	return ss
}

// keepAttributes drops every device attribute but keep (candidate (d):
// the class selects on type and profile, which must stay).
func keepAttributes(keep ...string) func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	return func(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
		for _, s := range ss {
			for i := range s.Spec.Devices {
				for name := range s.Spec.Devices[i].Attributes {
					if !slices.Contains(keep, strings.TrimPrefix(string(name), nvdriver.DriverName+"/")) {
						delete(s.Spec.Devices[i].Attributes, name)
					}
				}
			}
		}
		return ss
	}
}

// keepCapacities drops every device capacity but keep.
func keepCapacities(keep ...string) func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	return func(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
		for _, s := range ss {
			for i := range s.Spec.Devices {
				maps.DeleteFunc(s.Spec.Devices[i].Capacity, func(n resourceapi.QualifiedName, _ resourceapi.DeviceCapacity) bool {
					return !slices.Contains(keep, strings.TrimPrefix(string(n), nvdriver.DriverName+"/"))
				})
			}
		}
		return ss
	}
}

// edits applies each edit in turn.
func edits(e ...func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice) func([]*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	return func(ss []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
		for _, f := range e {
			ss = f(ss)
		}
		return ss
	}
}

// drakitSharedFleet is the reference driver's MPS shares of a simulated
// DGX H200 with every GPU shared (-shared-gpus=all): a pool per GPU with
// its counter set, the GPU whole and its shared device. Pods ask for a
// share of the default size through the shared class.
func drakitSharedFleet() (*synthFleet, error) {
	proto, _, err := fleetInventoryWith("dgx-h200", "proto", false,
		[]nvdriver.Option{nvdriver.WithSharedGPUs("all")})
	if err != nil {
		return nil, err
	}
	return &synthFleet{
		slices:  driverSlices(proto, nil),
		classes: nvdriver.DeviceClasses(nil),
		request: resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ClassShared},
	}, nil
}
