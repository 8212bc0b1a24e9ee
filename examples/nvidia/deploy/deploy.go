// Package deploy deploys drakit's reference NVIDIA DRA driver the way
// users deploy a driver: a container image of the cgo binary and its C runtime
// (no registry, no Dockerfile, no base image; package ociimage), the Helm
// chart in chart/ (a DaemonSet with the kubelet's plugin folders as
// hostPath volumes, a ServiceAccount, least-privilege RBAC and the
// DeviceClasses), and the same objects as plain manifests in manifests/
// (`helm template`, kept current by TestManifestsCurrent).
//
// The chart's defaults are for real GPUs: the driver runs only on nodes
// labelled nvidia.com/gpu.present=true, loads the host's NVML from the
// driver root, and its DeviceClasses leave the device plugin's extended
// resource names alone. On drakit's local cluster, `drakit demo` and this
// package's end-to-end test build the image, import it into the node's
// containerd, and `helm install` the chart with [LocalClusterValues] and
// [SimulatorValues].
//
// By hand, on a cluster whose nodes run containerd:
//
//	go run ./cmd/drakit image -o driver.tar   # or BuildImage from Go
//	ctr -n k8s.io images import driver.tar    # on each node
//	helm install nvidia-dra-driver examples/nvidia/deploy/chart \
//	    -n nvidia-dra-driver --create-namespace
//
// or kubectl apply -f examples/nvidia/deploy/manifests/.
package deploy

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// Names the chart's default values use.
const (
	// Image is the driver's image reference.
	Image = "drakit.dev/nvidia-dra-driver:dev"
	// DriverPackage is the driver binary's Go package: the one with the
	// CUDA container edits, in module CUDAModule.
	DriverPackage = CUDAModule + "/cmd/nvidia-dra-driver"
	// CUDAModule is the module of the image's driver binary, in the
	// folder examples/nvidia/cuda of drakit's checkout: it requires
	// nvidia-container-toolkit, which drakit's own module does not.
	CUDAModule = "github.com/drakit/drakit/examples/nvidia/cuda"
	// Release and Namespace are the Helm release and namespace the demo,
	// the e2e test and the plain manifests use.
	Release   = "nvidia-dra-driver"
	Namespace = "nvidia-dra-driver"
	// DaemonSet is the name of the chart's DaemonSet (the chart's name).
	DaemonSet = "nvidia-dra-driver"
	// PodSelector selects the DaemonSet's pods of Release.
	PodSelector = "app.kubernetes.io/name=nvidia-dra-driver,app.kubernetes.io/instance=" + Release
)

//go:embed all:chart
var chartFS embed.FS

// Chart is the Helm chart (Chart.yaml at its root), embedded so that a
// program outside a checkout can write it out with [WriteChart].
func Chart() fs.FS {
	sub, err := fs.Sub(chartFS, "chart")
	if err != nil {
		panic(err) // the embedded tree always has chart/
	}
	return sub
}

// WriteChart writes the chart into dir (created), for `helm install dir`.
func WriteChart(dir string) error {
	if err := os.CopyFS(dir, Chart()); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return nil
}

// BuildImage builds Go package pkg (e.g. [DriverPackage]) for linux on
// this program's architecture with -trimpath, and writes it to out as an
// OCI image tarball named ref: the binary as its entrypoint, the C
// runtime it links (the dynamic loader, libc, ... as ldd lists them,
// copied from this machine's Debian packages: no registry, no base
// image), with a dynamically linked binary also glibc's libm, libpthread,
// libdl and librt from libc's own package (GlibcCompanions: the host's
// libnvidia-ml, loaded into the driver from the driver root, needs them
// and finds them only in the image), an empty /tmp, and an empty /etc
// (where nvidia-cdi-hook's update-ldcache writes ld.so.conf when a
// container is made from the image with the driver's own CDI spec, as
// gpu-check.sh does); what
// `ctr -n k8s.io images import` loads. A
// package of [CUDAModule] is built with cgo (go-nvml loads libnvidia-ml
// with dlopen) in that module's folder of the drakit checkout the go
// command runs in; any other package statically (CGO_ENABLED=0) in the
// caller's module. The compiler's warnings about
// go-nvml's deprecated NVML calls are silenced; the build's output is
// shown only when it fails. It returns the image's manifest descriptor.
//
// With $DRAKIT_IMAGE_CACHE set (ImageCacheEnv), an image already built
// there from the same inputs is copied to out instead (see
// ImageCacheEnv).
func BuildImage(ctx context.Context, pkg, ref, out string) (ociimage.Descriptor, error) {
	if dir := os.Getenv(ImageCacheEnv); dir != "" {
		return cachedImage(ctx, dir, pkg, ref, out)
	}
	return buildImage(ctx, pkg, ref, out)
}

// buildImage is BuildImage without the cache.
func buildImage(ctx context.Context, pkg, ref, out string) (ociimage.Descriptor, error) {
	tmp, err := os.MkdirTemp("", "drakit-image-")
	if err != nil {
		return ociimage.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	defer os.RemoveAll(tmp)
	name := filepath.Base(pkg)
	bin := filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cuda := isCUDA(pkg)
	if cmd.Dir, cmd.Env, err = buildPlace(ctx, pkg); err != nil {
		return ociimage.Descriptor{}, err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return ociimage.Descriptor{}, fmt.Errorf(
			"build %s: %w: %s",
			pkg,
			err,
			strings.TrimSpace(string(out)),
		)
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		return ociimage.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	files := []ociimage.File{{Path: "/" + name, Mode: 0o755, Content: content}}
	if cuda {
		hook, err := buildHook(ctx, cmd.Dir, tmp)
		if err != nil {
			return ociimage.Descriptor{}, fmt.Errorf("build image: %w", err)
		}
		files = append(files, ociimage.File{Path: ImageHookPath, Mode: 0o755, Content: hook})
	}
	libs, err := sharedLibraries(ctx, bin)
	if err != nil {
		return ociimage.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	if libs, err = withGlibcCompanions(ctx, libs); err != nil {
		return ociimage.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	for _, l := range libs {
		b, err := os.ReadFile(
			l,
		) // through symlinks: the image holds the file at the path the loader asks for
		if err != nil {
			return ociimage.Descriptor{}, fmt.Errorf("build image: C runtime: %w", err)
		}
		files = append(files, ociimage.File{Path: l, Mode: 0o755, Content: b})
	}
	return ociimage.WriteFile(out, ociimage.Image{
		Ref:        ref,
		Files:      files,
		Dirs:       []string{"/tmp", "/etc"},
		Entrypoint: []string{"/" + name},
		Labels: map[string]string{
			"org.opencontainers.image.source": "https://github.com/drakit/drakit",
			"org.opencontainers.image.title":  name,
		},
	})
}

// isCUDA reports whether pkg is in CUDAModule (built with cgo there).
func isCUDA(pkg string) bool {
	return strings.HasPrefix(pkg, CUDAModule+"/") || pkg == CUDAModule
}

// buildPlace returns the folder and environment the go command builds
// pkg in: CUDAModule's folder with cgo for its packages, else the
// caller's folder without.
func buildPlace(ctx context.Context, pkg string) (string, []string, error) {
	if !isCUDA(pkg) {
		return "", buildEnv("0"), nil
	}
	dir, err := cudaModuleDir(ctx)
	if err != nil {
		return "", nil, err
	}
	return dir, buildEnv("1"), nil
}

// buildEnv is the go command's environment for the image's binaries:
// this program's platform, the given CGO_ENABLED, no workspace, and
// go-nvml's deprecation warnings silenced.
func buildEnv(cgo string) []string {
	return append(
		os.Environ(),
		"CGO_ENABLED="+cgo,
		"GOOS=linux",
		"GOARCH="+runtime.GOARCH,
		"GOWORK=off",
		"CGO_CFLAGS="+strings.TrimSpace(
			cmp.Or(os.Getenv("CGO_CFLAGS"), "-O2 -g")+" -Wno-deprecated-declarations",
		),
	)
}

// Names of the nvidia-cdi-hook the image ships.
const (
	// HookPackage is nvidia-container-toolkit's nvidia-cdi-hook, a tool
	// of CUDAModule (its go.mod's tool directive): built from the same
	// toolkit version as the nvcdi that writes the hooks into the CDI
	// specs, so that every subcommand nvcdi emits (enable-cuda-compat,
	// disable-device-node-modification, ...) is one the hook has.
	HookPackage = "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	// ImageHookPath is where the image holds nvidia-cdi-hook; the driver
	// copies it at start to the host folder the chart names
	// (-nvidia-cdi-hook-from), where the container runtime runs it.
	ImageHookPath = "/usr/bin/nvidia-cdi-hook"
)

// buildHook builds HookPackage in the CUDA module's folder dir as a
// static binary (the container runtime runs it on the host, whatever the
// host's C library), its version (--version) the toolkit module's, and
// returns its content.
func buildHook(ctx context.Context, dir, tmp string) ([]byte, error) {
	list := exec.CommandContext(
		ctx,
		"go",
		"list",
		"-m",
		"-f",
		"{{.Version}}",
		"github.com/NVIDIA/nvidia-container-toolkit",
	)
	list.Dir, list.Env = dir, buildEnv("1")
	v, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("nvidia-container-toolkit's version in %s: %w", dir, err)
	}
	bin := filepath.Join(tmp, "nvidia-cdi-hook")
	ldflags := "-s -w -linkmode external -extldflags -static -X " +
		"github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=" + strings.TrimPrefix(
		strings.TrimSpace(string(v)),
		"v",
	)
	cmd := exec.CommandContext(
		ctx,
		"go",
		"build",
		"-trimpath",
		"-ldflags="+ldflags,
		"-o",
		bin,
		HookPackage,
	)
	cmd.Dir, cmd.Env = dir, buildEnv("1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %w: %s", HookPackage, err, strings.TrimSpace(string(out)))
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", HookPackage, err)
	}
	return b, nil
}

// cudaModuleDir is the folder of CUDAModule in the drakit checkout of the
// go command's main module, or the main module's folder where it is
// CUDAModule itself (its tests build the image too).
func cudaModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find %s: go env GOMOD: %w", CUDAModule, err)
	}
	mod := filepath.Dir(strings.TrimSpace(string(out)))
	if b, err := os.ReadFile(filepath.Join(mod, "go.mod")); err == nil &&
		strings.Contains(string(b), "\nmodule "+CUDAModule+"\n") {
		return mod, nil
	}
	dir := filepath.Join(mod, "examples", "nvidia", "cuda")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("find %s: not in a drakit checkout (no %s): %w", CUDAModule, dir, err)
	}
	return dir, nil
}

// GlibcCompanions are the libraries of glibc, beside libc.so.6 and from
// its package, that a dynamically linked image carries although its
// binary does not link them: NVIDIA's libnvidia-ml.so.1 and
// libnvidia-sandboxutils.so.1, loaded with dlopen from the node's driver
// root, need them (their NEEDED entries on current drivers), and the
// loader resolves them in the image.
var GlibcCompanions = []string{"libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"}

// withGlibcCompanions adds GlibcCompanions to libs, taken from the folder
// of libs' libc.so.6 (nothing for a static binary, without libc). Each
// must be there and, where dpkg knows the files, come from libc's
// package: a mix of glibc versions does not load.
func withGlibcCompanions(ctx context.Context, libs []string) ([]string, error) {
	libc := ""
	for _, l := range libs {
		if filepath.Base(l) == "libc.so.6" {
			libc = l
		}
	}
	if libc == "" {
		return libs, nil
	}
	pkg := debianPackage(ctx, libc)
	for _, name := range GlibcCompanions {
		p := filepath.Join(filepath.Dir(libc), name)
		if slices.Contains(libs, p) {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("glibc's %s beside %s: %w", name, libc, err)
		}
		if got := debianPackage(ctx, p); pkg != "" && got != pkg {
			return nil, fmt.Errorf("glibc's %s is from package %q, libc.so.6 from %q", p, got, pkg)
		}
		libs = append(libs, p)
	}
	return libs, nil
}

// debianPackage is the Debian package that installed path ("libc6:amd64"),
// "" where dpkg does not know it (or there is no dpkg).
func debianPackage(ctx context.Context, path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	for _, p := range []string{path, real} {
		out, err := exec.CommandContext(ctx, "dpkg-query", "-S", p).Output()
		if err != nil {
			continue
		}
		// "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"
		if name, _, ok := strings.Cut(strings.TrimSpace(string(out)), ": "); ok {
			return name
		}
	}
	return ""
}

// sharedLibraries are the absolute paths of the shared libraries and the
// dynamic loader bin needs, as ldd prints them; none for a static binary.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>":
			if f[2] == "not" {
				return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(line))
			}
			libs = append(libs, f[2])
		case len(f) >= 1 && filepath.IsAbs(f[0]):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}

// LocalClusterValues are the `helm install --set` values that run the
// chart on drakit's local cluster (testenv.WithRealNode, drakit demo):
// its kubelet's root folder and CDI folder, the API server on 127.0.0.1
// (no service proxy there), the simulator's state in stateDir and the
// driver's own state in stateDir/driver (so that nothing of a test run is
// left on the host), and the image already imported (pull policy Never).
// The local cluster has no pod network either, so the webhook, where it
// runs (with migPublication=layout and a dynamic MIG GPU, or enabled),
// serves on the host's network at 127.0.0.1:webhookPort, which the API
// server calls by URL ([FreeLocalPort] finds a free one). They select no
// simulator: add [SimulatorValues] for that.
func LocalClusterValues(
	kubeletDir, cdiDir, apiServerPort, stateDir string,
	webhookPort int,
) []string {
	return []string{
		"kubeletDir=" + kubeletDir,
		"cdiDir=" + cdiDir,
		"kubernetesAPI.host=127.0.0.1",
		"kubernetesAPI.port=" + apiServerPort,
		"nvml.simStateDir=" + stateDir,
		"stateDir=" + stateDir + "/driver",
		"image.pullPolicy=Never",
		"webhook.hostNetwork=true",
		fmt.Sprintf("webhook.port=%d", webhookPort),
		fmt.Sprintf("webhook.url=https://127.0.0.1:%d", webhookPort),
	}
}

// FreeLocalPort returns a TCP port of 127.0.0.1 that is free now, for
// [LocalClusterValues]' webhook.
func FreeLocalPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free local port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// SimulatorValues are the `helm install --set` values that run the driver
// on a simulated DGX H200 on every node, as drakit's demo and tests do:
// nvml.sim=dgx-h200 with GPUs 0-1 whole, 2-3 holding an administrator's
// MIG devices and 4-7 dynamic MIG (the alpha gates DynamicMIG and
// DynamicMIGWholeGPU turned on: the demo shows dynamic MIG, which the
// chart's defaults keep off); no GPU node label required; a
// DeviceClass per H200 MIG profile; and the extended resource names
// nvidia.com/gpu and nvidia.com/mig-<profile> on the classes (no device
// plugin serves them there). The chart's defaults are for real GPUs
// instead; every installation of the chart for the simulator passes
// these values, so they live here and nowhere else.
func SimulatorValues() []string {
	return []string{
		"nvml.sim=dgx-h200",
		"nvml.simMIGGPUs=2-7",
		`nvml.simInstances=2:4g.71gb@0\,2:3g.71gb@4\,3:3g.71gb@0\,3:2g.35gb@4\,3:1g.18gb@6`,
		`dynamicMIGGPUs=4\,5\,6\,7`,
		"featureGates.DynamicMIG=true",
		"featureGates.DynamicMIGWholeGPU=true",
		"gpuNodeLabel=",
		"deviceClasses.migProfiles={1g.18gb,1g.18gb+me,1g.35gb,2g.35gb,3g.71gb,4g.71gb,7g.141gb}",
		"deviceClasses.extendedResources=true",
	}
}
