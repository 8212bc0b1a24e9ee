package drivercmd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

// TestDriverWait: the wait returns once the driver root holds
// libnvidia-ml.so.1 and dev/nvidiactl, which appear (as the GPU
// Operator's driver container installs them) while it waits; on an
// empty root it gives up when its context ends, naming both files and
// the context's cause.
func TestDriverWait(t *testing.T) {
	root := t.TempDir()
	// The GPU Operator's driver root has a dev folder: nvidiactl is
	// looked for there (elsewhere in the host's /dev).
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := drivercmd.DriverWait{
		Root:     root,
		Poll:     10 * time.Millisecond,
		LogEvery: 50 * time.Millisecond,
	}
	if got := w.Missing(); len(got) != 2 {
		t.Fatalf("an empty root misses %q, want the library and nvidiactl", got)
	}

	ctx, cancel := context.WithTimeoutCause(
		context.Background(),
		100*time.Millisecond,
		errors.New("test timeout"),
	)
	defer cancel()
	err := w.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1") ||
		!strings.Contains(err.Error(), filepath.Join(root, "dev/nvidiactl")) ||
		!strings.Contains(err.Error(), "test timeout") {
		t.Errorf(
			"wait on an empty root: %v, want an error naming libnvidia-ml.so.1, nvidiactl and "+
				"the cause",
			err,
		)
	}

	// The driver appears while the wait runs.
	done := make(chan error, 1)
	go func() { done <- w.Wait(context.Background()) }()
	for _, f := range []string{"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "dev/nvidiactl"} {
		select {
		case err := <-done:
			t.Fatalf("the wait returned (%v) before %s was there", err, f)
		case <-time.After(30 * time.Millisecond):
		}
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Errorf("wait after the driver appeared: %v", err)
	}
	if got := w.Missing(); len(got) != 0 {
		t.Errorf("the driver root still misses %q", got)
	}

	// Through the command line, as the chart's init container runs it.
	if err := drivercmd.Run(
		[]string{drivercmd.WaitForDriverCommand, "--container-driver-root=" + root, "--timeout=1m"},
	); err != nil {
		t.Errorf("%s: %v", drivercmd.WaitForDriverCommand, err)
	}
	if err := drivercmd.Run(
		[]string{
			drivercmd.WaitForDriverCommand,
			"--container-driver-root=" + filepath.Join(t.TempDir(), "none"),
			"--timeout=50ms",
		},
	); err == nil ||
		!strings.Contains(err.Error(), "--timeout 50ms passed") {
		t.Errorf(
			"%s on an empty root with --timeout: %v, want the timeout named",
			drivercmd.WaitForDriverCommand,
			err,
		)
	}
}
