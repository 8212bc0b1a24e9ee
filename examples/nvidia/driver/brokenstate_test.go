package driver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// roStateDir is a state folder on a tmpfs that remount makes read-only;
// it skips the test where mounting is not permitted.
func roStateDir(t *testing.T) (dir string, remount func(mode string)) {
	t.Helper()
	dir = t.TempDir()
	if out, err := exec.Command(
		"mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", dir,
	).CombinedOutput(); err != nil {
		t.Skipf("needs to mount a tmpfs (root with CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir, func(mode string) {
		t.Helper()
		if out, err := exec.Command(
			"mount", "-o", "remount,"+mode, dir,
		).CombinedOutput(); err != nil {
			t.Fatalf("remount %s %s: %v: %s", dir, mode, err, out)
		}
	}
}

// Item 7: a read-only state folder. A prepare fails with EROFS, its
// rollback (what the runtime runs) succeeds, so the runtime releases the
// reservation; nothing is made; a restart on the read-only folder is not
// fatal; once writable again, prepares work.
func TestReadOnlyStateDir(t *testing.T) {
	ctx := context.Background()
	state, remount := roStateDir(t)
	sim, err := nvmlsim.Open(
		filepath.Join(t.TempDir(), "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(testSetup),
		nvmlsim.WithPollInterval(5*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	dynamic := (&fixture{sim: sim}).dynamicGPUs(t)
	open := func() *Driver {
		t.Helper()
		d, err := New(sim, "node-1", WithStateDir(state), WithRepublishDelay(0), dynamic)
		if err != nil {
			t.Fatalf("start on the state folder: %v", err)
		}
		t.Cleanup(func() { _ = d.Close() }) // its lock keeps the folder busy
		if _, err := d.Inventory(ctx); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := open()
	remount("ro")
	// rollback is what the runtime does after a failed prepare.
	rollback := func(c kit.Claim, devs []kit.AllocatedDevice) {
		t.Helper()
		for _, dev := range devs {
			if err := d.UnprepareDevice(ctx, c.ClaimRef, dev, nil); err != nil {
				t.Errorf("rollback of %s: %v", dev.Device, err)
			}
		}
		if err := d.UnprepareClaim(ctx, c.ClaimRef, devs); err != nil {
			t.Errorf("rollback of claim %s: %v, want success (nothing was written)", c.UID, err)
		}
	}

	full := []kit.AllocatedDevice{alloc("gpu-0")}
	if err := d.PrepareClaim(ctx, claim("full"), full); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ClaimEdits(ctx, claim("full"), full); !errors.Is(err, syscall.EROFS) {
		t.Errorf("claim edits on a read-only state folder: %v, want EROFS", err)
	}
	rollback(claim("full"), full)

	migDev := []kit.AllocatedDevice{alloc("gpu-4-1g-18gb-0")}
	if err := d.PrepareClaim(ctx, claim("mig"), migDev); !errors.Is(err, syscall.EROFS) {
		t.Errorf("MIG prepare on a read-only state folder: %v, want EROFS", err)
	}
	rollback(claim("mig"), migDev)
	if got := instances(t, sim, 4); len(got) != 0 {
		t.Errorf("GPU 4 after a MIG prepare on a read-only folder: %v, want nothing made", got)
	}

	d = open() // a restart is not fatal
	remount("rw")
	if err := d.PrepareClaim(ctx, claim("mig"), migDev); err != nil {
		t.Fatalf("MIG prepare once writable: %v", err)
	}
	if got := instances(t, sim, 4); len(got) != 1 {
		t.Errorf("GPU 4 after the prepare: %v, want the device", got)
	}
}

// Item 7: a corrupt journal is moved aside and rebuilt (no crash loop
// that invites deleting it), and a corrupt simulator state says what it
// is, where, and what to do.
func TestCorruptState(t *testing.T) {
	f := newFixture(t)
	held := f.prepared(t, "c1", alloc("gpu-4-1g-18gb-0"))
	journal := filepath.Join(f.dir, "state", "intents.json")
	if err := os.WriteFile(journal, []byte(`{"intents":[{"gpu":4,"prof`), 0o600); err != nil {
		t.Fatal(err)
	}
	f.restart(t, f.sim, held)
	if _, err := os.Stat(journal + ".corrupt"); err != nil {
		t.Errorf("corrupt journal not kept aside: %v", err)
	}
	if err := f.d.UnprepareClaim(context.Background(), held.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 4); len(got) != 0 {
		t.Errorf("GPU 4 after unprepare with a rebuilt journal: %v, want destroyed", got)
	}

	if err := os.WriteFile(f.state, []byte(`{"server":"dgx-h2`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := nvmlsim.Open(f.state)
	if !errors.Is(err, nvmlsim.ErrCorruptState) || !strings.Contains(err.Error(), f.state) ||
		!strings.Contains(err.Error(), "delete it") {
		t.Errorf(
			"opening a corrupt simulator state: %v, want ErrCorruptState naming the file and "+
				"what to do",
			err,
		)
	}
	if _, err := f.sim.GPUs(); !errors.Is(err, nvmlsim.ErrCorruptState) {
		t.Errorf("reading a corrupt simulator state: %v, want ErrCorruptState", err)
	}
}
