package topologytest_test

import (
	"testing"

	"github.com/drakit/drakit/topology/topologytest"
)

func TestAddPCIDeviceRejectsShapesTheKernelNeverMakes(t *testing.T) {
	tests := []struct {
		name string
		dev  topologytest.PCIDevice
	}{
		{"upper-case ID", topologytest.PCIDevice{BusID: "0000:3B:00.0", Root: "pci0000:3a"}},
		{"bad root", topologytest.PCIDevice{BusID: "0000:3b:00.0", Root: "pci00:3a"}},
		{"domain differs from root", topologytest.PCIDevice{BusID: "0001:3b:00.0", Root: "pci0000:3a"}},
		{"bus below root", topologytest.PCIDevice{BusID: "0000:01:00.0", Root: "pci0000:3a"}},
		{"bad bridge", topologytest.PCIDevice{BusID: "0000:3b:00.0", Root: "pci0000:3a", Bridges: []string{"3a:00.0"}}},
		{"numa below -1", topologytest.PCIDevice{BusID: "0000:3b:00.0", Root: "pci0000:3a", NUMANode: -2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := topologytest.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.AddPCIDevice(tt.dev); err == nil {
				t.Errorf("AddPCIDevice(%+v): no error", tt.dev)
			}
		})
	}
	t.Run("duplicate", func(t *testing.T) {
		s, err := topologytest.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		d := topologytest.PCIDevice{BusID: "0000:3b:00.0", Root: "pci0000:3a"}
		if err := s.AddPCIDevice(d); err != nil {
			t.Fatal(err)
		}
		if err := s.AddPCIDevice(d); err == nil {
			t.Error("second AddPCIDevice: no error")
		}
	})
}

func TestAddNUMANodeRejectsBadDistances(t *testing.T) {
	s, err := topologytest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddNUMANode(2, "0-1", 0, []int{10, 20}); err == nil {
		t.Error("node beyond its distance row: no error")
	}
	if err := s.AddNUMANode(0, "0-1", 0, []int{20, 10}); err == nil {
		t.Error("own distance not 10: no error")
	}
	if err := s.AddNUMANode(0, "3-1", 0, []int{10}); err == nil {
		t.Error("bad cpulist: no error")
	}
}
