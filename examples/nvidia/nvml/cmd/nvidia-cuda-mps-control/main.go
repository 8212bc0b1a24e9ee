// Command nvidia-cuda-mps-control is the simulator's stand-in for
// NVIDIA's MPS control daemon and its control client
// (nvmlsim.MPSControlMain): "-f" runs the daemon of the GPU
// CUDA_VISIBLE_DEVICES names on the simulated server whose state file
// NVMLSIM_STATE names; without arguments it sends stdin's commands to the
// daemon of CUDA_MPS_PIPE_DIRECTORY.
package main

import (
	"os"

	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

func main() {
	os.Exit(nvmlsim.MPSControlMain(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
