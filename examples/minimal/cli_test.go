package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartedByCLI runs the example the way a vendor checks a driver:
// built with go build, started by "drakit conformance" with only the
// folders on its command line. The CLI starts its own cluster and hands
// the driver the kubeconfig and node name in $KUBECONFIG and $NODE_NAME,
// which the driver must pick up on its own.
func TestStartedByCLI(t *testing.T) {
	t.Parallel() // its own binaries and cluster
	if testing.Short() {
		t.Skip("builds two binaries and starts a cluster; skipped with -short")
	}
	bin := t.TempDir()
	for _, pkg := range []string{".", "../../cmd/drakit"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	dir := t.TempDir()
	reg, plugin := filepath.Join(dir, "registry"), filepath.Join(dir, "plugin")
	cdiDir := filepath.Join(dir, "cdi")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "drakit"), "conformance",
		"--driver", driverName, "--registration", reg, "--cdi-dir", cdiDir,
		"--driver-log", filepath.Join(dir, "driver.log"), "--", filepath.Join(bin, "minimal"),
		"--registrar-dir", reg, "--plugin-data-dir", plugin, "--cdi-dir", cdiDir)
	// No kubeconfig of the test's own reaches the CLI or the driver.
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "NODE_NAME=")
	// On timeout the CLI gets SIGTERM and stops its cluster.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		driverLog, _ := os.ReadFile(filepath.Join(dir, "driver.log"))
		t.Fatalf("drakit conformance: %v\n%s\ndriver log:\n%s", err, out.String(), driverLog)
	}
	if want := "PASSED: driver " + driverName; !strings.Contains(out.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, out.String())
	}
	t.Log(out.String())
}
