package nvmlsim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// The simulator refuses what a real GPU refuses, with NVML's error class.
func Example() {
	sim, err := nvmlsim.Open("", nvmlsim.WithServer("dgx-h100")) // in memory
	if err != nil {
		panic(err)
	}
	gpus, _ := sim.GPUs()
	fmt.Println(len(gpus), "x", gpus[0].ProductName, gpus[0].PCIBusID)

	// 3g.40gb (profile 9) on memory slices 4-7 of GPU 0.
	if _, err := sim.CreateGPUInstance(0, 9, mig.Placement{Start: 4, Size: 4}); err != nil {
		panic(err)
	}
	// 2g.20gb (profile 14) on slices 4-5 overlaps it.
	_, err = sim.CreateGPUInstance(0, 14, mig.Placement{Start: 4, Size: 2})
	fmt.Println(errors.Is(err, nvml.ErrInsufficientResources), nvml.CodeOf(err))
	fmt.Println(err)
	// Output:
	// 8 x NVIDIA H100 80GB HBM3 0000:1b:00.0
	// true ERROR_INSUFFICIENT_RESOURCES
	// create GPU instance of profile 14 at 4:2 on GPU 0: ERROR_INSUFFICIENT_RESOURCES: memory slices 4-5 overlap GPU instance 1 (3g.40gb at 4:4)
}

// An XID raised on the simulated server reaches every health stream.
func ExampleSim_RaiseXID() {
	sim, _ := nvmlsim.Open("", nvmlsim.WithPollInterval(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, _ := sim.WatchHealth(ctx)
	_ = sim.RaiseXID(3, 79, -1, -1)
	fmt.Println(<-events)
	// Output:
	// GPU 3: XID 79
}

// A new simulated server starts as an administrator left it: MIG mode on
// GPUs 2-7 and two MIG devices on GPU 2, made under the real rules.
func ExampleWithSetup() {
	migGPUs, _ := nvmlsim.ParseGPUList("2-7")
	instances, _ := nvmlsim.ParseInstances("2:4g.71gb@0,2:3g.71gb@4")
	sim, err := nvmlsim.Open(
		"",
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: migGPUs, Instances: instances}),
	)
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
	_, err = nvmlsim.Open(
		"",
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(
			nvmlsim.Setup{Instances: []nvmlsim.Instance{{GPU: 0, Profile: "3g.71gb", Start: 2}}},
		),
	)
	fmt.Println(err != nil)
	// Output:
	// GPU 0: MIG false, 0 MIG devices
	// GPU 2: MIG true, 2 MIG devices
	// GPU 0 time-slice: Long
	// true
}
