package device_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
)

// A node with 200 GPUs, one of them unhealthy: the inventory becomes
// slices within the API limits, in the order given.
func ExampleInventory_DriverResources() {
	pool := device.Pool{Name: "node-1"}
	for i := 0; i < 200; i++ {
		pool.Devices = append(pool.Devices, device.New(fmt.Sprintf("gpu-%d", i)).
			StringAttribute("model", "h100").
			IntAttribute("index", int64(i)).
			VersionAttribute("driverVersion", "580.65.6").
			Capacity("memory", resource.MustParse("80Gi"), nil))
	}
	inv := &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{pool}}

	// The runtime turns a health event into a taint.
	taint, _ := device.HealthTaint(inv.Driver, device.HealthReport{Health: device.Unhealthy, Reason: "XidError79"}, device.NoSchedule)
	inv, err := inv.WithTaints(map[device.DeviceID][]device.Taint{{Pool: "node-1", Device: "gpu-150"}: {taint}})
	if err != nil {
		panic(err)
	}

	resources, err := inv.DriverResources()
	if err != nil {
		panic(err)
	}
	for i, s := range resources.Pools["node-1"].Slices {
		fmt.Printf("slice %d: %s .. %s (%d devices)\n", i, s.Devices[0].Name, s.Devices[len(s.Devices)-1].Name, len(s.Devices))
	}
	// Output:
	// slice 0: gpu-0 .. gpu-127 (128 devices)
	// slice 1: gpu-128 .. gpu-191 (64 devices)
	// slice 2: gpu-192 .. gpu-199 (8 devices)
}

// Validate reports every problem with its field path before anything
// reaches the API server.
func ExampleInventory_Validate() {
	inv := &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{{
		Name: "node-1",
		Devices: []*device.Device{
			device.New("GPU_0").VersionAttribute("driverVersion", "580.65"),
			device.New("gpu-1").Capacity("memory", resource.MustParse("80Gi"),
				&device.RequestPolicy{Default: resource.NewQuantity(1, resource.BinarySI)}),
		},
	}}}
	var verr *device.ValidationError
	if !errors.As(inv.Validate(), &verr) {
		return
	}
	for _, p := range verr.Problems {
		fmt.Printf("%s: %s\n", p.Field, p.Type)
	}
	// Output:
	// pools[0].devices[0].name: Invalid value
	// pools[0].devices[0].attributes[driverVersion].version: Invalid value
	// pools[0].devices[1].capacity[memory].requestPolicy: Forbidden
}

// SanitizeName makes device names out of hardware identifiers.
func ExampleSanitizeName() {
	fmt.Println(device.SanitizeName("gpu-0"))
	fmt.Println(device.SanitizeName("0000:3B:00.0"))
	// Output:
	// gpu-0
	// 0000-3b-00-0-ff0d521a
}

// A card usable whole or as two halves, with its health polled from the
// vendor's monitor: a report on the card's counter set applies to the
// whole card and to both halves.
func ExampleNewHealthDiscoverer() {
	mem := map[string]resource.Quantity{"mem": resource.MustParse("16Gi")}
	half := map[string]resource.Quantity{"mem": resource.MustParse("8Gi")}
	inv := &device.Inventory{Driver: "fpga.example.com", Pools: []device.Pool{{
		Name:        "node-1",
		CounterSets: []device.CounterSet{{Name: "card-0", Counters: mem}},
		Devices: []*device.Device{
			device.New("card-0-a").ConsumesCounters("card-0", half),
			device.New("card-0-b").ConsumesCounters("card-0", half),
			device.New("card-0").ConsumesCounters("card-0", mem),
		},
	}}}
	overheated := func(context.Context) ([]device.HealthReport, error) {
		return []device.HealthReport{{Device: device.DeviceID{Pool: "node-1", Device: "card-0"}, Health: device.Unhealthy, Reason: "Overheat"}}, nil
	}
	d, err := device.NewHealthDiscoverer(inv, device.PollHealth(10*time.Second, overheated))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan device.Event)
	go func() { _ = d.Watch(ctx, events) }()
	for range 2 { // the "not reported yet" event, then the first poll
		for _, r := range (<-events).Health {
			fmt.Println(r.Device.Device, r.Health, r.Reason)
		}
	}
	// Output:
	// card-0-a Unknown NotReported
	// card-0-b Unknown NotReported
	// card-0 Unknown NotReported
	// card-0 Unhealthy Overheat
	// card-0-a Unhealthy Overheat
	// card-0-b Unhealthy Overheat
}

// A card whose partitions are made at prepare: the inventory function
// lists the partitions of the moment, Changed republishes, and a card's
// health reaches the partitions made on it later.
func ExampleNewDynamicDiscoverer() {
	var mu sync.Mutex
	parts := []string{}
	mem := map[string]resource.Quantity{"mem": resource.MustParse("16Gi")}
	half := map[string]resource.Quantity{"mem": resource.MustParse("8Gi")}
	inventory := func(context.Context) (*device.Inventory, error) {
		mu.Lock()
		defer mu.Unlock()
		p := device.Pool{Name: "node-1", CounterSets: []device.CounterSet{{Name: "card-0", Counters: mem}}}
		for _, name := range parts {
			p.Devices = append(p.Devices, device.New(name).ConsumesCounters("card-0", half))
		}
		return &device.Inventory{Driver: "fpga.example.com", Pools: []device.Pool{p}}, nil
	}
	monitor := make(chan []device.HealthReport)
	d, err := device.NewDynamicDiscoverer(inventory, device.HealthChannel(monitor))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan device.Event)
	go func() { _ = d.Watch(ctx, events) }()
	// The card overheats before any partition is made on it.
	monitor <- []device.HealthReport{{Device: device.DeviceID{Pool: "node-1", Device: "card-0"}, Health: device.Unhealthy, Reason: "Overheat"}}
	mu.Lock()
	parts = append(parts, "card-0-a") // a partition made at prepare
	mu.Unlock()
	d.Changed()
	for range 2 {
		ev := <-events
		if ev.Type == device.EventInventoryChanged {
			fmt.Println("inventory changed:", len(ev.Inventory.Pools[0].Devices), "partition")
			continue
		}
		for _, r := range ev.Health {
			fmt.Println(r.Device.Device, r.Health, r.Reason)
		}
	}
	// Output:
	// inventory changed: 1 partition
	// card-0-a Unhealthy Overheat
}

func ExampleDevice_String() {
	d := device.New("gpu-0").
		StringAttribute("model", "h100").
		IntAttribute("index", 0).
		VersionAttribute("driverVersion", "580.65.6").
		Capacity("memory", resource.MustParse("80Gi"), nil)
	fmt.Println(d)
	// Output: gpu-0{driverVersion=v580.65.6 index=0 model="h100" memory=80Gi}
}

// A Validator checks slices as a particular API server would: here one
// with the DRAFractionalCapacityRange feature on, which checks a request
// policy range in milli units.
func ExampleValidator() {
	policy := &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(resource.MustParse("1500m")),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1")), Step: ptr.To(resource.MustParse("1"))},
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   "gpu.example.com",
			Pool:     resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
			NodeName: ptr.To("node-a"),
			Devices: []resourceapi.Device{{
				Name:                     "gpu-0",
				AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: resource.MustParse("80Gi"), RequestPolicy: policy},
				},
			}},
		},
	}
	fmt.Println("default API server:", device.Validate(slice) == nil)
	fmt.Println("with DRAFractionalCapacityRange:", device.Validator{FractionalCapacityRange: true}.Validate(slice) == nil)
	// Output:
	// default API server: true
	// with DRAFractionalCapacityRange: false
}

// A driver's DeviceClasses, built and checked in Go and rendered for its
// chart: one class for whole cards that also serves the old-style
// "example.com/gpu: 1" request, one for halves.
func ExampleClass() {
	var classes []*resourceapi.DeviceClass
	for _, c := range []device.Class{
		{Name: "gpu.example.com", Driver: "gpu.example.com",
			Selectors:            []string{`device.attributes["gpu.example.com"].type == "card"`},
			ExtendedResourceName: "example.com/gpu"},
		{Name: "half.gpu.example.com", Driver: "gpu.example.com",
			Selectors: []string{`device.attributes["gpu.example.com"].type == "half"`}},
	} {
		dc, err := c.DeviceClass()
		if err != nil {
			fmt.Println(err)
			return
		}
		classes = append(classes, dc)
	}
	out, err := device.ClassesYAML(classes...)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(out))
	_, err = device.Class{Name: "mig.example.com", Driver: "gpu.example.com", ExtendedResourceName: "nvidia.com/mig-1g.18gb+me"}.DeviceClass()
	fmt.Println(err)
	// Output:
	// apiVersion: resource.k8s.io/v1
	// kind: DeviceClass
	// metadata:
	//   name: gpu.example.com
	// spec:
	//   extendedResourceName: example.com/gpu
	//   selectors:
	//   - cel:
	//       expression: device.driver == "gpu.example.com"
	//   - cel:
	//       expression: device.attributes["gpu.example.com"].type == "card"
	// ---
	// apiVersion: resource.k8s.io/v1
	// kind: DeviceClass
	// metadata:
	//   name: half.gpu.example.com
	// spec:
	//   selectors:
	//   - cel:
	//       expression: device.driver == "gpu.example.com"
	//   - cel:
	//       expression: device.attributes["gpu.example.com"].type == "half"
	// invalid DeviceClass mig.example.com: extendedResourceName "nvidia.com/mig-1g.18gb+me": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')
}

// A device built elsewhere (here with three attributes) trimmed to what
// claims select on before it is published.
func ExampleDevice_RemoveAttribute() {
	d := device.New("gpu-0-1g-10gb-0").StringAttribute("profile", "1g.10gb").IntAttribute("profileID", 19).IntAttribute("placementSize", 1)
	d.RemoveAttribute("profileID").RemoveAttribute("placementSize").RemoveAttribute("absent")
	fmt.Println(d)
	// Output:
	// gpu-0-1g-10gb-0{profile="1g.10gb"}
}
