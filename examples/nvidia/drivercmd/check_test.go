package drivercmd_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

// TestCheck runs -check on the simulated DGX H200 of the README (GPUs 0-1
// full, 2 static MIG, 3-7 dynamic MIG): it prints every GPU's devices
// with their capacities and counters, a CDI spec for a full GPU and for
// a MIG device that the CDI library reads, and changes nothing: the
// simulator's state file and the driver's state folder stay as they were.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	simState := filepath.Join(dir, "gpus.json")
	var out bytes.Buffer
	err := drivercmd.Run([]string{"-check", "-node-name=node-1", "-state-dir=" + stateDir,
		"-nvml-sim=dgx-h200", "-nvml-sim-state=" + simState, "-nvml-sim-mig-gpus=2-7", "-nvml-sim-instances=2:4g.71gb@0,2:3g.71gb@4"},
		drivercmd.WithOutput(&out))
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"# inventory: 6 pools, 11 ResourceSlices, valid;",
		"# GPU 0: NVIDIA H200 GPU-", ": full, 1 devices",
		"# GPU 2: NVIDIA H200 GPU-", ": static, 2 devices",
		"# GPU 7: NVIDIA H200 GPU-", ": dynamic, 14 devices",
		"name: gpu-2-3g-71gb-4", "name: gpu-7-7g-141gb-0", "name: gpu-7-counters",
		"decoders:", "multiprocessors:", "memory-slice-0:",
		"# no CDI spec: a dynamic MIG device is made at prepare",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	specs := regexp.MustCompile(`(?m)^# CDI spec the driver would write for a claim on (\S+) .*\n`).FindAllStringSubmatchIndex(s, -1)
	var names []string
	for i, m := range specs {
		end := len(s)
		if next := strings.Index(s[m[1]:], "\n---\n"); next >= 0 {
			end = m[1] + next + 1
		}
		if i+1 < len(specs) && specs[i+1][0] < end {
			end = specs[i+1][0]
		}
		dev := s[m[2]:m[3]]
		names = append(names, dev)
		spec, err := cdiapi.ParseSpec([]byte(s[m[1]:end]))
		if err != nil {
			t.Errorf("spec for %s: the CDI library cannot read it: %v\n%s", dev, err, s[m[1]:end])
			continue
		}
		if spec.Kind != "gpu.nvidia.drakit.dev/claim" || len(spec.Devices) != 1 || !strings.Contains(s[m[1]:end], "NVIDIA_VISIBLE_DEVICES=") {
			t.Errorf("spec for %s: kind %s, %d devices:\n%s", dev, spec.Kind, len(spec.Devices), s[m[1]:end])
		}
	}
	if strings.Join(names, " ") != "gpu-0 gpu-1 gpu-2-4g-71gb-0" {
		t.Errorf("specs for %v, want gpu-0, gpu-1 and gpu-2-4g-71gb-0", names)
	}
	if _, err := os.Stat(simState); !os.IsNotExist(err) {
		t.Errorf("the simulator's state file was written: %v", err)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the driver's state folder was written: %v", err)
	}
}
