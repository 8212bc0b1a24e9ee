package drivercmd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCUDAModule tests examples/nvidia/cuda, the module that
// holds nvidia-container-toolkit (kept out of drakit's own module graph):
// its container edits against nvcdi's on a fake 580-series driver root,
// and its driver binary, which is this package's Run with the CUDA
// editor. hack/test.sh vets it.
func TestCUDAModule(t *testing.T) {
	dir, err := filepath.Abs("../cuda")
	if err != nil {
		t.Fatal(err)
	}
	goEnv := append(
		os.Environ(),
		"GOWORK=off",
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"),
		"CGO_CFLAGS="+os.Getenv("CGO_CFLAGS")+" -Wno-deprecated-declarations",
	)
	for _, args := range [][]string{{"test", "-count=1", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, goEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		t.Logf("go %s in %s:\n%s", strings.Join(args, " "), dir, out)
	}
}
