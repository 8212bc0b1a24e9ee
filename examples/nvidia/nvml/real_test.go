//go:build cgo

package nvml

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRealBackendReadOnly runs on a machine with an NVIDIA driver and is
// skipped elsewhere. It only reads (discovery, MIG mode, profiles,
// placements, instances, a short health watch): it never changes MIG mode,
// creates or destroys an instance, or resets a GPU. On a MIG-capable GPU
// it checks NVML's profiles against the mig catalog and logs the
// differences (a difference is a finding for the catalog, not a failure
// of this package).
func TestRealBackendReadOnly(t *testing.T) {
	r, err := OpenReal()
	if errors.Is(err, ErrLibraryNotFound) {
		t.Skipf("no NVIDIA driver here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sys, err := r.System()
	if err != nil || sys.DriverVersion == "" ||
		!regexp.MustCompile(`^\d+\.\d$`).MatchString(sys.CUDAVersion) {
		t.Fatalf("system: %+v, %v", sys, err)
	}
	t.Logf("driver %s, CUDA %s", sys.DriverVersion, sys.CUDAVersion)
	gpus, err := r.GPUs()
	if err != nil || len(gpus) == 0 {
		t.Fatalf("GPUs: %v, %v", gpus, err)
	}
	busID := regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	for _, g := range gpus {
		t.Logf("GPU %+v", g)
		if !strings.HasPrefix(g.UUID, "GPU-") || !busID.MatchString(g.PCIBusID) ||
			g.MemoryMiB <= 0 ||
			g.ProductName == "" {
			t.Errorf("GPU %d: malformed %+v", g.Index, g)
		}
		mode, err := r.MigMode(g.Index)
		if errors.Is(err, ErrNotSupported) {
			t.Logf("GPU %d: no MIG", g.Index)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("GPU %d: MIG mode %+v", g.Index, mode)
		profs, err := r.GPUInstanceProfiles(g.Index)
		if err != nil {
			t.Errorf("GPU %d: profiles: %v", g.Index, err)
			continue
		}
		for _, p := range profs {
			t.Logf("GPU %d: profile %+v", g.Index, p)
			if len(p.Placements) == 0 {
				t.Errorf("GPU %d: profile %d (%s) has no placements", g.Index, p.ID, p.Name)
			}
		}
		diffs, err := CatalogDiff(g.ProductName, profs)
		t.Logf("GPU %d: differences from the mig catalog: %q (%v)", g.Index, diffs, err)
		gis, err := r.GPUInstances(g.Index)
		if err != nil {
			t.Errorf("GPU %d: instances: %v", g.Index, err)
		}
		for _, gi := range gis {
			t.Logf("GPU %d: instance %+v", g.Index, gi)
			for _, ci := range gi.ComputeInstances {
				if !strings.HasPrefix(ci.UUID, "MIG-") {
					t.Errorf("GPU %d GI %d CI %d: MIG UUID %q", g.Index, gi.ID, ci.ID, ci.UUID)
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	events, err := r.WatchHealth(ctx)
	if err != nil {
		t.Fatalf("watch health: %v", err)
	}
	for e := range events {
		t.Logf("health event: %s", e)
	}
}
