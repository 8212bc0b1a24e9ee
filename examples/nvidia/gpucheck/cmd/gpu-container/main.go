// Command gpu-container is the container half of gpu-check.sh: for each
// CDI device `nvidia-dra-driver -check -check-cdi-dir DIR` listed in
// DIR/devices.txt (a full GPU, an existing MIG device), it makes a
// container from the driver's image (-image, an OCI image tarball) with
// that device's CDI spec applied by the CDI library, runs cuda-probe
// (-probe) in it under runc, and prints what the probe saw. It only
// reads the GPUs. It exits 1 when a container could not be made or the
// probe failed.
//
//	gpu-container -image image.tar -cdi-dir DIR -probe cuda-probe
//	gpu-container -build-probe cuda-probe             # with cc, where the image is built
//	gpu-container -image image.tar -extract-hook FILE # the specs' nvidia-cdi-hook
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/examples/nvidia/gpucheck"
)

func main() {
	image := flag.String("image", "", "the driver's image, an OCI image tarball (required)")
	dir := flag.String(
		"cdi-dir",
		"",
		"the folder nvidia-dra-driver -check -check-cdi-dir wrote (required)",
	)
	probe := flag.String(
		"probe",
		"",
		"cuda-probe, built by gpu-check.sh build (default: beside this program)",
	)
	runtime := flag.String("runtime", "runc", "the OCI runtime")
	noHooks := flag.Bool("no-hooks", false, "leave the specs' hooks out")
	timeout := flag.Duration("timeout", 4*time.Minute, "give up after this long")
	buildProbe := flag.String(
		"build-probe",
		"",
		"only compile cuda-probe to this file with cc, and exit",
	)
	extractHook := flag.String(
		"extract-hook",
		"",
		"only copy the image's nvidia-cdi-hook to this file, and exit",
	)
	flag.Parse()
	var err error
	switch {
	case *buildProbe != "":
		err = gpucheck.BuildProbe(context.Background(), *buildProbe)
	case *extractHook != "":
		err = extract(*image, *extractHook)
	default:
		err = run(*image, *dir, *probe, *runtime, *noHooks, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-container:", err)
		os.Exit(1)
	}
}

// extract copies the image's nvidia-cdi-hook to to, executable.
func extract(image, to string) error {
	tmp, err := os.MkdirTemp("", "gpu-container-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := ociimage.Unpack(image, tmp); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(tmp, deploy.ImageHookPath))
	if err != nil {
		return fmt.Errorf("the image's nvidia-cdi-hook: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

func run(image, dir, probe, runtime string, noHooks bool, timeout time.Duration) error {
	if image == "" || dir == "" {
		return fmt.Errorf("-image and -cdi-dir are required")
	}
	if probe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find cuda-probe: %w", err)
		}
		probe = filepath.Join(filepath.Dir(exe), "cuda-probe")
	}
	b, err := os.ReadFile(filepath.Join(dir, drivercmd.CheckDevicesFile))
	if err != nil {
		return fmt.Errorf("read the devices -check wrote: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tmp, err := os.MkdirTemp("", "gpu-container-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	failed := 0
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		gpu, id, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		fmt.Printf("== container from the driver's CDI spec for GPU %s: %s\n", gpu, id)
		root := filepath.Join(tmp, fmt.Sprintf("rootfs-%d", i))
		if err := ociimage.Unpack(image, root); err != nil {
			return err
		}
		res, err := gpucheck.Run(
			ctx,
			gpucheck.Container{
				Root:    root,
				CDIDirs: []string{filepath.Join(dir, "cdi")},
				Devices: []string{id},
				Args: []string{
					gpucheck.ProbePath,
				},
				Binds:        map[string]string{gpucheck.ProbePath: probe},
				Runtime:      runtime,
				WithoutHooks: noHooks,
			},
		)
		for _, h := range res.Hooks {
			fmt.Printf("hook: %s\n", h)
		}
		for _, h := range res.SkippedHooks {
			fmt.Printf("hook left out (its program is not on this machine, or -no-hooks): %s\n", h)
		}
		fmt.Printf("%s", res.Output)
		if err != nil {
			fmt.Printf("FAILED: %v\n", err)
			failed++
		}
		_ = os.RemoveAll(root)
	}
	if failed > 0 {
		return fmt.Errorf("%d containers failed", failed)
	}
	return nil
}
