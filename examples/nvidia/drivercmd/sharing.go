package drivercmd

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlflag"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// MPSControlSimCommand, as the first argument, runs the simulator's
// stand-in for nvidia-cuda-mps-control (nvmlsim.MPSControlMain) instead
// of the driver: the driver runs itself so in simulation, as the real
// driver runs NVIDIA's program.
const MPSControlSimCommand = "mps-control-sim"

// sharingFlags are the shared GPUs' flags.
type sharingFlags struct {
	gpus                        *string
	memStep, memDefault         *string
	computeStep, computeDefault *int64
	mpsControl                  *string
}

func registerSharing(fs *flag.FlagSet) *sharingFlags {
	return &sharingFlags{
		gpus: fs.String("shared-gpus", "",
			`full GPUs (UUIDs or NVML indexes, comma-separated, or "all") also offered as MPS `+
				`shares of their memory and compute (class `+nvdriver.ClassShared+`): each `+
				`published whole and shared on one counter, so a GPU is one or the other; `+
				`empty (the default) or "none": no GPU is shared`),
		memStep: fs.String("share-memory-step", nvdriver.DefaultShareMemoryStep.String(),
			"a share's memory is a multiple of this (and at least it): a request in between is "+
				"rounded up"),
		memDefault: fs.String("share-memory-default", nvdriver.DefaultShareMemory.String(),
			"the memory of a share whose request names none (and of an nvidia.com/gpu.shared pod)"),
		computeStep: fs.Int64("share-compute-step", nvdriver.DefaultShareComputeStep,
			"a share's compute, in percent of the GPU, is a multiple of this"),
		computeDefault: fs.Int64("share-compute-default", nvdriver.DefaultShareCompute,
			"the compute percentage of a share whose request names none"),
		mpsControl: fs.String("mps-control", "",
			"the MPS control program the driver runs per shared GPU (default: "+
				"nvidia-cuda-mps-control from the PATH; with -nvml-sim the simulator's stand-in)"),
	}
}

// options are the driver options of the flags; nv is the NVML selection
// (the stand-in needs the simulator's state file).
func (f *sharingFlags) options(nv *nvmlflag.Flags) ([]nvdriver.Option, error) {
	step, err := resource.ParseQuantity(*f.memStep)
	if err != nil {
		return nil, fmt.Errorf("-share-memory-step: %w", err)
	}
	def, err := resource.ParseQuantity(*f.memDefault)
	if err != nil {
		return nil, fmt.Errorf("-share-memory-default: %w", err)
	}
	opts := []nvdriver.Option{nvdriver.WithShareMemory(step, def),
		nvdriver.WithShareCompute(*f.computeStep, *f.computeDefault)}
	if *f.gpus != "" {
		opts = append(opts, nvdriver.WithSharedGPUs(strings.Split(*f.gpus, ",")...))
	}
	switch {
	case *f.mpsControl != "":
		ctl := nvdriver.MPSControl{Command: strings.Fields(*f.mpsControl)}
		opts = append(opts, nvdriver.WithMPSControl(ctl))
	case nv.Sim != "":
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("MPS stand-in: %w", err)
		}
		if nv.SimState == "" && *f.gpus != "" {
			return nil, errors.New("-shared-gpus with -nvml-sim needs -nvml-sim-state: " +
				"the MPS stand-in is a process of its own")
		}
		state, err := filepath.Abs(nv.SimState)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nvdriver.WithMPSControl(nvdriver.MPSControl{
			Command: []string{self,
				MPSControlSimCommand}, Env: []string{nvmlsim.EnvSimState + "=" + state}}))
	}
	return opts, nil
}

// runMPSControlSim runs the stand-in and exits with its code.
func runMPSControlSim(args []string) {
	os.Exit(nvmlsim.MPSControlMain(args, os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
