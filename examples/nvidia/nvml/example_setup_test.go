package nvml_test

import (
	"fmt"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// A new simulated server starts as an administrator left it: MIG mode on
// GPUs 2-7 and two MIG devices on GPU 2, made under the real rules.
func ExampleWithSetup() {
	migGPUs, _ := nvml.ParseGPUList("2-7")
	instances, _ := nvml.ParseSimInstances("2:4g.71gb@0,2:3g.71gb@4")
	sim, err := nvml.OpenSim("", nvml.WithServer("dgx-h200"), nvml.WithSetup(nvml.SimSetup{MIGGPUs: migGPUs, Instances: instances}))
	if err != nil {
		panic(err)
	}
	for _, gpu := range []int{0, 2} {
		mode, _ := sim.MigMode(gpu)
		gis, _ := sim.GPUInstances(gpu)
		fmt.Printf("GPU %d: MIG %v, %d MIG devices\n", gpu, mode.Current, len(gis))
	}
	_ = sim.SetTimeSlice(0, nvml.TimeSliceLong)
	ts, _ := sim.TimeSlice(0)
	fmt.Println("GPU 0 time-slice:", ts)

	// 3g.71gb cannot start at memory slice 2: refused like on a GPU.
	_, err = nvml.OpenSim("", nvml.WithServer("dgx-h200"), nvml.WithSetup(nvml.SimSetup{Instances: []nvml.SimInstance{{GPU: 0, Profile: "3g.71gb", Start: 2}}}))
	fmt.Println(err != nil)
	// Output:
	// GPU 0: MIG false, 0 MIG devices
	// GPU 2: MIG true, 2 MIG devices
	// GPU 0 time-slice: Long
	// true
}
