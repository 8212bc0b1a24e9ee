package nvml

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGPUCheckWithoutGPU runs gpu-check.sh's "run" as on a machine
// without an NVIDIA driver (an empty driver root): it says so and exits
// 0, changing nothing.
func TestGPUCheckWithoutGPU(t *testing.T) {
	if out, err := exec.Command(
		"sh", "-c", "ldconfig -p 2>/dev/null | grep libnvidia-ml.so.1",
	).Output(); err == nil &&
		len(out) > 0 {
		t.Skip("this machine has libnvidia-ml.so.1: gpu-check.sh would check it")
	}
	if err := exec.Command("bash", "-n", "gpu-check.sh").Run(); err != nil {
		t.Fatalf("bash -n gpu-check.sh: %v", err)
	}
	for _, args := range [][]string{{"run"}, nil} { // run is the default
		cmd := exec.Command("bash", append([]string{"gpu-check.sh"}, args...)...)
		cmd.Env = append(os.Environ(), "DRIVER_ROOT="+t.TempDir(), "OUT="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "no NVIDIA GPU driver on this machine") {
			t.Errorf(
				"gpu-check.sh %v without a driver: %v\n%s\nwant exit 0 and that it says so",
				args,
				err,
				out,
			)
		}
	}
}
