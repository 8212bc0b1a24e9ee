package drivercmd

import (
	"errors"
	"flag"
	"fmt"

	"k8s.io/component-base/featuregate"

	"github.com/drakit/drakit/driver/driverflag"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// The driver's feature gates (--feature-gates, the chart's featureGates):
// its experimental parts, each with a stage as Kubernetes' gates have
// one. An alpha gate is off by default, a beta gate on. A gate says what
// has run: a part stays alpha until its code has run on the hardware it
// changes, which for the MIG gates is the GPU check
// (examples/nvidia/gpucheck) passing on a Hopper node; the simulator
// enforces NVML's rules as documented, not a GPU's behaviour.
const (
	// DynamicMIG (alpha, off): the driver owns the MIG devices of
	// dynamic GPUs, makes them at prepare and destroys them at
	// unprepare. Off, no GPU is dynamic: the same as
	// -dynamic-mig-gpus=none, recorded in the state folder like it
	// (turning the gate on again needs -dynamic-mig-gpus to name the
	// dynamic GPUs), and -dynamic-mig-gpus naming GPUs is refused.
	// NVIDIA keeps its own DynamicMIG gate alpha and off as well.
	DynamicMIG featuregate.Feature = "DynamicMIG"
	// DynamicMIGWholeGPU (alpha, off): a dynamic GPU none of whose MIG
	// devices is in use, and which no other NVML client holds, is also
	// offered whole, the driver turning its MIG mode off while a claim
	// holds it. Off, dynamic GPUs are offered as MIG devices only
	// (nvdriver.WithoutWholeDynamicGPUs).
	DynamicMIGWholeGPU featuregate.Feature = "DynamicMIGWholeGPU"
	// MIGDefragmenter (alpha, off): the defrag-controller command (the
	// chart's defragmenter Deployment) runs; it evicts pods. Off, it
	// refuses to start, and the chart does not deploy it.
	MIGDefragmenter featuregate.Feature = "MIGDefragmenter"
)

// FeatureGates are the driver's gates with their stage and default.
func FeatureGates() map[featuregate.Feature]featuregate.FeatureSpec {
	return map[featuregate.Feature]featuregate.FeatureSpec{
		DynamicMIG:         {Default: false, PreRelease: featuregate.Alpha},
		DynamicMIGWholeGPU: {Default: false, PreRelease: featuregate.Alpha},
		MIGDefragmenter:    {Default: false, PreRelease: featuregate.Alpha},
	}
}

// addGates adds the driver's gates to the standard flags.
func addGates(std *driverflag.Flags) {
	if err := std.AddFeatureGates(FeatureGates()); err != nil {
		panic(err) // constant gates on a fresh gate set
	}
}

// gateOptions are the driver options the gates stand for, given
// -dynamic-mig-gpus' value.
func gateOptions(gates featuregate.FeatureGate, dynamicGPUs string) ([]nvdriver.Option, error) {
	var opts []nvdriver.Option
	if !gates.Enabled(DynamicMIG) {
		if dynamicGPUs != "" && dynamicGPUs != "none" {
			return nil, fmt.Errorf(
				"-dynamic-mig-gpus=%s: the %s feature gate is off, so no GPU is dynamic: leave "+
					"-dynamic-mig-gpus empty (or none), or turn the gate on",
				dynamicGPUs,
				DynamicMIG,
			)
		}
		opts = append(opts, nvdriver.WithDynamicGPUs())
	}
	if !gates.Enabled(DynamicMIGWholeGPU) {
		opts = append(opts, nvdriver.WithoutWholeDynamicGPUs())
	}
	return opts, nil
}

// parseComponent adds --feature-gates (with the driver's gates) and the
// logging flags to the flag set of a command beside the driver (the
// webhook, the defragmenter), parses args and applies the logging flags.
func parseComponent(fs *flag.FlagSet, args []string) (*driverflag.Flags, error) {
	std := driverflag.RegisterLogging(fs)
	addGates(std)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := std.ApplyLogging(); err != nil {
		return nil, err
	}
	return std, nil
}

// errGateOff is returned by a command whose feature gate is off.
var errGateOff = errors.New("feature gate is off")
