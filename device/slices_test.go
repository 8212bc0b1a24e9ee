package device

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

func devices(n int, mod func(i int, d *Device)) []*Device {
	out := make([]*Device, n)
	for i := range out {
		out[i] = New(fmt.Sprintf("dev-%d", i)).IntAttribute("index", int64(i))
		if mod != nil {
			mod(i, out[i])
		}
	}
	return out
}

func sliceShape(p resourceslice.Pool) []string {
	var out []string
	for _, s := range p.Slices {
		adv := ""
		for _, d := range s.Devices {
			if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
				adv = "+"
			}
		}
		out = append(out, fmt.Sprintf("c%d/d%d%s", len(s.SharedCounters), len(s.Devices), adv))
	}
	return out
}

func TestSplitting(t *testing.T) {
	taint := Taint{Key: "example.com/broken", Effect: NoSchedule}
	sets := func(n int) []CounterSet {
		out := make([]CounterSet, n)
		for i := range out {
			out[i] = CounterSet{Name: fmt.Sprintf("gpu-%d", i), Counters: map[string]resource.Quantity{"memory": q("80Gi")}}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		pool Pool
		want []string
	}{
		{"empty pool", Pool{}, []string{"c0/d0"}},
		{"one device", Pool{Devices: devices(1, nil)}, []string{"c0/d1"}},
		{"128 devices", Pool{Devices: devices(128, nil)}, []string{"c0/d128"}},
		{"300 devices", Pool{Devices: devices(300, nil)}, []string{"c0/d128", "c0/d128", "c0/d44"}},
		{"taint in the middle", Pool{Devices: devices(200, func(i int, d *Device) {
			if i == 150 {
				d.Taint(taint)
			}
		})}, []string{"c0/d128", "c0/d64+", "c0/d8"}},
		{"taint after 100 plain", Pool{Devices: devices(130, func(i int, d *Device) {
			if i == 100 {
				d.Taint(taint)
			}
		})}, []string{"c0/d100", "c0/d30+"}},
		{"counters", Pool{CounterSets: sets(20), Devices: devices(140, func(i int, d *Device) {
			d.ConsumesCounters(fmt.Sprintf("gpu-%d", i%20), map[string]resource.Quantity{"memory": q("10Gi")})
		})}, []string{"c8/d0", "c8/d0", "c4/d0", "c0/d64+", "c0/d64+", "c0/d12+"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pool.Name = "pool-a"
			inv := &Inventory{Driver: testDriver, Pools: []Pool{tc.pool}}
			dr, err := inv.DriverResources()
			if err != nil {
				t.Fatalf("DriverResources: %v", err)
			}
			if diff := cmp.Diff(tc.want, sliceShape(dr.Pools["pool-a"])); diff != "" {
				t.Errorf("slices (-want +got):\n%s", diff)
			}
			// Device order is kept across slices.
			var got []string
			for _, s := range dr.Pools["pool-a"].Slices {
				for _, d := range s.Devices {
					got = append(got, d.Name)
				}
			}
			var want []string
			for _, d := range tc.pool.Devices {
				want = append(want, d.Name())
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("device order (-want +got):\n%s", diff)
			}
			// The slices as objects pass validation.
			if err := Validate(inv.ResourceSlices("node-1")...); err != nil {
				t.Errorf("Validate(slices): %v", err)
			}
			// Same inventory, same result.
			dr2, err := inv.Clone().DriverResources()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(dr, dr2); diff != "" {
				t.Errorf("second conversion differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestConversion(t *testing.T) {
	added := time.Date(2026, 12, 1, 10, 0, 0, 700_000_000, time.UTC)
	inv := &Inventory{Driver: testDriver, Pools: []Pool{{
		Name:     "net",
		AllNodes: true,
		Devices: []*Device{New("nic-0").
			StringAttribute(testDriver+"/model", "cx7").
			VersionAttribute("fw", "28.39.1002").
			BoolAttribute("rdma", true).
			IntAttribute(KubernetesDomain+"/numaNode", 1).
			Capacity("bandwidth", q("400G"), &RequestPolicy{Default: qp("100G"), ValidValues: []resource.Quantity{q("100G"), q("200G"), q("400G")}}).
			AllowMultipleAllocations().
			Taint(Taint{Key: "example.com/maint", Value: "planned", Effect: NoEffect, TimeAdded: &added}).
			BindingConditions([]string{"example.com/attached"}, []string{"example.com/failed"}, true),
		},
	}}}
	dr, err := inv.DriverResources()
	if err != nil {
		t.Fatalf("DriverResources: %v", err)
	}
	p := dr.Pools["net"]
	if !p.AllNodes || p.NodeSelector != nil || len(p.Slices) != 1 {
		t.Fatalf("pool = %+v", p)
	}
	d := p.Slices[0].Devices[0]
	wantKeys := []resourceapi.QualifiedName{"fw", "model", "rdma", KubernetesDomain + "/numaNode"}
	if diff := cmp.Diff(wantKeys, sortedKeys(d.Attributes)); diff != "" {
		t.Errorf("attribute names (-want +got):\n%s", diff)
	}
	if got := *d.Attributes["model"].StringValue; got != "cx7" {
		t.Errorf("model = %q", got)
	}
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || d.BindsToNode == nil || !*d.BindsToNode {
		t.Errorf("flags: %+v", d)
	}
	if rp := d.Capacity["bandwidth"].RequestPolicy; rp == nil || rp.ValidRange != nil || len(rp.ValidValues) != 3 {
		t.Errorf("request policy = %+v", rp)
	}
	if tm := d.Taints[0].TimeAdded; tm == nil || !tm.Time.Equal(added.Truncate(time.Second)) {
		t.Errorf("taint time = %v, want %v rounded to seconds", tm, added)
	}
	if len(d.BindingConditions) != 1 || len(d.BindingFailureConditions) != 1 {
		t.Errorf("binding conditions: %v %v", d.BindingConditions, d.BindingFailureConditions)
	}
}

func TestWithTaints(t *testing.T) {
	inv := &Inventory{Driver: testDriver, Pools: []Pool{{Name: "p", Devices: devices(3, nil)}}}
	unhealthy, ok := HealthTaint(testDriver, HealthReport{Device: DeviceID{"p", "dev-1"}, Health: Unhealthy, Reason: "XidError79"}, NoExecute)
	if !ok {
		t.Fatal("HealthTaint gave no taint for Unhealthy")
	}
	tainted, err := inv.WithTaints(map[DeviceID][]Taint{{Pool: "p", Device: "dev-1"}: {unhealthy}})
	if err != nil {
		t.Fatalf("WithTaints: %v", err)
	}
	dr, err := tainted.DriverResources()
	if err != nil {
		t.Fatal(err)
	}
	got := dr.Pools["p"].Slices[0].Devices[1].Taints
	want := []resourceapi.DeviceTaint{{Key: testDriver + "/unhealthy", Value: "XidError79", Effect: resourceapi.DeviceTaintEffectNoExecute}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if len(inv.Pools[0].Devices[1].taints) != 0 {
		t.Error("WithTaints modified the original inventory")
	}
	if _, err := inv.WithTaints(map[DeviceID][]Taint{{Pool: "p", Device: "nope"}: {unhealthy}}); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("WithTaints(unknown) = %v, want ErrUnknownDevice", err)
	}
	if _, ok := HealthTaint(testDriver, HealthReport{Health: Healthy}, NoExecute); ok {
		t.Error("HealthTaint gave a taint for Healthy")
	}
}

func TestInventoryProblems(t *testing.T) {
	inv := &Inventory{Driver: "", Pools: []Pool{
		{Name: "p", AllNodes: true, NodeSelector: nil},
		{Name: "p", Devices: []*Device{nil, New("x").Taint(Taint{Key: "k"})}},
	}}
	err := inv.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	var got []string
	for _, p := range ve.Problems {
		got = append(got, p.Field)
	}
	want := []string{"driver", "pools[1].name", "pools[1].devices[0]", "pools[1].devices[1].taints[0].effect"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problem fields (-want +got):\n%s", diff)
	}
}

func TestSanitizeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpu-0", "gpu-0"},
		{"0000:3B:00.0", "0000-3b-00-0-"},
		{"GPU_0", "gpu-0-"},
		{"", "x-"},
	} {
		got := SanitizeName(tc.in)
		if len(got) < len(tc.want) || got[:len(tc.want)] != tc.want {
			t.Errorf("SanitizeName(%q) = %q, want prefix %q", tc.in, got, tc.want)
		}
	}
	if SanitizeName("GPU_0") == SanitizeName("gpu-0") {
		t.Error("different inputs gave the same name")
	}
}

func TestLookup(t *testing.T) {
	inv := &Inventory{Driver: testDriver, Pools: []Pool{{Name: "a", Devices: devices(2, nil)}, {Name: "b", Devices: devices(3, nil)}}}
	if d := inv.Lookup(DeviceID{"b", "dev-2"}); d == nil || d != inv.Pools[1].Devices[2] {
		t.Errorf("Lookup(b/dev-2) = %v", d)
	}
	if d := inv.Lookup(DeviceID{"a", "dev-2"}); d != nil {
		t.Errorf("Lookup(a/dev-2) = %v, want nil", d)
	}
	if d := (*Inventory)(nil).Lookup(DeviceID{"a", "dev-0"}); d != nil {
		t.Error("nil inventory found a device")
	}
}

// Slice names sort in publication order, so that an allocator that orders
// slices by name sees the devices in the inventory's priority order even
// with more than ten slices in a pool.
func TestSliceNamesSortInOrder(t *testing.T) {
	pool := Pool{Name: "node-1"}
	for i := range 20 * 128 {
		pool.Devices = append(pool.Devices, New(fmt.Sprintf("dev-%d", i)))
	}
	inv := &Inventory{Driver: "gpu.example.com", Pools: []Pool{pool}}
	slices := inv.ResourceSlices("node-1")
	if len(slices) < 11 {
		t.Fatalf("%d slices, want more than 10 for this test", len(slices))
	}
	for i := 1; i < len(slices); i++ {
		if slices[i-1].Name >= slices[i].Name {
			t.Errorf("slice %d %q does not sort before slice %d %q", i-1, slices[i-1].Name, i, slices[i].Name)
		}
	}
}
