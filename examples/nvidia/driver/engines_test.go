package driver_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// TestMIGEngineCapacities checks that every MIG device, static and
// dynamic, carries its profile's engines as NVIDIA's driver publishes
// them, and that claims select on them through the scheduler's own
// allocator: a video claim (decoders) gets a profile that has them, an
// optical-flow claim gets the only advertised profile with an OFA (the
// 7g), a claim for more decoders than any profile has gets nothing.
func TestMIGEngineCapacities(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// A DGX H200: GPUs 0-1 full, 2 static MIG (4g + 3g), 3-7 dynamic MIG.
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{
			MIGGPUs: []int{2, 3, 4, 5, 6, 7},
			Instances: []nvmlsim.Instance{
				{GPU: 2, Profile: "4g.71gb", Start: 0},
				{GPU: 2, Profile: "3g.71gb", Start: 4},
			},
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	d, err := nvdriver.New(
		sim,
		"node-1",
		nvdriver.WithStateDir(filepath.Join(dir, "state")),
		nvdriver.WithDynamicGPUs("3", "4", "5", "6", "7"),
	)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h200 := sim.Product()
	engines := func(dev string) mig.Engines {
		t.Helper()
		ref, err := mig.ParseDeviceName(dev)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := h200.Profile(ref.Profile)
		if err != nil {
			t.Fatalf("device %s: %v", dev, err)
		}
		return pr.Engines
	}
	slices := inv.ResourceSlices("node-1")
	modes := map[string]int{}
	for _, s := range slices {
		for _, dev := range s.Spec.Devices {
			typ := dev.Attributes[mig.AttrType]
			if typ.StringValue == nil || *typ.StringValue != nvdriver.TypeMIG {
				continue
			}
			modes[*dev.Attributes[nvdriver.AttrMIGMode].StringValue]++
			for name, want := range engines(dev.Name).Capacities() {
				got, ok := dev.Capacity[resourceapi.QualifiedName(name)]
				if !ok || got.Value.Cmp(want) != 0 {
					t.Errorf(
						"%s: capacity %s = %v (published: %t), want %s",
						dev.Name,
						name,
						got.Value.String(),
						ok,
						want.String(),
					)
				}
			}
		}
	}
	if modes[nvdriver.ModeStatic] == 0 || modes[nvdriver.ModeDynamic] == 0 {
		t.Fatalf("MIG devices by mode %v: want static and dynamic ones", modes)
	}

	const isMIG = `device.attributes["DRIVER"].type == "mig" && `
	tests := []struct {
		name, selector string
		want           func(e mig.Engines) bool // nil: nothing fits
	}{
		{
			"video",
			isMIG + `device.capacity["DRIVER"].decoders.compareTo(quantity("3")) >= 0`,
			func(e mig.Engines) bool { return e.Decoders >= 3 },
		},
		{
			"optical flow",
			isMIG + `device.capacity["DRIVER"].ofaEngines.isGreaterThan(quantity("0"))`,
			func(e mig.Engines) bool { return e.OfaEngines >= 1 },
		},
		{
			"SMs",
			isMIG + `device.capacity["DRIVER"].multiprocessors.compareTo(quantity("60")) >= 0`,
			func(e mig.Engines) bool { return e.Multiprocessors >= 60 },
		},
		{
			"more decoders than a GPU has",
			isMIG + `device.capacity["DRIVER"].decoders.compareTo(quantity("8")) >= 0`,
			nil,
		},
	}
	for _, tc := range tests {
		res, err := newOneDevice(
			"node-1",
			strings.ReplaceAll(tc.selector, "DRIVER", nvdriver.DriverName),
		).allocate(ctx, slices)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.want == nil {
			if len(res) != 0 {
				t.Errorf("%s: allocated %v, want nothing", tc.name, res[0].Devices.Results)
			}
			continue
		}
		if len(res) != 1 || len(res[0].Devices.Results) != 1 {
			t.Fatalf("%s: allocation %v, want one device", tc.name, res)
		}
		dev := res[0].Devices.Results[0].Device
		if e := engines(dev); !tc.want(e) {
			t.Errorf("%s: got %s with engines %+v", tc.name, dev, e)
		}
		t.Logf("%s: %s", tc.name, dev)
	}
}

// BenchmarkMIGEngineSliceBytes measures what the six engine capacities
// cost a node's slices as stored and sent (JSON and protobuf bytes of the
// reference driver's ResourceSlices with default flags, a DGX H100 with
// every GPU dynamic), against the same slices without them in the same
// run:
//
//	go test -run '^$' -bench MIGEngineSliceBytes ./examples/nvidia/driver
//
// The scheduler's memory for them is the fleet benchmark's "slices
// KiB/node" (drakit mig bench -fleet -models shipped).
func BenchmarkMIGEngineSliceBytes(b *testing.B) {
	sim, err := nvmlsim.Open("", nvmlsim.WithServer("dgx-h100"))
	if err != nil {
		b.Fatal(err)
	}
	d, err := nvdriver.New(sim, "node-1", nvdriver.WithStateDir(b.TempDir()), dynamicMIG(nil))
	if err != nil {
		b.Fatal(err)
	}
	inv, err := d.Inventory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	size := func(rs []*resourceapi.ResourceSlice) (js, pb int) {
		for _, s := range rs {
			j, err := json.Marshal(s)
			if err != nil {
				b.Fatal(err)
			}
			js += len(j)
			pb += s.Size()
		}
		return js, pb
	}
	var with, without [2]int
	for range b.N {
		rs := inv.ResourceSlices("node-1")
		with[0], with[1] = size(rs)
		for _, s := range rs {
			for _, dev := range s.Spec.Devices {
				for _, n := range []string{
					mig.CapMultiprocessors,
					mig.CapCopyEngines,
					mig.CapDecoders,
					mig.CapEncoders,
					mig.CapJpegEngines,
					mig.CapOfaEngines,
				} {
					delete(dev.Capacity, resourceapi.QualifiedName(n))
				}
			}
		}
		without[0], without[1] = size(rs)
	}
	b.ReportMetric(float64(with[0]), "json-bytes/node")
	b.ReportMetric(float64(with[1]), "proto-bytes/node")
	b.ReportMetric(float64(with[0])/float64(without[0]), "json-ratio")
	b.ReportMetric(float64(with[1])/float64(without[1]), "proto-ratio")
}
