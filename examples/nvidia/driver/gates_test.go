package driver

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// Readiness says per GPU what decides the dynamic MIG gates: on an A100
// whose MIG mode is off, turning it on needs a GPU reset, and leaving it
// (the GPU whole) too; on real hardware without the nvidia-caps device
// in /proc, no container could get a MIG device.
func TestReadiness(t *testing.T) {
	dir := t.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-a100-80gb"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{1, 2, 3, 4, 5, 6, 7}}),
		nvmlsim.WithPollInterval(5*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{sim: sim, dir: dir}
	f.d = f.open(t)
	rs := f.d.Readiness()
	if len(rs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(rs))
	}
	if r := rs[0]; !r.MIG || r.MIGMode.Current ||
		!strings.Contains(r.DynamicMIG, "needs a GPU reset") ||
		!strings.Contains(r.Whole, "GPU reset") {
		t.Errorf("A100 GPU 0 with MIG mode off: %+v", r)
	}
	if r := rs[4]; !r.Dynamic || r.DynamicMIG != "" || !strings.Contains(r.Whole, "GPU reset") {
		t.Errorf("A100 dynamic GPU 4: %+v", r)
	}

	proc := fakeHostProc(t) // no nvidia-caps device
	real := &fixture{sim: sim, dir: t.TempDir()}
	real.d = real.open(t, WithSimulatedContainers(false))
	if r := real.d.Readiness()[4]; !strings.Contains(
		r.DynamicMIG,
		"containers cannot get its MIG devices",
	) ||
		!strings.Contains(r.DynamicMIG, filepath.Join(proc, "devices")) {
		t.Errorf("GPU 4 on a node without the nvidia-caps device: %+v", r)
	}
}
