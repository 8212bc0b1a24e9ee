package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// A GPU the administrator names dynamic: a claim's MIG device is made at
// its prepare and destroyed at its unprepare; a GPU not named is never
// changed.
func ExampleWithDynamicGPUs() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "nvidia-example")
	defer os.RemoveAll(dir)
	sim, _ := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer("dgx-h100"))
	d, err := driver.New(
		sim,
		"node-1",
		driver.WithStateDir(filepath.Join(dir, "state")),
		driver.WithDynamicGPUs("3"),
	)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	_ = d.Reconcile(ctx, nil) // at start, with the claims the runtime holds

	c := kit.Claim{ClaimRef: kit.ClaimRef{UID: "uid-1", Namespace: "default", Name: "train"}}
	devs := []kit.AllocatedDevice{
		{Request: "gpu", Pool: "node-1/gpu-03", Device: "gpu-3-1g-10gb-6"},
	}
	if err := d.PrepareClaim(ctx, c, devs); err != nil {
		panic(err)
	}
	gis, _ := sim.GPUInstances(3)
	fmt.Println("prepared:", len(gis), "MIG device on GPU 3")
	err = d.PrepareClaim(
		ctx,
		kit.Claim{ClaimRef: kit.ClaimRef{UID: "uid-2"}},
		[]kit.AllocatedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-2-1g-10gb-6"}},
	)
	fmt.Println("GPU 2:", err)
	_ = d.UnprepareClaim(ctx, c.ClaimRef, devs)
	gis, _ = sim.GPUInstances(3)
	fmt.Println("unprepared:", len(gis), "MIG devices on GPU 3")
	// Output:
	// prepared: 1 MIG device on GPU 3
	// GPU 2: device node-1/gpu-2-1g-10gb-6 is not one of this driver's devices now
	// unprepared: 0 MIG devices on GPU 3
}
