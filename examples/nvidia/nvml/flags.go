package nvml

import (
	"flag"
	"strings"
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
}

// Register adds -nvml-sim, -nvml-sim-state and -nvml-library to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Sim, "nvml-sim", f.Sim, "simulate NVML on a server model instead of using the GPU driver: "+strings.Join(SimServerNames(), ", "))
	fs.StringVar(&f.SimState, "nvml-sim-state", f.SimState, "state file of the simulated NVML (MIG instances survive restarts and are shared by processes); empty keeps it in memory")
	fs.StringVar(&f.Library, "nvml-library", f.Library, "path of libnvidia-ml for the real backend (default: libnvidia-ml.so.1 from the loader's path)")
}

// Open opens the backend the flags select.
func (f *Flags) Open() (Interface, error) {
	if f.Sim != "" {
		s, err := OpenSim(f.SimState, WithServer(f.Sim))
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	var opts []RealOption
	if f.Library != "" {
		opts = append(opts, WithLibraryPath(f.Library))
	}
	r, err := OpenReal(opts...)
	if err != nil {
		return nil, err
	}
	return r, nil
}
