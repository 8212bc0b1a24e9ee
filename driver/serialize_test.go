package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
)

// TestRollingUpdateCallWaitsForTheLock: with a rolling update, a prepare
// waits while the other instance holds the lock file in the lock folder
// (WithLockDir), and goes ahead once it is released.
func TestRollingUpdateCallWaitsForTheLock(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	lockDir := filepath.Join(d.Root, "locks") // created by the driver
	r := startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(1)}, hw, driver.WithRollingUpdate("pod-1"), driver.WithLockDir(lockDir))
	claim := createClaim(ctx, t, c, ns, "waits", drivertest.Device{Device: "dev-0"})
	k, err := drivertest.Dial(r.d.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	// The other instance holds the lock.
	lock, err := os.OpenFile(filepath.Join(lockDir, "serialize.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(lock.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := k.Prepare(ctx, claim)
		done <- err
	}()
	waitFor(ctx, t, "the prepare to wait for the lock", func(context.Context) (bool, error) {
		return flockWaiter(t, st.Ino), nil
	})
	select {
	case err := <-done:
		t.Fatalf("prepare returned while the other instance held the lock: %v", err)
	default:
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("prepare after the lock was released: %v", err)
	}
	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
}

// flockWaiter says whether /proc/locks lists a process blocked on a flock
// of the file with inode ino.
func flockWaiter(t *testing.T, ino uint64) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skipf("no /proc/locks: %v", err)
	}
	suffix := fmt.Sprintf(":%d", ino)
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		// "2: -> FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<ino> 0 EOF"
		if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], suffix) {
			return true
		}
	}
	return false
}
