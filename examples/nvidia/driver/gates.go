package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// GPUReadiness is what decides, for one GPU, whether the driver's
// dynamic MIG can serve it: what the DynamicMIG and DynamicMIGWholeGPU
// feature gates (package drivercmd) turn on, read without changing
// anything.
type GPUReadiness struct {
	// Index, UUID, ProductName and Architecture are NVML's.
	Index        int    `json:"index"`
	UUID         string `json:"uuid"`
	ProductName  string `json:"productName"`
	Architecture string `json:"architecture"`
	// ComputeCapability is "major.minor".
	ComputeCapability string `json:"computeCapability"`
	// MIG is true for a GPU with MIG; MIGMode is its mode then.
	MIG     bool         `json:"mig"`
	MIGMode nvml.MigMode `json:"migMode"`
	// Dynamic is true when the driver owns the GPU's MIG devices now.
	Dynamic bool `json:"dynamic"`
	// DynamicMIG is "" when dynamic MIG can serve the GPU, else why not.
	DynamicMIG string `json:"dynamicMIG,omitempty"`
	// Whole is "" when the driver can offer the GPU whole now
	// (DynamicMIGWholeGPU: its MIG mode changes without a reset, it is
	// no vGPU guest's, no other NVML client holds it), else why not.
	Whole string `json:"whole,omitempty"`
	// Processes are the processes holding the GPU (nvml.ProcessLister).
	Processes []nvml.Process `json:"processes,omitempty"`
}

// Readiness reports, per GPU, what decides whether dynamic MIG and
// whole-GPU use of a dynamic GPU can serve it on this node, read now
// (MIG mode, the processes holding it): what the GPU check prints for
// the gates. procRoot is the kernel's view (/proc); a GPU with MIG needs
// the nvidia-caps character device major there for a container to get
// its MIG devices.
func (d *Driver) Readiness() []GPUReadiness {
	_, capsErr := capsMajor(filepath.Join(d.o.procRoot, "devices"))
	if *d.o.simulated {
		capsErr = nil // simulated containers get no device nodes
	} else if capsErr == nil {
		caps := filepath.Join(d.o.procRoot, "driver/nvidia/capabilities")
		if _, err := os.Stat(caps); err != nil {
			capsErr = fmt.Errorf("MIG capabilities: %w", err)
		}
	}
	var out []GPUReadiness
	gpus := d.hw()
	for i := range gpus {
		g := &gpus[i]
		r := GPUReadiness{
			Index:             g.Index,
			UUID:              g.UUID,
			ProductName:       g.ProductName,
			Architecture:      g.Architecture,
			ComputeCapability: g.CUDAComputeCapability,
			MIG:               g.product != nil,
			Dynamic:           d.dynamic(g),
		}
		switch {
		case g.broken != nil:
			r.DynamicMIG = fmt.Sprintf("it cannot be read: %v", g.broken)
		case g.product == nil:
			r.DynamicMIG = "it has no MIG"
		default:
			m, err := d.nv.MigMode(g.Index)
			r.MIGMode = m
			switch {
			case err != nil:
				r.DynamicMIG = fmt.Sprintf("its MIG mode cannot be read: %v", err)
			case capsErr != nil:
				r.DynamicMIG = fmt.Sprintf("containers cannot get its MIG devices: %v", capsErr)
			case !m.Current && major(g.cc) < 9:
				r.DynamicMIG = "its MIG mode is off, and turning it on needs a GPU reset on " +
					"this architecture"
			}
		}
		r.Whole = "it has no MIG (a full GPU)"
		if g.product != nil && g.broken == nil {
			d.readOthers(g)
			r.Whole = ""
			if ok, why := g.wholeOK(); !ok {
				r.Whole = why
			} else if why := d.heldByOthers(g); why != "" {
				r.Whole = why
			}
			g.others.mu.Lock()
			r.Processes = slices.Clone(g.others.procs)
			g.others.mu.Unlock()
		}
		out = append(out, r)
	}
	return out
}

// major is the major number of a semver compute capability, 0 when it
// has none.
func major(cc string) int {
	n, err := strconv.Atoi(strings.SplitN(cc, ".", 2)[0])
	if err != nil {
		return 0
	}
	return n
}
