package topology_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/topology"
	"github.com/drakit/drakit/topology/topologytest"
)

func TestNormalizePCIBusID(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "0000:3b:00.0", want: "0000:3b:00.0"},
		{in: "0000:3B:00.0", want: "0000:3b:00.0"},
		{in: "00000000:3B:00.0", want: "0000:3b:00.0"},
		{in: " 0001:af:1f.7\n", want: "0001:af:1f.7"},
		{in: "00010000:3b:00.0", wantErr: true}, // domain beyond 16 bits
		{in: "3b:00.0", wantErr: true},          // no domain
		{in: "0000:3b:00.8", wantErr: true},     // function is 0-7
		{in: "0000:3b:20.0", wantErr: true},     // device is 0-1f
		{in: "000:3b:00.0", wantErr: true},
		{in: "", wantErr: true},
		{in: "0000:3b:00.0/", wantErr: true},
	}
	for _, tt := range tests {
		got, err := topology.NormalizePCIBusID(tt.in)
		if tt.wantErr {
			if !errors.Is(err, topology.ErrInvalidPCIBusID) {
				t.Errorf("NormalizePCIBusID(%q) = %q, %v; want ErrInvalidPCIBusID", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizePCIBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// newMachine builds a two-socket machine: NUMA nodes 0,1 on socket 0 and
// 2,3 on socket 1; a GPU and a NIC behind one PCIe switch on root
// pci0000:00 (node 0), a GPU on root pci0000:80 (node 2) and a device with
// no NUMA affinity on pci0001:00.
func newMachine(t testing.TB) *topologytest.Sysfs {
	t.Helper()
	s, err := topologytest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dist := [][]int{
		{10, 11, 21, 21},
		{11, 10, 21, 21},
		{21, 21, 10, 11},
		{21, 21, 11, 10},
	}
	cpus := []string{"0-3", "4-7", "8-11", "12-15"}
	for n := range 4 {
		if err := s.AddNUMANode(n, cpus[n], n/2, dist[n]); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []topologytest.PCIDevice{
		{BusID: "0000:03:00.0", Root: "pci0000:00", Bridges: []string{"0000:00:01.0", "0000:01:00.0", "0000:02:08.0"}, NUMANode: 0},
		{BusID: "0000:04:00.0", Root: "pci0000:00", Bridges: []string{"0000:00:01.0", "0000:01:00.0", "0000:02:10.0"}, NUMANode: 0},
		{BusID: "0000:81:00.0", Root: "pci0000:80", Bridges: []string{"0000:80:02.0"}, NUMANode: 2},
		{BusID: "0001:00:00.0", Root: "pci0001:00", NUMANode: -1},
	} {
		if err := s.AddPCIDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestReadPCIDevice(t *testing.T) {
	s := newMachine(t)
	str := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(v)} }
	num := func(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: ptr.To(v)} }
	type attrs = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	tests := []struct {
		name string
		id   string
		opts []topology.ReadOption
		want topology.PCIDevice
	}{{
		name: "behind a PCIe switch",
		id:   "0000:03:00.0",
		want: topology.PCIDevice{BusID: "0000:03:00.0", PCIeRoot: "pci0000:00", NUMANode: 0, Attributes: attrs{
			topology.PCIBusIDAttribute: str("0000:03:00.0"),
			topology.PCIeRootAttribute: str("pci0000:00"),
			topology.NUMANodeAttribute: num(0),
		}},
	}, {
		name: "NVML form, second root",
		id:   "00000000:81:00.0",
		want: topology.PCIDevice{BusID: "0000:81:00.0", PCIeRoot: "pci0000:80", NUMANode: 2, Attributes: attrs{
			topology.PCIBusIDAttribute: str("0000:81:00.0"),
			topology.PCIeRootAttribute: str("pci0000:80"),
			topology.NUMANodeAttribute: num(2),
		}},
	}, {
		name: "numa list form has the same-socket neighbour",
		id:   "0000:81:00.0",
		opts: []topology.ReadOption{topology.WithNUMAList()},
		want: topology.PCIDevice{BusID: "0000:81:00.0", PCIeRoot: "pci0000:80", NUMANode: 2, Attributes: attrs{
			topology.PCIBusIDAttribute: str("0000:81:00.0"),
			topology.PCIeRootAttribute: str("pci0000:80"),
			topology.NUMANodeAttribute: {IntValues: []int64{2, 3}},
		}},
	}, {
		name: "no NUMA affinity: no numaNode attribute",
		id:   "0001:00:00.0",
		want: topology.PCIDevice{BusID: "0001:00:00.0", PCIeRoot: "pci0001:00", NUMANode: -1, Attributes: attrs{
			topology.PCIBusIDAttribute: str("0001:00:00.0"),
			topology.PCIeRootAttribute: str("pci0001:00"),
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := topology.ReadPCIDevice(tt.id, append([]topology.ReadOption{topology.WithSysfsRoot(s.Root)}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadPCIDevice(%s) (-want +got):\n%s", tt.id, diff)
			}
		})
	}
}

func TestReadPCIDeviceErrors(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		mangle  func(t *testing.T, root string)
		wantErr error
		wantMsg string // a substring the message must contain
	}{{
		name: "bad bus ID", id: "3b:00.0",
		wantErr: topology.ErrInvalidPCIBusID, wantMsg: `"3b:00.0"`,
	}, {
		name: "absent device", id: "0000:99:00.0",
		wantErr: topology.ErrDeviceNotFound, wantMsg: "bus/pci/devices/0000:99:00.0",
	}, {
		name: "bus entry is a folder, not a link", id: "0000:05:00.0",
		mangle: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "bus/pci/devices/0000:05:00.0"))
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "not a symlink",
	}, {
		name: "link points outside devices/pci*", id: "0000:05:00.0",
		mangle: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "devices/platform/0000:05:00.0"))
			symlink(t, "../../../devices/platform/0000:05:00.0", filepath.Join(root, "bus/pci/devices/0000:05:00.0"))
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "devices/pci",
	}, {
		name: "link to another device", id: "0000:05:00.0",
		mangle: func(t *testing.T, root string) {
			symlink(t, "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0", filepath.Join(root, "bus/pci/devices/0000:05:00.0"))
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "must end with 0000:05:00.0",
	}, {
		name: "root folder that is not a root complex", id: "0000:05:00.0",
		mangle: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "devices/pcifoo/0000:05:00.0"))
			symlink(t, "../../../devices/pcifoo/0000:05:00.0", filepath.Join(root, "bus/pci/devices/0000:05:00.0"))
		},
		wantErr: topology.ErrBadSysfs, wantMsg: `"pcifoo"`,
	}, {
		name: "numa_node missing", id: "0000:03:00.0",
		mangle: func(t *testing.T, root string) {
			rm(t, filepath.Join(root, "bus/pci/devices/0000:03:00.0/numa_node"))
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "numa_node",
	}, {
		name: "numa_node garbage", id: "0000:03:00.0",
		mangle: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "bus/pci/devices/0000:03:00.0/numa_node"), "zero\n")
		},
		wantErr: topology.ErrBadSysfs, wantMsg: `"zero"`,
	}, {
		name: "numa_node out of range", id: "0000:03:00.0",
		mangle: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "bus/pci/devices/0000:03:00.0/numa_node"), "4096\n")
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "4096",
	}, {
		name: "numa_node below -1", id: "0000:03:00.0",
		mangle: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "bus/pci/devices/0000:03:00.0/numa_node"), "-2\n")
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "-2",
	}, {
		name: "empty numa_node", id: "0000:03:00.0",
		mangle: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "bus/pci/devices/0000:03:00.0/numa_node"), "")
		},
		wantErr: topology.ErrBadSysfs, wantMsg: "not an integer",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newMachine(t)
			if tt.mangle != nil {
				tt.mangle(t, s.Root)
			}
			got, err := topology.ReadPCIDevice(tt.id, topology.WithSysfsRoot(s.Root))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ReadPCIDevice(%s) = %+v, %v; want error %v", tt.id, got, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestWithSysfsRootErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	write(t, file, "x")
	for _, root := range []string{"", filepath.Join(t.TempDir(), "missing"), file} {
		if _, err := topology.ReadPCIDevice("0000:00:00.0", topology.WithSysfsRoot(root)); err == nil {
			t.Errorf("WithSysfsRoot(%q): no error", root)
		}
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSetAttributes checks that a device.Device given a PCI device's
// attributes publishes exactly the standard attributes that
// ReadPCIDevice computed, for devices with and without NUMA affinity.
func TestSetAttributes(t *testing.T) {
	s := newMachine(t)
	for _, id := range []string{"0000:03:00.0", "0001:00:00.0"} {
		pci, err := topology.ReadPCIDevice(id, topology.WithSysfsRoot(s.Root))
		if err != nil {
			t.Fatal(err)
		}
		d := pci.SetAttributes(device.New("card").StringAttribute("model", "x"))
		inv := &device.Inventory{Driver: "fpga.example.com", Pools: []device.Pool{{Name: "node", Devices: []*device.Device{d}}}}
		res, err := inv.DriverResources()
		if err != nil {
			t.Fatal(err)
		}
		got := res.Pools["node"].Slices[0].Devices[0].Attributes
		delete(got, "model")
		if diff := cmp.Diff(pci.Attributes, got); diff != "" {
			t.Errorf("%s: published attributes differ from ReadPCIDevice's (-want +got):\n%s", id, diff)
		}
	}
}

func TestStandardAttributeNames(t *testing.T) {
	for got, want := range map[resourceapi.QualifiedName]resourceapi.QualifiedName{
		topology.PCIeRootAttribute: deviceattribute.StandardDeviceAttributePCIeRoot,
		topology.PCIBusIDAttribute: deviceattribute.StandardDeviceAttributePCIBusID,
		topology.NUMANodeAttribute: deviceattribute.StandardDeviceAttributeNUMANode,
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}
