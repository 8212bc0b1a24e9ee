package driver

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/drakit/drakit/cdi"
)

// ContainerDevice is a device as a ContainerEditor sees it.
type ContainerDevice struct {
	// UUID is the full GPU's ("GPU-...") or MIG device's ("MIG-...")
	// UUID.
	UUID string
	// Minor is the (parent) GPU's device minor (/dev/nvidia<Minor>).
	Minor int
	// MIG is true for a MIG device; GI and CI are then its GPU and
	// compute instance IDs.
	MIG    bool
	GI, CI int
}

// ContainerEditor gives the container edits of real GPUs, on top of the
// environment variables and the claim's devices file the driver always
// gives. The default (used without WithContainerEditor) gives device
// nodes only: /dev/nvidia<minor>, a MIG device's capability nodes, and
// the control nodes. A container then has its GPU but none of the
// driver's libraries unless the node's runtime adds them;
// examples/nvidia/cuda's editor adds them as NVIDIA's own driver does,
// with nvidia-container-toolkit's nvcdi.
type ContainerEditor interface {
	// DeviceEdits returns the edits of one full GPU or MIG device: its
	// device nodes.
	DeviceEdits(dev ContainerDevice) (*cdi.Edits, error)
	// CommonEdits returns the edits every container with an NVIDIA device
	// gets once, whatever its devices: control device nodes, the driver's
	// libraries and binaries, the hooks that make them usable.
	CommonEdits() (*cdi.Edits, error)
}

// WithContainerEditor sets how containers get real GPUs (see
// ContainerEditor). It has no effect in simulation
// (WithSimulatedContainers).
func WithContainerEditor(e ContainerEditor) Option {
	return func(o *options) error {
		if e == nil {
			return errors.New("container editor is nil")
		}
		o.editor = e
		return nil
	}
}

// DriverRoot says where the NVIDIA driver is installed: Host is its path
// on the node, the one a CDI spec names for the container runtime ("/"
// for a driver installed on the host, /run/nvidia/driver for the GPU
// Operator's driver container); Container is where this process sees
// that folder (the chart mounts it read-only at /driver-root). Device
// nodes are Host/dev/... (see DevRoot). The MIG capabilities are never
// read under the driver root: /proc/devices and
// /proc/driver/nvidia/capabilities are the kernel's, the same in every
// container of the node, and this process reads its own /proc (as
// NVIDIA's driver does), so a driver root without proc (GKE's
// /home/kubernetes/bin/nvidia) serves MIG devices too.
type DriverRoot struct {
	Host, Container string
}

// WithDriverRoot sets the driver root (default: "/" seen at "/"). Both
// paths must be absolute; an empty Container means Host.
func WithDriverRoot(r DriverRoot) Option {
	return func(o *options) error {
		if r.Container == "" {
			r.Container = r.Host
		}
		if !filepath.IsAbs(r.Host) || !filepath.IsAbs(r.Container) {
			return fmt.Errorf(
				"driver root %q (seen at %q): want absolute paths",
				r.Host,
				r.Container,
			)
		}
		r.Host, r.Container = filepath.Clean(r.Host), filepath.Clean(r.Container)
		o.root = r
		return nil
	}
}

// HostPath is p (an absolute path as seen on a host whose driver root is
// "/", e.g. /dev/nvidia0) under the driver root on the node.
func (r DriverRoot) HostPath(p string) string {
	return path.Join(r.Host, p)
}

// DevRoot is the root the device nodes are under, as DriverRoot: the
// driver root where it has a dev folder, else "/" (as NVIDIA's driver
// does: a driver root such as GKE's /home/kubernetes/bin/nvidia holds
// the libraries and binaries, and the device nodes are the host's
// /dev).
func (r DriverRoot) DevRoot() DriverRoot {
	if fi, err := os.Stat(filepath.Join(r.Container, "dev")); err == nil && fi.IsDir() {
		return r
	}
	return DriverRoot{Host: "/", Container: "/"}
}

// nodeEditor is the default ContainerEditor: device nodes only, found
// under the driver root.
type nodeEditor struct{ d *Driver }

// DeviceEdits gives the device's nodes (Driver.deviceNodes).
func (e nodeEditor) DeviceEdits(dev ContainerDevice) (*cdi.Edits, error) {
	info := devInfo{typ: TypeGPU, gi: dev.GI, ci: dev.CI}
	if dev.MIG {
		info.typ = TypeMIG
	}
	// deviceNodes reads the GPU from d.gpus by index.
	info.gpu = -1
	for i, g := range e.d.gpus {
		if g.Minor == dev.Minor {
			info.gpu = i
		}
	}
	if info.gpu < 0 {
		return nil, fmt.Errorf("device nodes of %s: no GPU with minor %d", dev.UUID, dev.Minor)
	}
	nodes, err := e.d.deviceNodes(info)
	if err != nil {
		return nil, err
	}
	return e.nodes(nodes), nil
}

// CommonEdits gives the control nodes.
func (e nodeEditor) CommonEdits() (*cdi.Edits, error) {
	return e.nodes(
		[]cdi.DeviceNode{
			{Path: "/dev/nvidiactl"},
			{Path: "/dev/nvidia-uvm"},
			{Path: "/dev/nvidia-uvm-tools"},
		},
	), nil
}

func (e nodeEditor) nodes(nodes []cdi.DeviceNode) *cdi.Edits {
	edits := &cdi.Edits{}
	dev := e.d.o.root.DevRoot()
	for _, n := range nodes {
		if dev.Host != "/" {
			n.HostPath = dev.HostPath(n.Path)
		}
		edits.DeviceNode(n)
	}
	return edits
}

// containerDevice is info's device as a ContainerEditor sees it.
func (d *Driver) containerDevice(info devInfo, uuid string) ContainerDevice {
	return ContainerDevice{
		UUID:  uuid,
		Minor: d.gpus[info.gpu].Minor,
		MIG:   info.typ == TypeMIG,
		GI:    info.gi,
		CI:    info.ci,
	}
}
