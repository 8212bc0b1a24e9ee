package drivercmd_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// TestCheck runs -check on the simulated DGX H200 of the README (GPUs 0-1
// full, 2 static MIG, 3-7 dynamic MIG, a process of the host holding GPU
// 5): it prints every GPU's devices with their capacities and counters, a
// CDI spec for a full GPU and for a MIG device that the CDI library
// reads, and per GPU what decides the dynamic MIG gates (GPU 5 is not
// offered whole: the process holds it); and changes nothing: the
// simulator's state file and the driver's state folder stay as they were.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	simState := filepath.Join(dir, "gpus.json")
	// A process of the host holds GPU 5.
	sim, err := nvmlsim.Open(
		simState,
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{2, 3, 4, 5, 6, 7},
			Instances: []nvmlsim.Instance{
				{GPU: 2, Profile: "4g.71gb", Start: 0},
				{GPU: 2, Profile: "3g.71gb", Start: 4},
			}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AttachClient(5, nvml.Process{PID: 4242, Kind: "compute"}); err != nil {
		t.Fatal(err)
	}
	simBefore, err := os.ReadFile(simState)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = drivercmd.Run([]string{"-check", "-node-name=node-1", "-state-dir=" + stateDir,
		"-nvml-sim=dgx-h200", "-nvml-sim-state=" + simState, "-nvml-sim-mig-gpus=2-7",
		"-nvml-sim-instances=2:4g.71gb@0,2:3g.71gb@4", dynamicGates, dynamic},
		drivercmd.WithOutput(&out))
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"# inventory: 6 pools, 11 ResourceSlices, valid;",
		"# GPU 0: NVIDIA H200 GPU-", ": full, 1 devices",
		"# GPU 2: NVIDIA H200 GPU-", ": static, 2 devices",
		"# GPU 7: NVIDIA H200 GPU-", ": dynamic, 15 devices",
		"name: gpu-2-3g-71gb-4", "name: gpu-7-7g-141gb-0", "name: gpu-7-counters",
		"decoders:", "multiprocessors:", "memory-slice-0:",
		"# no CDI spec: a dynamic MIG device is made at prepare",
		// What decides the gates, per GPU.
		"# gates DynamicMIG and DynamicMIGWholeGPU (alpha, off by default until this check has " +
			"passed on a Hopper node)",
		"#   GPU 0 NVIDIA H200 (Hopper, compute capability 9.0) GPU-",
		": MIG mode off (pending off), not dynamic now; DynamicMIG: yes; whole " +
			"(DynamicMIGWholeGPU): yes",
		": MIG mode on (pending on), dynamic now; DynamicMIG: yes; whole (DynamicMIGWholeGPU): yes",
		": MIG mode on (pending on), dynamic now; DynamicMIG: yes; whole (DynamicMIGWholeGPU): " +
			"no: other NVML clients hold it (processes 4242 (compute))",
		"# DynamicMIG could serve GPUs 0,1,2,3,4,5,6,7; DynamicMIGWholeGPU GPUs 0,1,2,3,4,6,7",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	specs := regexp.MustCompile(`(?m)^# CDI spec the driver would write for a claim on (\S+) .*\n`).
		FindAllStringSubmatchIndex(s, -1)
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
		if spec.Kind != "gpu.nvidia.drakit.dev/claim" || len(spec.Devices) != 1 ||
			!strings.Contains(s[m[1]:end], "NVIDIA_VISIBLE_DEVICES=") {
			t.Errorf(
				"spec for %s: kind %s, %d devices:\n%s",
				dev,
				spec.Kind,
				len(spec.Devices),
				s[m[1]:end],
			)
		}
	}
	if strings.Join(names, " ") != "gpu-0 gpu-1 gpu-2-4g-71gb-0" {
		t.Errorf("specs for %v, want gpu-0, gpu-1 and gpu-2-4g-71gb-0", names)
	}
	if b, err := os.ReadFile(simState); err != nil || !bytes.Equal(b, simBefore) {
		t.Errorf("the simulator's state file changed (%v)", err)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the driver's state folder was written: %v", err)
	}
}

// TestCheckKeepsRecordedOwnership: -check without -dynamic-mig-gpus
// publishes the GPUs as the running driver recorded them (the lifecycle's
// cards.json in -state-dir), and leaves an existing simulator state and
// that record byte for byte as they were.
func TestCheckKeepsRecordedOwnership(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	simState := filepath.Join(dir, "gpus.json")
	sim, err := nvmlsim.Open(
		simState,
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{6, 7}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	// GPUs 6 and 7 are both in MIG mode without MIG devices; the record
	// says 6 is dynamic, and 7 is not named.
	record := []byte(`{"cards": {"` + gpus[6].UUID + `": "dynamic"}}`)
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "cards.json"), record, 0o644); err != nil {
		t.Fatal(err)
	}
	simBefore, err := os.ReadFile(simState)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = drivercmd.Run(
		[]string{
			"-check",
			"-node-name=node-1",
			"-state-dir=" + stateDir,
			"-nvml-sim=dgx-h200",
			"-nvml-sim-state=" + simState,
			dynamicGates,
		},
		drivercmd.WithOutput(&out),
	)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"# GPU 6: NVIDIA H200 " + gpus[6].UUID + " at 0000:d1:00.0, minor 6: dynamic, 15 devices",
		"# GPU 7: NVIDIA H200 " + gpus[7].UUID +
			" at 0000:df:00.0, minor 7: static MIG without MIG devices",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if b, err := os.ReadFile(simState); err != nil || !bytes.Equal(b, simBefore) {
		t.Errorf("the simulator's state changed (%v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "cards.json")); err != nil ||
		!bytes.Equal(b, record) {
		t.Errorf("the recorded ownership changed: %s (%v)", b, err)
	}
	if ents, err := os.ReadDir(stateDir); err != nil || len(ents) != 1 {
		t.Errorf("the state folder holds %v (%v), want only cards.json", ents, err)
	}
}

// TestCheckCDIDir: -check with -check-cdi-dir writes the specs it prints
// where a runtime reads them, lists their device IDs, and keeps the
// claims' devices files the specs mount: the CDI library injects each
// listed device into an OCI spec, and every mount's source exists.
func TestCheckCDIDir(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "check")
	var out bytes.Buffer
	err := drivercmd.Run(
		[]string{
			"-check",
			"-node-name=node-1",
			"-state-dir=" + filepath.Join(dir, "state"),
			"-check-cdi-dir=" + keep,
			"-nvml-sim=dgx-h200",
			"-nvml-sim-mig-gpus=2",
			"-nvml-sim-instances=2:4g.71gb@0",
		},
		drivercmd.WithOutput(&out),
	)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(filepath.Join(keep, drivercmd.CheckDevicesFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var gpus []string
	for _, l := range lines {
		gpu, id, ok := strings.Cut(l, " ")
		if !ok {
			t.Fatalf("%s: line %q, want \"<GPU> <ID>\"", drivercmd.CheckDevicesFile, l)
		}
		gpus = append(gpus, gpu)
		spec := &oci.Spec{Process: &oci.Process{}}
		if err := cdi.Inject(spec, []string{filepath.Join(keep, "cdi")}, id); err != nil {
			t.Errorf("GPU %s: inject %s: %v", gpu, id, err)
			continue
		}
		if !slices.ContainsFunc(
			spec.Process.Env,
			func(e string) bool { return strings.HasPrefix(e, "NVIDIA_DRAKIT_DEVICE_") },
		) {
			t.Errorf("GPU %s: %s gives no device variable: %v", gpu, id, spec.Process.Env)
		}
		for _, m := range spec.Mounts {
			if _, err := os.Stat(m.Source); err != nil {
				t.Errorf("GPU %s: %s mounts %s, which is gone: %v", gpu, id, m.Source, err)
			}
		}
	}
	if got := strings.Join(gpus, " "); got != "0 1 2 3 4 5 6 7" ||
		!strings.Contains(
			string(b),
			"\n2 gpu.nvidia.drakit.dev/claim=gpu-check-2_0-gpu-2-4g-71gb-0\n",
		) {
		t.Errorf(
			"%s lists GPUs %q, want all 8, GPU 2's MIG device for GPU 2:\n%s",
			drivercmd.CheckDevicesFile,
			got,
			b,
		)
	}
}
