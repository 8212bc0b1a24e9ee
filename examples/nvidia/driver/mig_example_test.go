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

// Claims hold a MIG device through the journal; HoldUnless records a hold
// unless a check on the recorded intents refuses it, and Drop destroys a
// device when its last holder goes, forgetting the intent only after the
// destroy.
func ExampleJournal_Drop() {
	dir, _ := os.MkdirTemp("", "nvml-example")
	defer os.RemoveAll(dir)
	sim, _ := nvmlsim.Open("", nvmlsim.WithServer("dgx-h100"))
	journal, _ := driver.OpenJournal(filepath.Join(dir, "intents.json"))
	lc, _ := driver.NewLifecycle(sim, journal)

	k := driver.Key{GPU: 3, UUID: "GPU-3", ProfileID: 19, Start: 6} // 1g.10gb at 6
	for _, claim := range []string{"a", "b"} {
		err := journal.HoldUnless(k, claim, func(in []driver.Intent) error {
			for _, i := range in {
				if i.Whole && i.UUID == k.UUID && len(i.Claims) > 0 {
					return fmt.Errorf("GPU %s is in use whole", k.UUID)
				}
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	if _, err := lc.Create(k); err != nil {
		panic(err)
	}
	destroy := func(k driver.Key) error { return lc.Destroy(k) }
	for _, claim := range []string{"a", "b"} {
		done, err := journal.Drop(claim, destroy)
		gis, _ := sim.GPUInstances(3)
		fmt.Printf("drop %s: destroyed %d, %d GPU instances left, %v\n", claim, len(done), len(gis), err)
	}
	// Output:
	// drop a: destroyed 0, 1 GPU instances left, <nil>
	// drop b: destroyed 1, 0 GPU instances left, <nil>
}
