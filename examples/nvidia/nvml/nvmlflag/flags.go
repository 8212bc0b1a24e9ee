// Package nvmlflag selects the NVIDIA example's NVML backend from a command
// line: the real GPU driver by default, the simulator with -nvml-sim.
package nvmlflag

import (
	"flag"
	"fmt"
	"strings"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// Flags selects the backend from a command line: the real GPU driver by
// default, the simulator with -nvml-sim.
type Flags struct {
	// Sim is the simulated server model; empty selects the real backend.
	Sim string
	// SimState is the simulator's state file; empty keeps the state in
	// memory.
	SimState string
	// Library is the NVML library path for the real backend; empty is
	// "libnvidia-ml.so.1".
	Library string
	// SimMIGGPUs is the GPUs with MIG mode enabled in a new simulated
	// state, as ParseGPUList reads it; empty enables it on all.
	SimMIGGPUs string
	// SimInstances is the administrator's MIG devices in a new simulated
	// state, as ParseSimInstances reads them.
	SimInstances string
}

// Register adds -nvml-sim, -nvml-sim-state and -nvml-library to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(
		&f.Sim,
		"nvml-sim",
		f.Sim,
		"simulate NVML on a server model instead of using the GPU driver: "+strings.Join(
			nvmlsim.ServerNames(),
			", ",
		),
	)
	fs.StringVar(
		&f.SimState,
		"nvml-sim-state",
		f.SimState,
		"state file of the simulated NVML (MIG instances survive restarts and are shared by "+
			"processes); empty keeps it in memory",
	)
	fs.StringVar(
		&f.SimMIGGPUs,
		"nvml-sim-mig-gpus",
		f.SimMIGGPUs,
		"GPUs with MIG mode enabled when the simulated state is created: all, none, or indices "+
			"and ranges such as 2-7 (default all)",
	)
	fs.StringVar(
		&f.SimInstances,
		"nvml-sim-instances",
		f.SimInstances,
		"MIG devices an administrator made, created with the simulated state: "+
			"gpu:profile@start,... e.g. 2:4g.71gb@0,2:3g.71gb@4",
	)
	fs.StringVar(
		&f.Library,
		"nvml-library",
		f.Library,
		"path of libnvidia-ml for the real backend (default: libnvidia-ml.so.1 from the "+
			"loader's path)",
	)
}

// Open opens the backend the flags select.
func (f *Flags) Open() (nvml.Interface, error) {
	if f.Sim != "" {
		opts, err := f.simOptions()
		if err != nil {
			return nil, err
		}
		s, err := nvmlsim.Open(f.SimState, opts...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	var opts []nvml.RealOption
	if f.Library != "" {
		opts = append(opts, nvml.WithLibraryPath(f.Library))
	}
	r, err := nvml.OpenReal(opts...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// simOptions turns the simulator flags into nvmlsim.Open options.
func (f *Flags) simOptions() ([]nvmlsim.Option, error) {
	opts := []nvmlsim.Option{nvmlsim.WithServer(f.Sim)}
	var su nvmlsim.Setup
	if f.SimMIGGPUs != "" {
		gpus, err := nvmlsim.ParseGPUList(f.SimMIGGPUs)
		if err != nil {
			return nil, fmt.Errorf("-nvml-sim-mig-gpus: %w", err)
		}
		su.MIGGPUs = gpus
	}
	ins, err := nvmlsim.ParseInstances(f.SimInstances)
	if err != nil {
		return nil, fmt.Errorf("-nvml-sim-instances: %w", err)
	}
	su.Instances = ins
	if su.MIGGPUs != nil || len(su.Instances) > 0 {
		opts = append(opts, nvmlsim.WithSetup(su))
	}
	return opts, nil
}
