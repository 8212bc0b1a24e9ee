package driver_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/cdi"
	. "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/internal/fakehw"
)

// editingHW is fake hardware whose claims need common container edits.
type editingHW struct {
	*fakehw.HW
	edits *cdi.Edits
	err   error
	calls int
}

func (h *editingHW) ClaimEdits(_ context.Context, _ Claim, devs []AllocatedDevice) (*cdi.Edits, error) {
	h.calls++
	return h.edits, h.err
}

// noEdits prepares devices without edits of their own.
type noEdits struct{ *editingHW }

func (h noEdits) PrepareDevice(ctx context.Context, c Claim, d AllocatedDevice) (PreparedDevice, error) {
	out, err := h.HW.PrepareDevice(ctx, c, d)
	out.Edits = nil
	return out, err
}

func TestClaimEdits(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// inject gives the env and mounts of a container that gets ids.
	inject := func(t *testing.T, e *env, ids ...string) (env []string, mounts []string) {
		t.Helper()
		spec := newOCISpec()
		if err := cdi.Inject(spec, []string{e.cdiDir}, ids...); err != nil {
			t.Fatalf("inject %v: %v", ids, err)
		}
		for _, m := range spec.Mounts {
			mounts = append(mounts, m.Destination)
		}
		for _, v := range spec.Process.Env {
			if !strings.HasPrefix(v, cdi.EmptyDeviceEnv) {
				env = append(env, v)
			}
		}
		slices.Sort(env)
		return env, mounts
	}
	claim := testClaim("c1", alloc{request: "a", device: "dev-0"}, alloc{request: "b", device: "dev-1"})

	t.Run("reach a container through any device", func(t *testing.T) {
		e := newEnv(t)
		hw := &editingHW{HW: e.hw, edits: (&cdi.Edits{}).Env("COMMON", "1").Mount("/opt/vendor/lib", "/usr/local/vendor/lib", "ro", "bind")}
		eng := e.engineWith(t, hw)
		r := eng.Prepare(ctx, claim)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		var all []string
		for _, d := range r.Devices {
			if len(d.CDIDeviceIDs) != 1 {
				t.Fatalf("device %s: CDI IDs %v, want one", d.DeviceName, d.CDIDeviceIDs)
			}
			all = append(all, d.CDIDeviceIDs...)
		}
		gotEnv, gotMounts := inject(t, e, all...)
		// Both devices set FAKE_DEVICE: the runtime keeps the last.
		if diff := cmp.Diff([]string{"COMMON=1", "FAKE_DEVICE=dev-1"}, gotEnv); diff != "" {
			t.Errorf("container with both devices: env (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"/usr/local/vendor/lib"}, gotMounts); diff != "" {
			t.Errorf("container with both devices: mounts (-want +got):\n%s", diff)
		}
		gotEnv, _ = inject(t, e, r.Devices[1].CDIDeviceIDs...)
		if diff := cmp.Diff([]string{"COMMON=1", "FAKE_DEVICE=dev-1"}, gotEnv); diff != "" {
			t.Errorf("container with one device: env (-want +got):\n%s", diff)
		}
		// A repeated prepare returns the recorded answer without asking.
		if again := eng.Prepare(ctx, claim); again.Err != nil || hw.calls != 1 {
			t.Errorf("repeated prepare: %v, ClaimEdits called %d times, want 1", again.Err, hw.calls)
		}
	})

	t.Run("devices without edits of their own", func(t *testing.T) {
		e := newEnv(t)
		hw := &editingHW{HW: e.hw, edits: (&cdi.Edits{}).Env("COMMON", "1")}
		eng := e.engineWith(t, noEdits{hw})
		r := eng.Prepare(ctx, claim)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, d := range r.Devices {
			if len(d.CDIDeviceIDs) != 1 {
				t.Fatalf("device %s: CDI IDs %v, want one carrying the common edits", d.DeviceName, d.CDIDeviceIDs)
			}
			if gotEnv, _ := inject(t, e, d.CDIDeviceIDs...); !cmp.Equal(gotEnv, []string{"COMMON=1"}) {
				t.Errorf("device %s: env %v, want [COMMON=1]", d.DeviceName, gotEnv)
			}
		}
	})

	t.Run("no common edits", func(t *testing.T) {
		e := newEnv(t)
		eng := e.engineWith(t, noEdits{&editingHW{HW: e.hw, edits: &cdi.Edits{}}})
		r := eng.Prepare(ctx, claim)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, d := range r.Devices {
			if len(d.CDIDeviceIDs) != 0 {
				t.Errorf("device %s: CDI IDs %v, want none", d.DeviceName, d.CDIDeviceIDs)
			}
		}
		if files := e.specFiles(t); len(files) != 0 {
			t.Errorf("CDI specs written: %v", files)
		}
	})

	t.Run("error undoes the claim", func(t *testing.T) {
		e := newEnv(t)
		hw := &editingHW{HW: e.hw, err: errors.New("driver libraries not found")}
		eng := e.engineWith(t, hw)
		r := eng.Prepare(ctx, claim)
		if r.Err == nil || !strings.Contains(r.Err.Error(), "driver libraries not found") {
			t.Fatalf("prepare error = %v, want the ClaimEdits error", r.Err)
		}
		holders, _ := e.hw.Holders()
		for dev, uids := range holders {
			if len(uids) > 0 {
				t.Errorf("device %s still configured for %v", dev, uids)
			}
		}
		if files := e.specFiles(t); len(files) != 0 {
			t.Errorf("CDI specs left: %v", files)
		}
		if got := eng.ErrorCount("prepare", ReasonVendor); got != 1 {
			t.Errorf("errors_total{prepare,%s} = %v, want 1", ReasonVendor, got)
		}
	})
}
