// Package cuda gives containers on real NVIDIA GPUs what a CUDA program
// needs, the way NVIDIA's own DRA driver does: nvidia-container-toolkit's
// nvcdi, in NVML mode, finds the device nodes, the driver's libraries
// (libcuda, libnvidia-ml, ...) and binaries (nvidia-smi, ...) under the
// driver root and adds the hooks (nvidia-cdi-hook: update-ldcache,
// create-symlinks, ...) that make them usable. Its Editor is a
// driver.ContainerEditor of examples/nvidia/driver.
//
// The package is a module of its own (github.com/drakit/drakit/examples/nvidia/cuda)
// so that the toolkit and what it requires stay out of drakit's module
// graph: a vendor who imports drakit's SDK packages, or the reference
// driver's simulator, does not get them. cmd/nvidia-dra-driver here is the
// driver binary the image ships.
package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/drakit/drakit/cdi"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/statefile"
)

// DefaultHookPath is where nvidia-cdi-hook is on a node with
// nvidia-container-toolkit installed from NVIDIA's packages.
const DefaultHookPath = "/usr/bin/nvidia-cdi-hook"

// Editor is a driver.ContainerEditor on nvcdi.
type Editor struct {
	lib       nvcdi.Interface
	transform transform.Transformer
	root      nvdriver.DriverRoot
}

var _ nvdriver.ContainerEditor = (*Editor)(nil)

// Option configures New.
type Option func(*options) error

type options struct {
	hookPath string
}

// WithHookPath sets the path of nvidia-cdi-hook on the node, which the
// container runtime runs (default DefaultHookPath; the GPU Operator
// installs it under /usr/local/nvidia/toolkit).
func WithHookPath(p string) Option {
	return func(o *options) error {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("nvidia-cdi-hook path %q is not absolute", p)
		}
		o.hookPath = p
		return nil
	}
}

// New returns an Editor that reads the devices from lib (go-nvml's
// library, initialized or not; libnvidia-sandboxutils is never loaded,
// as in NVIDIA's DRA driver) and the driver's files under root: found
// under root.Container, where this process sees them, and named in the
// edits under root.Host, where the container runtime finds them.
func New(lib gonvml.Interface, root nvdriver.DriverRoot, opts ...Option) (*Editor, error) {
	if lib == nil {
		return nil, errors.New("new CUDA container editor: no NVML library")
	}
	o := options{hookPath: DefaultHookPath}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new CUDA container editor: %w", err)
		}
	}
	if root.Host == "" {
		root.Host = "/"
	}
	if root.Container == "" {
		root.Container = root.Host
	}
	dev := root.DevRoot() // "/" where the driver root has no dev folder
	l, err := nvcdi.New(
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithNvmlLib(lib),
		nvcdi.WithDriverRoot(root.Container),
		nvcdi.WithDevRoot(dev.Container),
		nvcdi.WithNVIDIACDIHookPath(o.hookPath),
		nvcdi.WithLogger(logger{}),
		// As NVIDIA's DRA driver: libnvidia-sandboxutils, loaded from
		// the driver root into this process, needs what the image does
		// not carry, and NVML alone tells the devices.
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	)
	if err != nil {
		return nil, fmt.Errorf("new CUDA container editor: %w", err)
	}
	return &Editor{
		root: dev,
		lib:  l,
		transform: transformroot.NewDriverTransformer(
			transformroot.WithDriverRoot(root.Container),
			transformroot.WithTargetDriverRoot(root.Host),
		),
	}, nil
}

// DeviceEdits returns nvcdi's edits of the full GPU or MIG device
// dev.UUID: its device nodes. A MIG device's two capability nodes are the
// driver's own (nvdriver.MIGCapabilityNodes: type, numbers and mode read
// from this process's /proc, the kernel's view, whatever the driver
// root), in place of nvcdi's: nvcdi looks them up
// as files under the device root and silently leaves out the missing
// ones, which is the normal case for a MIG device made after the node
// booted, and the container would then see no MIG device.
func (e *Editor) DeviceEdits(dev nvdriver.ContainerDevice) (*cdi.Edits, error) {
	devs, err := e.lib.GetDeviceSpecsByID(dev.UUID)
	if err != nil {
		return nil, fmt.Errorf("container edits of %s: %w", dev.UUID, err)
	}
	if len(devs) != 1 {
		return nil, fmt.Errorf("container edits of %s: nvcdi found %d devices", dev.UUID, len(devs))
	}
	c := devs[0].ContainerEdits
	if !dev.MIG {
		return e.edits(c, "container edits of "+dev.UUID)
	}
	caps, err := nvdriver.MIGCapabilityNodes("/proc", dev.Minor, dev.GI, dev.CI)
	if err != nil {
		return nil, fmt.Errorf("container edits of %s: %w", dev.UUID, err)
	}
	c.DeviceNodes = slices.DeleteFunc(
		slices.Clone(c.DeviceNodes),
		func(n *cdispec.DeviceNode) bool {
			return strings.HasPrefix(n.Path, "/dev/nvidia-caps/")
		},
	)
	out, err := e.edits(c, "container edits of "+dev.UUID)
	if err != nil {
		return nil, err
	}
	for _, n := range caps {
		n.HostPath = e.root.HostPath(n.Path)
		out.DeviceNode(n)
	}
	return out, nil
}

// CommonEdits returns nvcdi's edits for every container with a GPU: the
// control device nodes, the driver's libraries, binaries, firmware and
// IPC sockets, and the hooks.
func (e *Editor) CommonEdits() (*cdi.Edits, error) {
	c, err := e.lib.GetCommonEdits()
	if err != nil {
		return nil, fmt.Errorf("common container edits: %w", err)
	}
	if c == nil || c.ContainerEdits == nil {
		return &cdi.Edits{}, nil
	}
	return e.edits(*c.ContainerEdits, "common container edits")
}

// edits turns nvcdi's edits, with paths as this process sees them, into
// the node's paths.
func (e *Editor) edits(c cdispec.ContainerEdits, what string) (*cdi.Edits, error) {
	spec := &cdispec.Spec{ContainerEdits: c}
	if err := e.transform.Transform(spec); err != nil {
		return nil, fmt.Errorf("%s: driver root: %w", what, err)
	}
	out, err := cdi.EditsFromSpec(spec.ContainerEdits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// InstallHook copies the nvidia-cdi-hook at from (the image's) to to (a
// host folder's path, the same in the driver's container and on the
// node), executable, replacing what is there: written beside it and
// renamed, so that a container runtime running the old hook at that
// moment finds one complete file or the other. A file already the same
// is left alone. Both paths must be absolute.
func InstallHook(from, to string) error {
	if !filepath.IsAbs(from) || !filepath.IsAbs(to) {
		return fmt.Errorf("install nvidia-cdi-hook %s to %s: want absolute paths", from, to)
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("install nvidia-cdi-hook: %w", err)
	}
	if old, err := os.ReadFile(to); err == nil && bytes.Equal(old, b) {
		if err := os.Chmod(to, 0o755); err != nil {
			return fmt.Errorf("install nvidia-cdi-hook: %w", err)
		}
		return nil
	}
	if err := statefile.WriteFile(to, b, statefile.WithMode(0o755)); err != nil {
		return fmt.Errorf("install nvidia-cdi-hook %s to %s: %w", from, to, err)
	}
	return nil
}

// logger sends nvcdi's messages to klog.
type logger struct{}

func (logger) Debugf(f string, args ...any)   { klog.V(4).Infof("nvcdi: "+f, args...) }
func (logger) Tracef(f string, args ...any)   { klog.V(6).Infof("nvcdi: "+f, args...) }
func (logger) Infof(f string, args ...any)    { klog.V(2).Infof("nvcdi: "+f, args...) }
func (logger) Warningf(f string, args ...any) { klog.Warningf("nvcdi: "+f, args...) }
func (logger) Errorf(f string, args ...any)   { klog.Errorf("nvcdi: "+f, args...) }
