package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// The DeviceClasses for full GPUs, any MIG device, MPS shares of GPUs and
// two profiles, with
// the extended resource names old-style pods ask for.
func ExampleDeviceClasses() {
	for _, c := range nvdriver.DeviceClasses([]string{"1g.18gb", "3g.71gb"}) {
		er := "-"
		if c.Spec.ExtendedResourceName != nil {
			er = *c.Spec.ExtendedResourceName
		}
		fmt.Println(c.Name, er)
	}
	// Output:
	// gpu.nvidia.drakit.dev nvidia.com/gpu
	// mig.nvidia.drakit.dev -
	// shared.gpu.nvidia.drakit.dev nvidia.com/gpu.shared
	// mig-1g-18gb.nvidia.drakit.dev nvidia.com/mig-1g.18gb
	// mig-3g-71gb.nvidia.drakit.dev nvidia.com/mig-3g.71gb
}

// A simulated DGX H200 with GPU 0 whole, GPU 1 holding an
// administrator's MIG devices and GPU 2 named dynamic (the rest whole
// too): the
// node's pool, then GPU 2's own pool: the GPU whole (served with MIG
// mode off while none of its MIG devices is in use), then every placement
// of the advertised profiles in the planner's order (1g devices where
// they fragment least first).
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "nvidia-example")
	defer os.RemoveAll(dir)
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{
			MIGGPUs: []int{1, 2},
			Instances: []nvmlsim.Instance{
				{GPU: 1, Profile: "4g.71gb", Start: 0},
				{GPU: 1, Profile: "3g.71gb", Start: 4},
			},
		}),
	)
	if err != nil {
		panic(err)
	}
	d, err := nvdriver.New(
		sim,
		"node-1",
		nvdriver.WithStateDir(filepath.Join(dir, "state")),
		nvdriver.WithDynamicGPUs("2"),
	)
	if err != nil {
		panic(err)
	}
	inv, err := d.Inventory(context.Background())
	if err != nil {
		panic(err)
	}
	for _, p := range inv.Pools {
		devs := p.Devices
		fmt.Printf(
			"pool %s: %d devices: %s %s %s ... %s\n",
			p.Name,
			len(devs),
			devs[0].Name(),
			devs[1].Name(),
			devs[2].Name(),
			devs[len(devs)-1].Name(),
		)
	}
	// Output:
	// pool node-1: 8 devices: gpu-0 gpu-1-4g-71gb-0 gpu-1-3g-71gb-4 ... gpu-7
	// pool node-1/gpu-02: 15 devices: gpu-2 gpu-2-1g-18gb-6 gpu-2-1g-18gb-4 ... gpu-2-7g-141gb-0
}
