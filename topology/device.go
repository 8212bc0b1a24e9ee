package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/drakit/drakit/device"
)

// The standard device attributes. Their values are defined by Kubernetes
// (k8s.io/dynamic-resource-allocation/deviceattribute); drakit re-exports the
// names so a driver needs only this package. They are untyped constants: a
// string for package device's setters, a resourceapi.QualifiedName for API
// objects.
const (
	// PCIeRootAttribute names the PCIe root complex a device hangs off, as a
	// string "pci<domain>:<bus>", e.g. "pci0000:00". Devices with equal values
	// share a root complex: the usual meaning of "GPU and NIC are close".
	PCIeRootAttribute = device.KubernetesDomain + "/pcieRoot"
	// PCIBusIDAttribute names a PCI device's address as a string in extended
	// BDF notation "<domain>:<bus>:<device>.<function>", e.g. "0000:3b:00.0".
	PCIBusIDAttribute = device.KubernetesDomain + "/pciBusID"
	// NUMANodeAttribute names the NUMA node of a device: an int (the
	// physical node) or, with the DRAListTypeAttributes feature gate, a list
	// of ints whose first element is the physical node. A device with no NUMA
	// affinity has no such attribute.
	NUMANodeAttribute = device.KubernetesDomain + "/numaNode"
)

// Fully qualified forms of the standard attribute names, as used in
// matchAttribute constraints.
const (
	// PCIeRoot is PCIeRootAttribute as a FullyQualifiedName.
	PCIeRoot resourceapi.FullyQualifiedName = resourceapi.FullyQualifiedName(PCIeRootAttribute)
	// PCIBusID is PCIBusIDAttribute as a FullyQualifiedName.
	PCIBusID resourceapi.FullyQualifiedName = resourceapi.FullyQualifiedName(PCIBusIDAttribute)
	// NUMANode is NUMANodeAttribute as a FullyQualifiedName.
	NUMANode resourceapi.FullyQualifiedName = resourceapi.FullyQualifiedName(NUMANodeAttribute)
)

// maxNUMANode is the largest NUMA node ID Linux can report (MAX_NUMNODES is
// at most 1<<10 on every architecture).
const maxNUMANode = 1023

var (
	// ErrInvalidPCIBusID is returned (wrapped) for a PCI bus ID that is not
	// in extended BDF notation.
	ErrInvalidPCIBusID = errors.New("invalid PCI bus ID")
	// ErrDeviceNotFound is returned (wrapped) when sysfs has no PCI device
	// with the given bus ID.
	ErrDeviceNotFound = errors.New("PCI device not found in sysfs")
	// ErrBadSysfs is returned (wrapped) when a sysfs entry exists but its
	// content or shape is not what the kernel produces; the message names
	// the entry and what was found.
	ErrBadSysfs = errors.New("unexpected sysfs content")
)

// PCIDevice holds the standard topology facts of one PCI device as read
// from sysfs.
type PCIDevice struct {
	// BusID is the normalized bus ID ("0000:3b:00.0").
	BusID string
	// PCIeRoot is the root complex ("pci0000:3a").
	PCIeRoot string
	// NUMANode is the device's physical NUMA node, or -1 when the kernel
	// reports no NUMA affinity (then Attributes has no numaNode entry).
	NUMANode int
	// Attributes holds the standard attributes ready to be merged into a
	// resource.k8s.io/v1 Device's attributes: always pciBusID and pcieRoot,
	// numaNode only when NUMANode >= 0 (a list with [WithNUMAList]). For a
	// [device.Device], use [PCIDevice.SetAttributes].
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

// SetAttributes puts the device's standard attributes on d and returns d:
// pciBusID and pcieRoot (strings), and numaNode (an int) when the device
// has NUMA affinity. A numaNode list ([WithNUMAList]) has no form in
// package device: d gets the physical node as an int, which every
// cluster accepts; publish the list through Attributes instead.
func (p PCIDevice) SetAttributes(d *device.Device) *device.Device {
	d.StringAttribute(PCIBusIDAttribute, p.BusID).StringAttribute(PCIeRootAttribute, p.PCIeRoot)
	if p.NUMANode >= 0 {
		d.IntAttribute(NUMANodeAttribute, int64(p.NUMANode))
	}
	return d
}

// ReadOption configures ReadPCIDevice.
type ReadOption func(*readOptions) error

type readOptions struct {
	root     string
	numaList bool
}

// WithSysfsRoot reads sysfs from dir instead of /sys: a fake tree in tests,
// or the host's /sys mounted elsewhere in a container. dir must exist.
func WithSysfsRoot(dir string) ReadOption {
	return func(o *readOptions) error {
		if dir == "" {
			return errors.New("sysfs root must not be empty")
		}
		st, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("check sysfs root: %w", err)
		}
		if !st.IsDir() {
			return fmt.Errorf("sysfs root %s is not a directory", dir)
		}
		o.root = dir
		return nil
	}
}

// WithNUMAList publishes numaNode as a list (physical node first, then the
// same-socket nodes at the smallest SLIT distance). Use it only when the
// cluster has the DRAListTypeAttributes feature gate on: otherwise the API
// server rejects the slice. The default is a scalar int.
func WithNUMAList() ReadOption {
	return func(o *readOptions) error { o.numaList = true; return nil }
}

var (
	bdfRE      = regexp.MustCompile(`^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$`)
	pcieRootRE = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)
)

// NormalizePCIBusID returns id in the form the standard attributes use:
// lower-case hex with a four-digit domain ("0000:3b:00.0"). It accepts the
// eight-digit domain NVML and nvidia-smi print ("00000000:3B:00.0") when the
// upper four digits are zero. Anything else is an error wrapping
// ErrInvalidPCIBusID.
func NormalizePCIBusID(id string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(id))
	m := bdfRE.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("%w %q: want <domain>:<bus>:<device>.<function> in hex, e.g. 0000:3b:00.0", ErrInvalidPCIBusID, id)
	}
	domain := m[1]
	switch len(domain) {
	case 4:
	case 8:
		if domain[:4] != "0000" {
			return "", fmt.Errorf("%w %q: PCI domain %s does not fit in 16 bits", ErrInvalidPCIBusID, id, domain)
		}
		domain = domain[4:]
	default:
		return "", fmt.Errorf("%w %q: PCI domain must have 4 or 8 hex digits", ErrInvalidPCIBusID, id)
	}
	dev, _ := strconv.ParseUint(m[3], 16, 8)
	if dev > 0x1f {
		return "", fmt.Errorf("%w %q: device number %s is above 1f", ErrInvalidPCIBusID, id, m[3])
	}
	return domain + ":" + m[2] + ":" + m[3] + "." + m[4], nil
}

// ReadPCIDevice reads the standard topology attributes of the PCI device
// busID from sysfs (/sys, or the WithSysfsRoot folder): its bus ID, its PCIe
// root complex (from the /sys/bus/pci/devices/<id> link into /sys/devices)
// and its NUMA node (from numa_node). busID may be in NVML's form; it is
// normalized first.
//
// Errors wrap ErrInvalidPCIBusID, ErrDeviceNotFound or ErrBadSysfs and name
// the sysfs entry at fault; no attribute is guessed.
func ReadPCIDevice(busID string, opts ...ReadOption) (PCIDevice, error) {
	o := readOptions{root: deviceattribute.SysfsRoot}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return PCIDevice{}, fmt.Errorf("read PCI device %s: %w", busID, err)
		}
	}
	id, err := NormalizePCIBusID(busID)
	if err != nil {
		return PCIDevice{}, fmt.Errorf("read PCI device: %w", err)
	}
	sysfs := os.DirFS(o.root).(fs.ReadLinkFS)
	mod := deviceattribute.WithFS(sysfs)
	link := path.Join("bus/pci/devices", id)

	fi, err := fs.Lstat(sysfs, link)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: no %s", id, ErrDeviceNotFound, path.Join(o.root, link))
	case err != nil:
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w", id, err)
	case fi.Mode()&fs.ModeSymlink == 0:
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %s is not a symlink into devices/", id, ErrBadSysfs, path.Join(o.root, link))
	}

	busAttr, err := deviceattribute.GetPCIBusIDAttribute(id)
	if err != nil {
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %w", id, ErrInvalidPCIBusID, err)
	}
	rootAttr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(id, mod)
	if err != nil {
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %w", id, ErrBadSysfs, err)
	}
	root := *rootAttr.Value.StringValue
	if !pcieRootRE.MatchString(root) {
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %s links to a root %q that is not pci<domain>:<bus>", id, ErrBadSysfs, path.Join(o.root, link), root)
	}

	dev := PCIDevice{
		BusID:    id,
		PCIeRoot: root,
		NUMANode: -1,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			PCIBusIDAttribute: busAttr.Value,
			PCIeRootAttribute: rootAttr.Value,
		},
	}

	numaPath := path.Join(link, "numa_node")
	raw, err := fs.ReadFile(sysfs, numaPath)
	if err != nil {
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: read %s: %w", id, ErrBadSysfs, path.Join(o.root, numaPath), err)
	}
	node, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	switch {
	case err != nil:
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %s holds %q, not an integer", id, ErrBadSysfs, path.Join(o.root, numaPath), strings.TrimSpace(string(raw)))
	case node < -1 || node > maxNUMANode:
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %s holds %d, want -1..%d", id, ErrBadSysfs, path.Join(o.root, numaPath), node, maxNUMANode)
	case node == -1:
		// No NUMA affinity: the attribute must be absent, else it would
		// match every other NUMA-less device.
		return dev, nil
	}
	form := deviceattribute.ScalarAttribute
	if o.numaList {
		form = deviceattribute.ListAttribute
	}
	numaAttr, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(id, form, mod)
	if err != nil {
		return PCIDevice{}, fmt.Errorf("read PCI device %s: %w: %w", id, ErrBadSysfs, err)
	}
	dev.NUMANode = node
	dev.Attributes[NUMANodeAttribute] = numaAttr.Value
	return dev, nil
}
