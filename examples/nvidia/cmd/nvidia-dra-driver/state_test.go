package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/driver/drivertest"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/testenv"
)

// These subtests of TestDriver play the kubelet themselves over the
// driver's DRA socket (drivertest), with claims allocated by hand on a
// dynamic GPU, so that they take seconds, not the kubelet's retry
// back-off.

// dynamicClaim creates a claim allocated to dev, a device of dynamic GPU
// 5 (a pool of its own), with admin access when admin is set.
func dynamicClaim(
	ctx context.Context,
	t *testing.T,
	env *testenv.Env,
	name, dev string,
	admin bool,
) *resourceapi.ResourceClaim {
	t.Helper()
	ref, err := mig.ParseDeviceName(dev)
	if err != nil {
		t.Fatal(err)
	}
	c, err := drivertest.CreateAllocatedClaim(ctx, env.Client, drivertest.ClaimSpec{
		Namespace: "default", Name: name, Driver: nvdriver.DriverName,
		Devices: []drivertest.Device{
			{Pool: mig.GPUPoolName(env.NodeName, ref.GPU), Device: dev, AdminAccess: admin},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.ResourceV1().
			ResourceClaims("default").
			Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return c
}

// prepare prepares claims as the kubelet does, retrying while the driver
// that just started has not published the devices yet (the kubelet
// retries too).
func prepare(
	ctx context.Context,
	kl *drivertest.Kubelet,
	claims ...*resourceapi.ResourceClaim,
) error {
	var err error
	for range 150 {
		if _, err = kl.Prepare(ctx, claims...); err == nil ||
			!strings.Contains(err.Error(), "is not published") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}

func dialDriver(t *testing.T, env *testenv.Env) *drivertest.Kubelet {
	t.Helper()
	kl, err := drivertest.Dial(filepath.Join(env.PluginDataDir(nvdriver.DriverName), "dra.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kl.Close() })
	return kl
}

// gpu5 lists GPU 5's MIG devices by UUID.
func gpu5(t *testing.T, sim *nvmlsim.Sim) []string {
	t.Helper()
	gis, err := sim.GPUInstances(5)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, gi := range gis {
		for _, ci := range gi.ComputeInstances {
			out = append(out, ci.UUID)
		}
	}
	return out
}

// adminAccessAcrossKill (issue 25, item 3): a claim with admin access
// on a dynamic MIG device that a user's claim holds changes nothing, not
// at prepare, not across a kill -9 and restart of the driver (whose
// reconcile sees both claims), not at its unprepare; the user's unprepare
// destroys the device. An admin claim on a device no one made creates
// nothing.
func adminAccessAcrossKill(
	ctx context.Context,
	t *testing.T,
	env *testenv.Env,
	state string,
	sim *nvmlsim.Sim,
) {
	const dev = "gpu-5-1g-18gb-0"
	drv := startDriver(ctx, t, env, state)
	// Admin access is for namespaces an administrator labelled so.
	ns, err := env.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["resource.kubernetes.io/admin-access"] = "true"
	if _, err := env.Client.CoreV1().Namespaces().Update(
		ctx, ns, metav1.UpdateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	user := dynamicClaim(ctx, t, env, "aa-user", dev, false)
	admin := dynamicClaim(ctx, t, env, "aa-admin", dev, true)
	idle := dynamicClaim(ctx, t, env, "aa-idle", "gpu-5-3g-71gb-4", true)
	kl := dialDriver(t, env)
	if err := prepare(ctx, kl, user); err != nil {
		t.Fatal(err)
	}
	made := gpu5(t, sim)
	if len(made) != 1 {
		t.Fatalf("GPU 5 after the user's prepare: %v, want one MIG device", made)
	}
	if err := prepare(ctx, kl, admin); err != nil {
		t.Fatal(err)
	}
	// Admin access never makes a MIG device: one no claim holds is
	// refused, and nothing is created.
	if err := prepare(ctx, kl, idle); err == nil ||
		!strings.Contains(err.Error(), "does not exist") {
		t.Errorf(
			"admin-access prepare of a MIG device no one made: %v, want refused as not existing",
			err,
		)
	}
	if got := gpu5(t, sim); strings.Join(got, " ") != made[0] {
		t.Fatalf("GPU 5 after the admin claims' prepare: %v, want only the user's %s", got, made[0])
	}
	drv.kill()
	drv = startDriver(ctx, t, env, state)
	if got := gpu5(t, sim); strings.Join(got, " ") != made[0] {
		t.Fatalf(
			"GPU 5 after kill -9 and restart with the admin claims held: %v, want only the "+
				"user's %s",
			got,
			made[0],
		)
	}
	kl = dialDriver(t, env)
	if err := kl.Unprepare(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if got := gpu5(t, sim); strings.Join(got, " ") != made[0] {
		t.Fatalf(
			"GPU 5 after the admin claims' unprepare: %v, want the user's %s kept",
			got,
			made[0],
		)
	}
	if err := kl.Unprepare(ctx, user); err != nil {
		t.Fatal(err)
	}
	if got := gpu5(t, sim); len(got) != 0 {
		t.Errorf("GPU 5 after the user's unprepare: %v, want its device destroyed", got)
	}
}

// brokenStateFolder (issue 25, item 7): the driver's state folder on a
// small tmpfs, made read-only, then full (ENOSPC). A prepare of a
// dynamic MIG claim fails with an error that says so, the runtime keeps
// no record of the claim and no MIG device is left; once the folder is
// writable and has room, the same claim prepares, and its unprepare
// destroys its device.
func brokenStateFolder(
	ctx context.Context,
	t *testing.T,
	env *testenv.Env,
	state string,
	sim *nvmlsim.Sim,
) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs as the state folder")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	remount := func(flags uintptr) {
		t.Helper()
		if err := syscall.Mount(
			"tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|flags, "size=1m",
		); err != nil {
			t.Fatal(err)
		}
	}
	startDriver(ctx, t, env, state, "-state-dir="+dir)
	kl := dialDriver(t, env)
	c := dynamicClaim(ctx, t, env, "broken-state", "gpu-5-1g-18gb-0", false)
	checkpoint := filepath.Join(env.PluginDataDir(nvdriver.DriverName), "checkpoint")
	released := func(what string) {
		t.Helper()
		if got := gpu5(t, sim); len(got) != 0 {
			t.Errorf("%s: GPU 5 has %v, want no MIG device left", what, got)
		}
		recs, _ := filepath.Glob(filepath.Join(checkpoint, string(c.UID)+"*"))
		if len(recs) != 0 {
			t.Errorf("%s: the runtime still holds the claim: %v", what, recs)
		}
	}

	if err := prepare(ctx, kl, c); err != nil { // published, and the folder works
		t.Fatal(err)
	}
	if err := kl.Unprepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	remount(syscall.MS_RDONLY)
	_, err := kl.Prepare(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("prepare on a read-only state folder: %v, want the read-only error", err)
	}
	released("read-only")

	remount(0)
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break // ENOSPC
		}
	}
	_ = f.Close()
	_, err = kl.Prepare(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("prepare on a full state folder: %v, want the ENOSPC error", err)
	}
	released("full")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := prepare(ctx, kl, c); err != nil {
		t.Fatalf("prepare once the folder is writable with room: %v", err)
	}
	if got := gpu5(t, sim); len(got) != 1 {
		t.Errorf("GPU 5 after the prepare: %v, want the claim's device", got)
	}
	if err := kl.Unprepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := gpu5(t, sim); len(got) != 0 {
		t.Errorf("GPU 5 after the unprepare: %v", got)
	}
}
