package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/internal/cluster"
)

// TestDemo runs the README's main job end to end: the real examples/minimal
// binary on a real node serves a claim-template pod and an
// extended-resource pod, and a third pod waits until a device frees.
func TestDemo(t *testing.T) {
	// Parallel: a real node takes one of the host's node slots; the rest is its own.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a real node")
	}
	bin := filepath.Join(t.TempDir(), "minimal")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/minimal").CombinedOutput(); err != nil {
		t.Fatalf("build examples/minimal: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	err := demo(ctx, demoConfig{driverBin: bin, dir: t.TempDir(), devices: 2}, &out, &progress)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("demo: %v\nprogress:\n%s", err, progress.String())
	}
	text := out.String()
	for _, want := range []string{
		"published 2 devices",
		"pod dra-pod (claim from the template) Running",
		"pod legacy-pod-0 (resources.limits minimal.drakit.dev/device: 1, no claim in its spec) Running",
		"pod waiting-pod was Pending (",
		"CDI specs on the node: 2 ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if n := strings.Count(text, "the container sees MINIMAL_DEVICE_DEV_"); n != 3 {
		t.Errorf("%d pods saw their device, want 3", n)
	}
}

// TestDemoNVIDIA runs the README's main job end to end: the reference
// NVIDIA driver's image built and imported, its chart installed with
// helm, the story's pods run one by one with pictures of the GPUs, the
// driver's pod restarted, the pods deleted, and the conformance suite
// against the installed driver.
func TestDemoNVIDIA(t *testing.T) {
	// Parallel: a real node takes one of the host's node slots; the rest is its own.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a real node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	// The suite runs in both modes: socket mode, then cluster mode (real
	// pods through the node's kubelet) against the same installed driver.
	// The suites' wait for the restarted driver's slices, which it
	// publishes unchanged, shortened from 20 s and 30 s (CI time).
	cfg := nvidiaDemoConfig{dir: t.TempDir(), helm: cluster.HelmBinary(), conformance: true,
		clusterConformance: true, publishTimeout: 5 * time.Second}
	err := demoNVIDIA(ctx, cfg, &out, &progress)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("demo: %v\nprogress:\n%s", err, progress.String())
	}
	text := out.String()
	for _, want := range []string{
		"helm install nvidia-dra-driver",
		"GPU 0 (NVIDIA H200): MIG off",
		"GPU 4 (NVIDIA H200): dynamic MIG",
		"pod gpu asks for one full GPU",
		"pod mig-pair asks for",
		"pod legacy-gpu asks for resources.limits nvidia.com/gpu: 1",
		"pod legacy-mig asks for resources.limits nvidia.com/mig-1g.18gb: 1",
		"pod nine-gpus asks for nine full GPUs at once (the node has eight): stays Pending",
		"6 of 6 pods still run on their devices",
		"all pods deleted",
		"conformance suite against the installed driver",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The fleet: ten 12 GiB shares of the shared GPU, each container with
	// its own limit, and the GPU's memory by share.
	if !strings.Contains(text, "a fleet of 10 small models") {
		t.Error("demo output lacks the fleet of small models")
	}
	if n := strings.Count(text, nvdriver.EnvMPSMemoryLimit+"=0=12288M"); n != 10 {
		t.Errorf("%d containers saw a 12 GiB MPS limit, want 10", n)
	}
	picture := regexp.MustCompile(`gpu-1 MPS +\|0+1+2+3+4+5+6+7+8+9+\.+\|` +
		` 120 of 140 GiB in 10 shares`)
	if !picture.MatchString(text) {
		t.Error("demo output lacks GPU 1's picture of ten 12 GiB shares")
	}
	if !strings.Contains(text, "conformance suite in cluster mode") {
		t.Errorf("demo output lacks the cluster mode step")
	}
	if n := strings.Count(text, "the container saw devices GPU-"); n != 2 {
		t.Errorf("%d pods saw a full GPU, want 2", n)
	}
	if n := strings.Count(text, "the container saw devices MIG-"); n != 4 {
		t.Errorf("%d pods saw MIG devices, want 4", n)
	}
	// A container with two claims of the reference driver sees both
	// claims' devices.
	if !regexp.MustCompile(`(?m)^pod\.two-claims-env +SHOULD +pass `).MatchString(text) {
		t.Errorf("cluster mode's pod.two-claims-env did not pass for the reference driver")
	}
}

func TestDemoUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--driver=minimal"}, {"--driver=minimal", "--driver-bin", "/nonexistent/minimal"},
		{"--driver=minimal", "--driver-bin", "/bin/true", "--devices", "1"},
		{"--driver=amd"}, {"--driver=nvidia", "--helm", "/nonexistent/helm"}, {"extra-argument"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"demo"}, args...), &stdout, &stderr); code == 0 {
			t.Errorf("drakit demo %v exited 0", args)
		}
	}
}

// TestImageCommand builds an image with drakit image and finds the
// binary's name and the reference in it.
func TestImageCommand(t *testing.T) {
	// Parallel: shares nothing with the package's other tests.
	t.Parallel()
	out := filepath.Join(t.TempDir(), "image.tar")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"image", "-o", out, "-package", "github.com/drakit/drakit/examples/minimal", "-ref", "example.com/minimal:v1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("drakit image: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "example.com/minimal:v1 sha256:") {
		t.Errorf("drakit image printed %q", stdout.String())
	}
	for _, args := range [][]string{{"image"}, {"image", "-o", out, "-ref", "No:Tag:x"}, {"image", "-o", out, "extra"}} {
		if code := run(context.Background(), args, &stdout, &stderr); code == 0 {
			t.Errorf("drakit %v exited 0", args)
		}
	}
}
