package driver

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// Dynamic GPUs named by NVML index, as values.yaml used to recommend
// ("4,5,6,7"), when GPU 2 falls off the bus and the node reboots: NVML
// enumerates seven GPUs and every later index moves down. The GPUs each
// index named at the first start stay the dynamic ones, by UUID; an
// index that names another GPU now is refused for that GPU alone, with
// a Warning, and the driver starts and serves every GPU: with "4,5,6,7"
// (index 7 is gone) the claim's MIG device on the old GPU 5 is kept, and
// with "4,5,6" the administrator's MIG device on the old GPU 7 (index 6
// now) is never touched.
func TestDynamicGPUIndexesWhenAGPUIsGone(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		indexes []string
		// moved are the selectors whose index names another GPU now,
		// with the GPU each warning is for (index: UUID of the GPU
		// before the shift).
		moved map[string]int
	}{
		{"4,5,6,7", []string{"4", "5", "6", "7"}, map[string]int{"4": 5, "5": 6, "6": 7, "7": 7}},
		{"4,5,6", []string{"4", "5", "6"}, map[string]int{"4": 5, "5": 6, "6": 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			_ = f.d.Close()
			gpus, err := f.sim.GPUs()
			if err != nil {
				t.Fatal(err)
			}
			// The administrator's MIG device on GPU 7 where 7 is not
			// dynamic.
			var admin string
			if !slices.Contains(tc.indexes, "7") {
				gi, err := f.sim.CreateGPUInstance(7, 9, mig.Placement{Start: 4, Size: 4})
				if err != nil {
					t.Fatal(err)
				}
				ci, err := f.sim.CreateComputeInstance(7, gi.ID, 2)
				if err != nil {
					t.Fatal(err)
				}
				admin = ci.UUID
			}
			state := filepath.Join(f.dir, "indexes")
			open := func() *Driver {
				t.Helper()
				d, err := New(f.sim, "node-1", WithStateDir(state), WithDynamicGPUs(tc.indexes...))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = d.Close() })
				return d
			}
			first := open()
			if w := first.Warnings(); len(w) != 0 {
				t.Errorf("first start: warnings %+v", w)
			}
			if err := first.Reconcile(ctx, nil); err != nil {
				t.Fatal(err)
			}
			f.d = first
			held := f.prepared(t, "on-gpu-5", alloc("gpu-5-1g-18gb-2"))
			_ = first.Close()

			if err := f.sim.RemoveGPU(2); err != nil {
				t.Fatal(err)
			}
			var reported []Warning
			d, err := New(
				f.sim,
				"node-1",
				WithStateDir(state),
				WithDynamicGPUs(tc.indexes...),
				WithWarnings(func(w Warning) { reported = append(reported, w) }),
			)
			if err != nil {
				t.Fatalf("restart without GPU 2: %v", err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if err := d.Reconcile(ctx, []kit.HeldClaim{held}); err != nil {
				t.Fatal(err)
			}
			// The dynamic GPUs are the same GPUs as before.
			for i, g := range gpus {
				want := lifecycle.NotDynamic
				if slices.Contains(tc.indexes, strconv.Itoa(i)) {
					want = lifecycle.Dynamic
				}
				if got := d.lc.State(g.UUID); got != want {
					t.Errorf("GPU %s (index %d before): %q, want %q", g.UUID, i, got, want)
				}
			}
			// A warning per index that moved, for the GPU at the index
			// now (or the recorded one where the index is gone).
			if !slices.Equal(reported, d.Warnings()) || len(reported) != len(tc.moved) {
				t.Errorf(
					"warnings %+v (reported %+v), want one per moved index %v",
					d.Warnings(),
					reported,
					tc.moved,
				)
			}
			for _, w := range reported {
				s := strings.SplitN(w.Message, `"`, 3)[1]
				if w.Reason != ReasonDynamicGPUMoved || w.GPU != gpus[tc.moved[s]].UUID ||
					!strings.Contains(w.Message, "by UUID or PCI bus ID") {
					t.Errorf(
						"warning for %q: %+v, want %s for GPU %s",
						s,
						w,
						ReasonDynamicGPUMoved,
						gpus[tc.moved[s]].UUID,
					)
				}
			}
			// The claim's MIG device on the old GPU 5 (index 4 now) is
			// kept; the administrator's GPU 3 (index 2 now) and, with
			// "4,5,6", GPU 7 (index 6 now) keep their MIG devices.
			if got := instances(t, f.sim, 4); len(got) != 1 {
				t.Errorf("the claim's MIG device on the old GPU 5: %v", got)
			}
			if got := instances(t, f.sim, 2); len(got) != 3 {
				t.Errorf("the administrator's MIG devices on the old GPU 3: %v", got)
			}
			if admin != "" {
				gis, err := f.sim.GPUInstances(6)
				if err != nil || len(gis) != 1 || gis[0].ComputeInstances[0].UUID != admin {
					t.Errorf(
						"the administrator's MIG device %s on the old GPU 7 (index 6): %+v, %v",
						admin,
						gis,
						err,
					)
				}
			}
			inv, err := d.Inventory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := inv.Validate(); err != nil {
				t.Fatal(err)
			}
			if admin != "" && !slices.Contains(names(inv), "gpu-6-3g-71gb-4") {
				t.Errorf(
					"the administrator's MIG device is not published static at index 6: %v",
					names(inv),
				)
			}
			if err := d.UnprepareClaim(ctx, held.ClaimRef, nil); err != nil {
				t.Fatal(err)
			}
			if got := instances(t, f.sim, 4); len(got) != 0 {
				t.Errorf("the claim's MIG device on the old GPU 5 after its release: %v", got)
			}
		})
	}
}

// A GPU named by UUID or PCI bus ID is the same GPU whatever its index;
// one that is not on the node is a warning for it and the others are
// served; a selector that names no GPU in any form is an error.
func TestDynamicGPUSelectors(t *testing.T) {
	f := newFixture(t)
	_ = f.d.Close()
	gpus, err := f.sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.sim.RemoveGPU(0); err != nil {
		t.Fatal(err)
	}
	bus := strings.ToUpper("0000" + gpus[5].PCIBusID) // NVML's own form: 00000000:XX:00.0
	d, err := New(
		f.sim,
		"node-1",
		WithStateDir(t.TempDir()),
		WithDynamicGPUs(gpus[4].UUID, bus, gpus[0].UUID, "0000:ff:00.0"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := map[int]lifecycle.CardState{
		0: lifecycle.Dynamic, 4: lifecycle.Dynamic, 5: lifecycle.Dynamic, 6: lifecycle.NotDynamic,
	}
	for i, want := range want {
		if got := d.lc.State(gpus[i].UUID); got != want {
			t.Errorf("GPU %d: %q, want %q", i, got, want)
		}
	}
	w := d.Warnings()
	if len(w) != 2 || w[0].Reason != ReasonDynamicGPUMissing || w[0].GPU != gpus[0].UUID ||
		w[1].Reason != ReasonDynamicGPUMissing ||
		!strings.Contains(w[1].Message, "0000:ff:00.0") {
		t.Errorf("warnings %+v, want GPU 0 and 0000:ff:00.0 missing", w)
	}
	for _, bad := range []string{"gpu4", "-1", "0000:zz:00.0", "1:2:3:4"} {
		_, err := New(f.sim, "node-1", WithStateDir(t.TempDir()), WithDynamicGPUs(bad))
		if err == nil ||
			!strings.Contains(err.Error(), bad) {
			t.Errorf("selector %q: %v, want an error naming it", bad, err)
		}
	}
}
