package gpucheck_test

import (
	"fmt"
	"strings"

	"github.com/drakit/drakit/examples/nvidia/gpucheck"
)

// The probe calls the CUDA driver API through dlopen; the stand-in
// libcuda defines the calls it makes.
func Example() {
	for _, f := range []string{"cuInit", "cuDeviceGetCount", "cuDeviceGetName"} {
		fmt.Println(
			f,
			strings.Contains(gpucheck.ProbeSource, `"`+f+`"`),
			strings.Contains(gpucheck.StandInCUDASource, "int "+f+"("),
		)
	}
	fmt.Println(gpucheck.ProbePath)
	// Output:
	// cuInit true true
	// cuDeviceGetCount true true
	// cuDeviceGetName true true
	// /gpu-check/cuda-probe
}
