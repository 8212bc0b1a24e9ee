package gpucheck

import (
	"bytes"
	"context"
	_ "embed" // the C sources
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/drakit/drakit/cdi"
)

// ProbeSource is cuda-probe's C source: it prints the container's
// NVIDIA_* variables ("cuda-probe: env NAME=VALUE"), the file
// libcuda.so.1 was loaded from ("cuda-probe: libcuda.so.1 loaded from
// PATH (REAL PATH)"), then each call's result: "cuda-probe: cuInit: 0",
// "cuda-probe: cuDeviceGetCount: 0, count N" and, per device,
// "cuda-probe: device I: cuDeviceGetName: 0, NAME". Where dlopen fails
// it prints "cuda-probe: dlopen libcuda.so.1: FAILED: <dlerror>" and
// exits 2.
//
//go:embed c/cuda_probe.c
var ProbeSource string

// StandInCUDASource is the C source of a stand-in libcuda.so.1: cuInit
// succeeds where /dev/nvidiactl exists (else 100, CUDA_ERROR_NO_DEVICE),
// the devices are the /dev/nvidia<N> nodes, in order of N, and a device's
// name is "drakit stand-in GPU /dev/nvidia<N>", followed by " with
// nvidia-cap<M> ..." for the nodes in /dev/nvidia-caps.
//
//go:embed c/standin_libcuda.c
var StandInCUDASource string

// ProbePath is where Run's callers put cuda-probe in the container
// (Container.Binds).
const ProbePath = "/gpu-check/cuda-probe"

// BuildProbe compiles cuda-probe (ProbeSource) to out with the C
// compiler cc: a program of this machine's C library, which the driver's
// image carries (it is built on the same machine).
func BuildProbe(ctx context.Context, out string) error {
	return compile(ctx, ProbeSource, "cuda_probe.c", out, "-ldl")
}

// BuildStandInCUDA compiles the stand-in libcuda (StandInCUDASource) to
// out, with the SONAME libcuda.so.1, as NVIDIA's libcuda.so.<version>.
func BuildStandInCUDA(ctx context.Context, out string) error {
	return compile(
		ctx,
		StandInCUDASource,
		"standin_libcuda.c",
		out,
		"-shared",
		"-fPIC",
		"-Wl,-soname,libcuda.so.1",
	)
}

// compile compiles C source src (named name) to out with cc and args.
func compile(ctx context.Context, src, name, out string, args ...string) error {
	tmp, err := os.MkdirTemp("", "drakit-gpucheck-")
	if err != nil {
		return fmt.Errorf("compile %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, name)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return fmt.Errorf("compile %s: %w", name, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("compile %s: %w", name, err)
	}
	cmd := exec.CommandContext(
		ctx,
		"cc",
		append([]string{"-O2", "-Wall", "-o", out, file}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compile %s with cc: %w: %s", name, err, bytes.TrimSpace(b))
	}
	return nil
}

// Container is a container to run with Run.
type Container struct {
	// Root is the container's root file system (an unpacked image),
	// used in place and writable, as a runtime's snapshot is: hooks such
	// as nvidia-cdi-hook's update-ldcache write there. Required.
	Root string
	// CDIDirs are the folders of the CDI specs, Devices the qualified CDI
	// device IDs (vendor/class=name) whose edits the container gets.
	CDIDirs []string
	Devices []string
	// Args is the process: the program's path in the container, then
	// its arguments. Required.
	Args []string
	// Binds are host files or folders bind-mounted read-only into the
	// container, container path to host path (e.g. ProbePath to a built
	// cuda-probe).
	Binds map[string]string
	// Runtime is the OCI runtime's program (default "runc", from PATH).
	Runtime string
	// WithoutHooks leaves the spec's hooks out. By default a hook runs
	// when its program exists on this machine; one that does not is left
	// out, and Result.SkippedHooks names it.
	WithoutHooks bool
}

// Result is what Run saw.
type Result struct {
	// Output is the process's standard output and error together, with
	// the runtime's own messages.
	Output []byte
	// Hooks are the hooks the runtime was given, SkippedHooks those left
	// out because their program is not on this machine: "<stage> <path>
	// <args>".
	Hooks, SkippedHooks []string
}

// ErrNoRuntime is wrapped by Run's error when the OCI runtime's program
// is not on this machine.
var ErrNoRuntime = errors.New("no OCI runtime")

var containers atomic.Int64

// Run makes the container c as a runtime does, with the CDI library's
// edits of c.Devices applied to a minimal OCI spec (namespaces pid,
// mount, ipc, uts and network; /proc, /dev, /dev/pts, /dev/shm and a
// read-only /sys), runs its process to the end under the runtime in a
// bundle of its own, and deletes it. A process that exits with an error
// is an error too (the output is in Result). The runtime needs root.
func Run(ctx context.Context, c Container) (Result, error) {
	var res Result
	if c.Root == "" || len(c.Args) == 0 {
		return res, errors.New("run container: no root or no process")
	}
	runtime := c.Runtime
	if runtime == "" {
		runtime = "runc"
	}
	runtime, err := exec.LookPath(runtime)
	if err != nil {
		return res, fmt.Errorf("run container: %w: %w", ErrNoRuntime, err)
	}
	root, err := filepath.Abs(c.Root)
	if err != nil {
		return res, fmt.Errorf("run container: %w", err)
	}
	spec := baseSpec(root, c.Args)
	for _, target := range sortedKeys(c.Binds) {
		spec.Mounts = append(
			spec.Mounts,
			oci.Mount{
				Destination: target,
				Source:      c.Binds[target],
				Type:        "bind",
				Options:     []string{"rbind", "ro", "nosuid", "nodev"},
			},
		)
	}
	if len(c.Devices) > 0 {
		if err := cdi.Inject(spec, c.CDIDirs, c.Devices...); err != nil {
			return res, fmt.Errorf("run container: %w", err)
		}
	}
	res.Hooks, res.SkippedHooks = hooks(spec, c.WithoutHooks)
	bundle, err := os.MkdirTemp("", "drakit-gpucheck-bundle-")
	if err != nil {
		return res, fmt.Errorf("run container: %w", err)
	}
	defer os.RemoveAll(bundle)
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return res, fmt.Errorf("run container: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		return res, fmt.Errorf("run container: %w", err)
	}
	state := filepath.Join(bundle, "state")
	id := "drakit-gpu-check-" + strconv.Itoa(
		os.Getpid(),
	) + "-" + strconv.FormatInt(
		containers.Add(1),
		10,
	)
	cmd := exec.CommandContext(ctx, runtime, "--root", state, "run", "--bundle", bundle, id)
	cmd.Dir = bundle
	res.Output, err = cmd.CombinedOutput()
	// Whatever happened, no container is left behind.
	_ = exec.Command(runtime, "--root", state, "delete", "--force", id).Run()
	if err != nil {
		return res, fmt.Errorf("run container %s with %s: %w", id, runtime, err)
	}
	return res, nil
}

// hooks leaves out of spec every hook (all) or those whose program is not
// on this machine, and returns the hooks kept and those left out.
func hooks(spec *oci.Spec, all bool) (kept, skipped []string) {
	if spec.Hooks == nil {
		return nil, nil
	}
	filter := func(stage string, hs []oci.Hook) []oci.Hook {
		var out []oci.Hook
		for _, h := range hs {
			s := fmt.Sprintf("%s %s %v", stage, h.Path, h.Args)
			if _, err := os.Stat(h.Path); all || err != nil {
				skipped = append(skipped, s)
				continue
			}
			kept = append(kept, s)
			out = append(out, h)
		}
		return out
	}
	h := spec.Hooks
	h.Prestart = filter(
		"prestart",
		h.Prestart,
	) //nolint:staticcheck // runc still runs it; the spec may name it
	h.CreateRuntime = filter("createRuntime", h.CreateRuntime)
	h.CreateContainer = filter("createContainer", h.CreateContainer)
	h.StartContainer = filter("startContainer", h.StartContainer)
	h.Poststart = filter("poststart", h.Poststart)
	h.Poststop = filter("poststop", h.Poststop)
	return kept, skipped
}

// baseSpec is a minimal OCI spec, as `runc spec` writes it, for the root
// file system root and the process args.
func baseSpec(root string, args []string) *oci.Spec {
	return &oci.Spec{
		Version: oci.Version,
		Root:    &oci.Root{Path: root},
		Process: &oci.Process{
			Args: args,
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  "/",
			Capabilities: &oci.LinuxCapabilities{
				Bounding:  []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
				Effective: []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
				Permitted: []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
			},
			NoNewPrivileges: true,
		},
		Hostname: "gpu-check",
		Mounts: []oci.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{
				Destination: "/dev",
				Type:        "tmpfs",
				Source:      "tmpfs",
				Options:     []string{"nosuid", "strictatime", "mode=755", "size=65536k"},
			},
			{
				Destination: "/dev/pts",
				Type:        "devpts",
				Source:      "devpts",
				Options: []string{
					"nosuid",
					"noexec",
					"newinstance",
					"ptmxmode=0666",
					"mode=0620",
				},
			},
			{
				Destination: "/dev/shm",
				Type:        "tmpfs",
				Source:      "shm",
				Options:     []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"},
			},
			{
				Destination: "/sys",
				Type:        "sysfs",
				Source:      "sysfs",
				Options:     []string{"nosuid", "noexec", "nodev", "ro"},
			},
		},
		Linux: &oci.Linux{
			Resources: &oci.LinuxResources{
				Devices: []oci.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			Namespaces: []oci.LinuxNamespace{
				{Type: oci.PIDNamespace}, {Type: oci.NetworkNamespace}, {Type: oci.IPCNamespace},
				{Type: oci.UTSNamespace}, {Type: oci.MountNamespace},
			},
			MaskedPaths: []string{
				"/proc/kcore",
				"/proc/keys",
				"/proc/timer_list",
				"/sys/firmware",
			},
			ReadonlyPaths: []string{
				"/proc/bus",
				"/proc/fs",
				"/proc/irq",
				"/proc/sys",
				"/proc/sysrq-trigger",
			},
		},
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
