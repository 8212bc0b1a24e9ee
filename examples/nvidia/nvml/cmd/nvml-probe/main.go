// Command nvml-probe prints what the NVML backend of the reference NVIDIA
// driver sees: driver and CUDA versions, GPUs, MIG mode, GPU instance
// profiles with their placements, and the GPU and compute instances that
// exist; and it compares each MIG-capable GPU's profiles with the mig
// catalog (nvml.CatalogDiff). It only reads: it never
// changes MIG mode, creates or destroys instances, or resets a GPU, so it
// is safe on a production node.
//
//	nvml-probe                      # the real GPUs (needs libnvidia-ml)
//	nvml-probe -nvml-sim=dgx-h100   # the simulator
//
// It exits 1 when a query failed or a GPU's profiles differ from the
// catalog.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlflag"
)

// reader is the read-only part of nvml.Interface the probe uses: holding
// only these methods, it cannot change a GPU.
type reader interface {
	System() (nvml.System, error)
	GPUs() ([]nvml.GPU, error)
	MigMode(gpu int) (nvml.MigMode, error)
	GPUInstanceProfiles(gpu int) ([]nvml.GPUInstanceProfile, error)
	GPUInstances(gpu int) ([]nvml.GPUInstance, error)
}

func main() {
	var f nvmlflag.Flags
	f.Register(flag.CommandLine)
	flag.Parse()
	nv, err := f.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvml-probe:", err)
		os.Exit(2)
	}
	defer nv.Close()
	if problems := probe(os.Stdout, nv); problems > 0 {
		fmt.Fprintf(os.Stderr, "nvml-probe: %d problems\n", problems)
		os.Exit(1)
	}
}

// probe prints the report to w and returns the number of problems (failed
// queries, differences from the catalog).
func probe(w io.Writer, nv reader) int {
	problems := 0
	fail := func(format string, args ...any) {
		problems++
		fmt.Fprintf(w, "  ERROR: "+format+"\n", args...)
	}
	sys, err := nv.System()
	if err != nil {
		fail("system: %v", err)
	} else {
		fmt.Fprintf(w, "driver %s, CUDA %s\n", sys.DriverVersion, sys.CUDAVersion)
	}
	gpus, err := nv.GPUs()
	if err != nil {
		fail("GPUs: %v", err)
		return problems
	}
	for _, g := range gpus {
		if g.Err != nil {
			fmt.Fprintf(w, "\nGPU %d: %s\n", g.Index, g.UUID)
			fail("GPU %d cannot be read: %v", g.Index, g.Err)
			continue
		}
		fmt.Fprintf(
			w,
			"\nGPU %d: %s (%s, brand %s, compute capability %s, %d MiB)\n  %s  bus %s  minor %d\n",
			g.Index,
			g.ProductName,
			g.Architecture,
			g.Brand,
			g.CUDAComputeCapability,
			g.MemoryMiB,
			g.UUID,
			g.PCIBusID,
			g.Minor,
		)
		mode, err := nv.MigMode(g.Index)
		if err != nil {
			fmt.Fprintf(w, "  MIG: %v\n", err)
			continue // a GPU without MIG
		}
		fmt.Fprintf(
			w,
			"  MIG mode: current %s, pending %s\n",
			onOff(mode.Current),
			onOff(mode.Pending),
		)
		profs, err := nv.GPUInstanceProfiles(g.Index)
		if err != nil {
			fail("GPU instance profiles: %v", err)
			continue
		}
		if len(profs) == 0 {
			fmt.Fprintln(w, "  NVML reports no GPU instance profiles")
		}
		fmt.Fprintf(
			w,
			"  %-4s %-14s %6s %5s %10s  %s\n",
			"ID",
			"profile",
			"slices",
			"max",
			"memory MiB",
			"placements (start:size)",
		)
		for _, p := range profs {
			var pls []string
			for _, pl := range p.Placements {
				pls = append(pls, fmt.Sprintf("%d:%d", pl.Start, pl.Size))
			}
			fmt.Fprintf(
				w,
				"  %-4d %-14s %6d %5d %10d  %s\n",
				p.ID,
				p.Name,
				p.SliceCount,
				p.InstanceCount,
				p.MemoryMiB,
				strings.Join(pls, " "),
			)
		}
		diffs, err := nvml.CatalogDiff(g.ProductName, profs)
		switch {
		case err != nil:
			fail("compare with the mig catalog: %v", err)
		case len(diffs) == 0:
			fmt.Fprintln(
				w,
				"  mig catalog: matches what NVML reports (IDs, slices, counts, placements)",
			)
		default:
			for _, d := range diffs {
				fail("mig catalog differs: %s", d)
			}
		}
		if !mode.Current {
			continue
		}
		gis, err := nv.GPUInstances(g.Index)
		if err != nil {
			fail("GPU instances: %v", err)
			continue
		}
		names := map[int]string{}
		for _, p := range profs {
			names[p.ID] = p.Name
		}
		fmt.Fprintf(w, "  %d GPU instances\n", len(gis))
		for _, gi := range gis {
			fmt.Fprintf(
				w,
				"    GI %d %s@%d:%d",
				gi.ID,
				names[gi.ProfileID],
				gi.Placement.Start,
				gi.Placement.Size,
			)
			if len(gi.ComputeInstances) == 0 {
				fmt.Fprint(w, " (no compute instance)")
			}
			for _, ci := range gi.ComputeInstances {
				fmt.Fprintf(
					w,
					"  CI %d profile %d slices %d:%d %s",
					ci.ID,
					ci.ProfileID,
					ci.Placement.Start,
					ci.Placement.Size,
					ci.UUID,
				)
			}
			fmt.Fprintln(w)
		}
	}
	return problems
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}
