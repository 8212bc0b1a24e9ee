package driver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// A driver records its intent, then creates the MIG device; it destroys
// it and forgets the intent when the claim is done.
func ExampleLifecycle() {
	dir, _ := os.MkdirTemp("", "nvml-example")
	defer os.RemoveAll(dir)
	sim, _ := nvmlsim.Open(filepath.Join(dir, "gpu-state.json"), nvmlsim.WithServer("dgx-a100-40gb"))
	journal, _ := driver.OpenJournal(filepath.Join(dir, "intents.json"))
	lc, _ := driver.NewLifecycle(sim, journal)

	k := driver.Key{GPU: 0, ProfileID: 14, Start: 2} // 2g.10gb at memory slices 2-3
	if err := journal.Record(k); err != nil {        // before the create
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
func ExampleLifecycle_rollback() {
	sim, _ := nvmlsim.Open("", nvmlsim.WithServer("dgx-b200"))
	lc, _ := driver.NewLifecycle(sim, driver.OwnerFunc(func(driver.Key) (bool, error) { return true, nil }))

	_ = sim.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: -1, Code: nvml.ErrorUnknown})
	_, err := lc.Create(driver.Key{GPU: 1, ProfileID: 0, Start: 0}) // 7g.180gb
	fmt.Println(err)
	gis, _ := sim.GPUInstances(1)
	fmt.Println(len(gis), "GPU instances")
	// Output:
	// create MIG device GPU 1 profile 0 at 0 (GPU instance rolled back): create compute instance of profile 4 in GPU instance 1 on GPU 1: ERROR_UNKNOWN: injected fault
	// 0 GPU instances
}
