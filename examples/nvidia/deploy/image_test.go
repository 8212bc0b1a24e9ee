package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// unpackImage writes the files of the (one-layer) image in the OCI
// tarball into dir, as a runtime would lay out its root.
func unpackImage(t *testing.T, tarball, dir string) {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[h.Name] = b
	}
	blob := func(d ociimage.Descriptor) []byte {
		return blobs["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	}
	var idx ociimage.Index
	var man ociimage.Manifest
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v (%d manifests)", err, len(idx.Manifests))
	}
	if err := json.Unmarshal(blob(idx.Manifests[0]), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	lr := tar.NewReader(zr)
	for {
		h, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(lr); err == nil {
				if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
					err = os.WriteFile(p, b, os.FileMode(h.Mode)&0o777)
				}
			}
		default:
			t.Fatalf("layer entry %s of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageLoadsNVML builds the driver's image as the demo and TestE2E do
// and runs its entrypoint in the image's root alone (chroot): the C
// runtime it needs is in the image, the simulator runs, and the real
// backend gets as far as the dynamic loader, which finds no
// libnvidia-ml on a machine without a GPU driver: "library not found",
// not "built without cgo". It needs root (chroot).
func TestImageLoadsNVML(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver's image")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if _, err := deploy.BuildImage(ctx, deploy.DriverPackage, deploy.Image, tarball); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	unpackImage(t, tarball, root)
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " +
		"\"https://127.0.0.1:1\"}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: " +
		"[{name: u, user: {}}]\n"
	if err := os.WriteFile(
		filepath.Join(root, "tmp/kubeconfig"), []byte(kubeconfig), 0o644,
	); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		out, _ := exec.CommandContext(
			ctx, "chroot", append([]string{root, "/nvidia-dra-driver"}, args...)...,
		).
			CombinedOutput()
		return string(out)
	}
	checkImageHook(t, ctx, filepath.Join(root, deploy.ImageHookPath))
	if out := run("-print-device-classes", "-nvml-sim=dgx-h200"); !strings.Contains(
		out,
		"kind: DeviceClass",
	) {
		t.Errorf("the image's driver does not run on the simulator:\n%s", out)
	}
	out := run("-node-name=node-1", "-kubeconfig=/tmp/kubeconfig", "-state-dir=/tmp/state")
	if !strings.Contains(out, "cannot load libnvidia-ml.so.1") ||
		!strings.Contains(out, "library not found") ||
		strings.Contains(out, "without cgo") {
		t.Errorf(
			"the image's real backend, without a GPU driver:\n%s\nwant the loader's \"library "+
				"not found\" for libnvidia-ml.so.1",
			out,
		)
	}
	t.Logf("the image's real backend without a GPU driver: %s", strings.TrimSpace(out))

	// A stand-in libnvidia-ml.so.1 that needs glibc's libm, libpthread,
	// libdl and librt, as current drivers' does, under the driver root
	// the chart mounts: it loads in the image's own root (its nvmlInit_v2
	// answers DRIVER_NOT_LOADED), so the image carries what it needs.
	lib := filepath.Join(root, "driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
	standInNVML(t, lib)
	out = run(
		"-node-name=node-1",
		"-kubeconfig=/tmp/kubeconfig",
		"-state-dir=/tmp/state",
		"-driver-root=/run/nvidia/driver",
		"-container-driver-root=/driver-root",
	)
	if !strings.Contains(out, "initialize NVML") || strings.Contains(out, "cannot load") {
		t.Errorf(
			"the image's driver with a stand-in NVML that needs libm, libpthread, libdl and "+
				"librt:\n%s\nwant it loaded and its init called (\"initialize NVML\")",
			out,
		)
	}
	t.Logf("the image's driver with the stand-in NVML: %s", strings.TrimSpace(out))
}

// checkImageHook checks the image's nvidia-cdi-hook: a static binary
// (the container runtime runs it on the host, whatever its C library),
// of the nvidia-container-toolkit version the CUDA module requires for
// nvcdi, with the subcommands nvcdi v1.18 and later emit.
func checkImageHook(t *testing.T, ctx context.Context, hook string) {
	t.Helper()
	if _, err := os.Stat(hook); err != nil {
		t.Errorf("the image has no nvidia-cdi-hook: %v", err)
		return
	}
	if out, err := exec.CommandContext(ctx, "ldd", hook).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "not a dynamic executable") {
		t.Errorf("the image's nvidia-cdi-hook is not static: ldd says %s", out)
	}
	list := exec.CommandContext(
		ctx,
		"go",
		"list",
		"-m",
		"-f",
		"{{.Version}}",
		"github.com/NVIDIA/nvidia-container-toolkit",
	)
	list.Dir, list.Env = "../cuda", append(os.Environ(), "GOWORK=off")
	v, err := list.Output()
	if err != nil {
		t.Fatalf("the CUDA module's nvidia-container-toolkit: %v", err)
	}
	want := strings.TrimPrefix(strings.TrimSpace(string(v)), "v")
	out, _ := exec.CommandContext(ctx, hook, "--version").CombinedOutput()
	if !strings.Contains(string(out), want) {
		t.Errorf(
			"nvidia-cdi-hook --version: %s; want the toolkit version nvcdi comes from, %s",
			out,
			want,
		)
	}
	help, _ := exec.CommandContext(ctx, hook, "--help").CombinedOutput()
	for _, sub := range []string{
		"update-ldcache",
		"create-symlinks",
		"enable-cuda-compat",
		"disable-device-node-modification",
	} {
		if !strings.Contains(string(help), sub) {
			t.Errorf("nvidia-cdi-hook has no %s subcommand:\n%s", sub, help)
		}
	}
}

// standInNVML compiles, with the host's C compiler, a stand-in
// libnvidia-ml.so.1 at path whose NEEDED entries are glibc's libm,
// libpthread, libdl and librt (as readelf -d shows for NVIDIA's on
// current drivers), and whose nvmlInit_v2 returns
// NVML_ERROR_DRIVER_NOT_LOADED.
func standInNVML(t *testing.T, path string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "nvml.c")
	code := `#include <math.h>
#include <pthread.h>
#include <dlfcn.h>
#include <time.h>
int nvmlInit_v2(void) { return 9; }
int nvmlInit(void) { return 9; }
int nvmlInitWithFlags(unsigned int flags) { return 9; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "Driver Not Loaded"; }
double drakit_uses(double x) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return cos(x) + (double)(pthread_self() != 0) + (double)(dlsym(RTLD_DEFAULT, "cos") != 0);
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(
		"cc",
		"-shared",
		"-fPIC",
		"-Wl,-soname,libnvidia-ml.so.1",
		"-Wl,--no-as-needed",
		"-o",
		path,
		src,
		"-l:libm.so.6",
		"-l:libpthread.so.0",
		"-l:libdl.so.2",
		"-l:librt.so.1",
	).CombinedOutput(); err != nil {
		t.Skipf("no C compiler for the stand-in NVML: %v: %s", err, out)
	}
	out, err := exec.Command("readelf", "-d", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf -d %s: %v: %s", path, err, out)
	}
	for _, need := range deploy.GlibcCompanions {
		if !strings.Contains(string(out), "Shared library: ["+need+"]") {
			t.Fatalf("the stand-in NVML does not need %s:\n%s", need, out)
		}
	}
}
