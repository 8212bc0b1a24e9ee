package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle"
)

// timeSlicing is a GpuConfig asking for time-slice interval.
func timeSlicing(interval string) string {
	return `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig",` +
		`"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"` + interval + `"}}}`
}

// The state folder is wiped while claims are prepared (the runtime's
// checkpoint, elsewhere, keeps them; it writes their CDI specs again,
// which bind-mount the claims' devices files): Reconcile writes each held
// claim's devices file again from the checkpoint's record, as it was,
// and removes the files of claims the runtime does not hold (their
// checkpoint record was wiped: no unprepare ever comes for them). An
// admin-access claim's file says what was applied: admin access, no
// time-slice, whatever its configuration asks.
func TestDevicesFilesAfterStateFolderLoss(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	user := f.prepared(
		t,
		"user",
		alloc("gpu-1", timeSlicing("Long")),
		alloc("gpu-2-3g-71gb-4"),
		alloc("gpu-5-2g-35gb-2"),
	)
	adm := alloc("gpu-1", timeSlicing("Short"))
	adm.AdminAccess = true
	admin := f.prepared(t, "admin", adm)
	files := map[string]ClaimFile{}
	for _, h := range []kit.HeldClaim{user, admin} {
		c := claim(string(h.UID))
		devs := make([]kit.AllocatedDevice, len(h.Devices))
		for i, d := range h.Devices {
			devs[i] = d.AllocatedDevice
		}
		if _, err := f.d.ClaimEdits(ctx, c, devs); err != nil {
			t.Fatal(err)
		}
		cf, err := readClaimFile(f.d.claimFile(string(h.UID)))
		if err != nil {
			t.Fatal(err)
		}
		files[string(h.UID)] = cf
	}
	if got := files["admin"].Devices[0]; !got.AdminAccess || got.TimeSlice != "" {
		t.Errorf(
			"admin claim's devices file %+v: want adminAccess and no time-slice (none was set)",
			got,
		)
	}
	if got := files["user"].Devices[0]; got.AdminAccess || got.TimeSlice != "Long" {
		t.Errorf("user claim's devices file %+v: want its time-slice Long", got)
	}

	// The state folder is wiped; a file of a forgotten claim is there
	// (a wipe of the checkpoint, the other way round).
	_ = f.d.Close()
	state := filepath.Join(f.dir, "state")
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "claims"), 0o755); err != nil {
		t.Fatal(err)
	}
	ghost := filepath.Join(state, "claims", "forgotten.json")
	if err := os.WriteFile(ghost, []byte(`{"uid":"forgotten"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f.restart(t, f.sim, user, admin)
	for uid, want := range files {
		got, err := readClaimFile(f.d.claimFile(uid))
		if err != nil {
			t.Errorf("claim %s's devices file after the state folder was wiped: %v", uid, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("claim %s's devices file written again (-as prepared +now):\n%s", uid, diff)
		}
	}
	if _, err := os.Stat(ghost); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the devices file of a claim the runtime does not hold: %v, want it removed", err)
	}
	// The user's dynamic MIG device is still its own, and goes with it.
	if err := f.d.UnprepareClaim(ctx, user.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("GPU 5 after the user's release: %v", got)
	}
}

// The state folder is lost and the administrator empties the dynamic
// list in the same restart: the lifecycle's record of the driver's MIG
// device on GPU 5 is gone with the folder, but the runtime's checkpoint
// still says the driver made it for the claim. It stays the driver's: it
// is never published as an administrator's static device, and the
// claim's release destroys it; GPU 5 is then drained, the
// administrator's.
func TestStateFolderLostAndDynamicListEmptied(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	held := f.prepared(t, "mine", alloc("gpu-5-1g-18gb-0"))
	gpus, err := f.sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	_ = f.d.Close()
	if err := os.RemoveAll(filepath.Join(f.dir, "state")); err != nil {
		t.Fatal(err)
	}
	d, err := New(
		f.sim,
		"node-1",
		WithStateDir(filepath.Join(f.dir, "state")),
		WithRepublishDelay(0),
		WithDynamicGPUs(),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Reconcile(ctx, []kit.HeldClaim{held}); err != nil {
		t.Fatal(err)
	}
	inv, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names(inv), "gpu-5-1g-18gb-0") {
		t.Errorf("the driver's MIG device is published as an administrator's: %v", names(inv))
	}
	if got := d.lc.State(gpus[5].UUID); got != lifecycle.Draining {
		t.Errorf("GPU 5 with the driver's MIG device held: %q, want draining", got)
	}
	if got := instances(t, f.sim, 5); len(got) != 1 {
		t.Fatalf("the held claim's MIG device after the restart: %v", got)
	}
	if err := d.UnprepareClaim(ctx, held.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("the driver's MIG device after its claim's release: %v, want destroyed", got)
	}
	// Drained at the next start: the administrator's from then on.
	_ = d.Close()
	d2, err := New(f.sim, "node-1", WithStateDir(filepath.Join(f.dir, "state")), WithDynamicGPUs())
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d2.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := d2.lc.State(gpus[5].UUID); got != lifecycle.NotDynamic {
		t.Errorf("GPU 5 once drained: %q, want not dynamic", got)
	}
}
