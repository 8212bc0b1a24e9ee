// Command nvidia-dra-driver is drakit's reference NVIDIA DRA driver: full
// GPUs, static MIG and dynamic MIG devices, health from NVML's XID events,
// time-slicing, and the DeviceClasses for them. It runs on the real NVIDIA
// driver (libnvidia-ml) or, with -nvml-sim, on a simulated 8-GPU server.
// On real GPUs this build gives containers device nodes only; the image's
// build (examples/nvidia/cuda) adds the driver's libraries, binaries and
// hooks through nvidia-container-toolkit. See examples/nvidia/README.md
// for the flags and the simulated setup.
package main

import (
	"os"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		klog.Fatal(err)
	}
}

func run(args []string) error { return drivercmd.Run(args) }
