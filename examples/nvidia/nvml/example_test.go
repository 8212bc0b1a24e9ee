package nvml_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// The simulator refuses what a real GPU refuses, with NVML's error class.
func Example() {
	sim, err := nvml.OpenSim("", nvml.WithServer("dgx-h100")) // in memory
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

// A driver records its intent, then creates the MIG device; it destroys
// it and forgets the intent when the claim is done.
func ExampleLifecycle() {
	dir, _ := os.MkdirTemp("", "nvml-example")
	defer os.RemoveAll(dir)
	sim, _ := nvml.OpenSim(filepath.Join(dir, "gpu-state.json"), nvml.WithServer("dgx-a100-40gb"))
	journal, _ := nvml.OpenJournal(filepath.Join(dir, "intents.json"))
	lc, _ := nvml.NewLifecycle(sim, journal)

	k := nvml.Key{GPU: 0, ProfileID: 14, Start: 2} // 2g.10gb at memory slices 2-3
	if err := journal.Record(k); err != nil {      // before the create
		panic(err)
	}
	dev, err := lc.Create(k)
	if err != nil {
		panic(err)
	}
	fmt.Println(dev.Profile, dev.Complete(), strings.HasPrefix(dev.UUID, "MIG-"))

	if err := lc.Destroy(k); err != nil {
		panic(err)
	}
	_ = journal.Forget(k) // after the destroy
	_, found, _ := lc.Find(k)
	fmt.Println("still there:", found)
	// Output:
	// 2g.10gb true true
	// still there: false
}

// A compute instance that fails leaves no GPU instance behind.
func ExampleSim_InjectFault() {
	sim, _ := nvml.OpenSim("", nvml.WithServer("dgx-b200"))
	lc, _ := nvml.NewLifecycle(sim, nvml.OwnerFunc(func(nvml.Key) (bool, error) { return true, nil }))

	_ = sim.InjectFault(nvml.Fault{Op: nvml.FaultCreateComputeInstance, GPU: -1, Code: nvml.ErrorUnknown})
	_, err := lc.Create(nvml.Key{GPU: 1, ProfileID: 0, Start: 0}) // 7g.180gb
	fmt.Println(err)
	gis, _ := sim.GPUInstances(1)
	fmt.Println(len(gis), "GPU instances")
	// Output:
	// create MIG device GPU 1 profile 0 at 0 (GPU instance rolled back): create compute instance of profile 4 in GPU instance 1 on GPU 1: ERROR_UNKNOWN: injected fault
	// 0 GPU instances
}

// An XID raised on the simulated server reaches every health stream.
func ExampleSim_RaiseXID() {
	sim, _ := nvml.OpenSim("", nvml.WithPollInterval(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, _ := sim.WatchHealth(ctx)
	_ = sim.RaiseXID(3, 79, -1, -1)
	fmt.Println(<-events)
	// Output:
	// GPU 3: XID 79
}
