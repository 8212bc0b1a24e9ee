package nvmlsim

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// A GPU removed from the bus shifts the enumeration as on a node that
// rebooted after an XID 79: the later GPUs' indexes and minors move down
// by one, each keeps its UUID, PCI bus ID and MIG devices, and every
// process sharing the state sees it; restored, the GPU is back in its
// slot.
func TestRemoveGPU(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpus.json")
	s, err := Open(path, WithServer("dgx-h200"))
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	gi, err := s.CreateGPUInstance(5, 9, mig.Placement{Start: 4, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveGPU(2); err != nil {
		t.Fatal(err)
	}
	other, err := Open(path) // another process
	if err != nil {
		t.Fatal(err)
	}
	after, err := other.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 7 {
		t.Fatalf("%d GPUs after removing one, want 7", len(after))
	}
	for i, g := range after {
		was := before[i]
		if i >= 2 {
			was = before[i+1]
		}
		if g.Index != i || g.Minor != i || g.UUID != was.UUID || g.PCIBusID != was.PCIBusID {
			t.Errorf("GPU %d is %+v, want %s at %s", i, g, was.UUID, was.PCIBusID)
		}
	}
	// GPU 5 is index 4 now, with its GPU instance.
	gis, err := other.GPUInstances(4)
	if err != nil || len(gis) != 1 || gis[0].ID != gi.ID || gis[0].GPU != 4 {
		t.Errorf("GPU 5's instances at index 4: %+v, %v", gis, err)
	}
	if _, err := other.MigMode(7); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("index 7 of seven GPUs: %v, want ErrInvalidArgument", err)
	}
	if err := other.RestoreGPU(before[2].UUID); err != nil {
		t.Fatal(err)
	}
	back, err := s.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range back {
		if g.UUID != before[i].UUID || g.PCIBusID != before[i].PCIBusID || g.Minor != i {
			t.Errorf("restored: GPU %d is %+v, want %+v", i, g, before[i])
		}
	}
	if err := s.RestoreGPU(before[2].UUID); !errors.Is(err, nvml.ErrNotFound) {
		t.Errorf("restoring a GPU twice: %v, want ErrNotFound", err)
	}
	if err := s.RemoveGPU(8); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("removing GPU 8: %v, want ErrInvalidArgument", err)
	}
}
