package drivercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// WaitForDriverCommand, as the first argument of Run, waits for the
// NVIDIA driver to appear under the driver root and returns when it has
// (DriverWait): the chart's init container, so that the driver does not
// start, and fail, before the GPU Operator's driver container has
// installed the driver. Flags: --container-driver-root (where this
// process sees the driver root, default /driver-root as the chart mounts
// it), --log-every, --timeout (0: none) and the logging flags.
const WaitForDriverCommand = "wait-for-driver"

// DriverWait waits for the NVIDIA driver under a driver root.
type DriverWait struct {
	// Root is the driver root as this process sees it (the chart's
	// /driver-root).
	Root string
	// Poll is how often the files are looked for (default 1s); LogEvery
	// how often what is still missing is logged (default 10s).
	Poll, LogEvery time.Duration
}

// Missing returns what the driver root still lacks: libnvidia-ml.so.1 in
// any of the folders nvml.FindLibrary looks in, and nvidiactl under the
// device root (Root/dev where Root has a dev folder, else /dev, as
// nvdriver.DriverRoot.DevRoot).
func (w DriverWait) Missing() []string {
	var missing []string
	found := false
	for _, p := range nvml.LibraryPaths(w.Root) {
		if _, err := os.Stat(p); err == nil {
			found = true
			break
		}
	}
	if !found {
		missing = append(missing, filepath.Join(w.Root, "<lib folder>", "libnvidia-ml.so.1"))
	}
	dev := nvdriver.DriverRoot{Host: w.Root, Container: w.Root}.DevRoot()
	if ctl := filepath.Join(dev.Container, "dev/nvidiactl"); !exists(ctl) {
		missing = append(missing, ctl)
	}
	return missing
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Wait returns nil once Missing is empty, logging what it waits for
// every LogEvery (and once at the start), or an error naming what is
// still missing when ctx ends first.
func (w DriverWait) Wait(ctx context.Context) error {
	poll, every := w.Poll, w.LogEvery
	if poll <= 0 {
		poll = time.Second
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	logger := klog.FromContext(ctx)
	start := time.Now()
	var logged time.Time
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		missing := w.Missing()
		if len(missing) == 0 {
			logger.Info(
				"NVIDIA driver found",
				"driverRoot",
				w.Root,
				"waited",
				time.Since(start).Round(time.Second).String(),
			)
			return nil
		}
		if logged.IsZero() || time.Since(logged) >= every {
			logger.Info(
				"Waiting for the NVIDIA driver",
				"driverRoot",
				w.Root,
				"missing",
				missing,
				"waited",
				time.Since(start).Round(time.Second).String(),
			)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf(
				"wait for the NVIDIA driver under %s: still no %s after %s: %w",
				w.Root,
				strings.Join(missing, ", "),
				time.Since(start).Round(time.Second),
				context.Cause(ctx),
			)
		case <-t.C:
		}
	}
}

// runWaitForDriver is WaitForDriverCommand.
func runWaitForDriver(args []string) error {
	fs := flag.NewFlagSet(WaitForDriverCommand, flag.ContinueOnError)
	klog.InitFlags(fs)
	w := DriverWait{}
	fs.StringVar(
		&w.Root,
		"container-driver-root",
		"/driver-root",
		"the NVIDIA driver root as this process sees it",
	)
	fs.DurationVar(&w.LogEvery, "log-every", 10*time.Second, "log what is still missing this often")
	timeout := fs.Duration("timeout", 0, "give up after this long (0: wait for ever)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", WaitForDriverCommand, fs.Args())
	}
	ctx := context.Background()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(
			ctx,
			*timeout,
			errors.New("--timeout "+timeout.String()+" passed"),
		)
		defer cancel()
	}
	return w.Wait(ctx)
}
