package nvml_test

import (
	"errors"
	"fmt"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// A check that must leave the GPUs as it found them reads through
// ReadOnly: reads pass, every create and destroy is refused.
func ExampleReadOnly() {
	sim, err := nvmlsim.Open("", nvmlsim.WithServer("dgx-h100"))
	if err != nil {
		fmt.Println(err)
		return
	}
	nv := nvml.ReadOnly(sim)
	gpus, _ := nv.GPUs()
	fmt.Println(len(gpus), "GPUs,", gpus[0].ProductName)
	_, err = nv.CreateGPUInstance(0, 9, mig.Placement{Start: 0, Size: 4})
	fmt.Println(errors.Is(err, nvml.ErrReadOnly))
	// Output:
	// 8 GPUs, NVIDIA H100 80GB HBM3
	// true
}
