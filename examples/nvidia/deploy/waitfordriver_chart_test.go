package deploy_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

// TestChartWaitsForDriver: by default the DaemonSet's pod first runs the
// driver's own image with `wait-for-driver` on the driver root, mounted
// as the driver's container mounts it (read-only, HostToContainer: the
// GPU Operator's driver appears under it later); waitForDriver.enabled=false
// and the simulator's values (no driver to wait for) render no init
// container; the timeout and log interval values reach its flags.
func TestChartWaitsForDriver(t *testing.T) {
	base := []string{"template", deploy.Release, "chart", "--namespace", deploy.Namespace}
	initOf := func(args ...string) []corev1.Container {
		t.Helper()
		r := render(t, append(slices.Clone(base), args...)...)
		if len(r.ds) != 1 {
			t.Fatalf("%d DaemonSets", len(r.ds))
		}
		return r.ds[0].Spec.Template.Spec.InitContainers
	}
	r := render(
		t,
		append(
			slices.Clone(base),
			"--set",
			"driverRoot=/run/nvidia/driver",
			"--set",
			"waitForDriver.timeout=10m",
		)...)
	spec := r.ds[0].Spec.Template.Spec
	if len(spec.InitContainers) != 1 {
		t.Fatalf("init containers %+v, want wait-for-driver", spec.InitContainers)
	}
	c, driver := spec.InitContainers[0], spec.Containers[0]
	if c.Image != driver.Image || c.ImagePullPolicy != driver.ImagePullPolicy {
		t.Errorf(
			"init container image %s (%s), want the driver's %s (%s)",
			c.Image,
			c.ImagePullPolicy,
			driver.Image,
			driver.ImagePullPolicy,
		)
	}
	if len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != drivercmd.WaitForDriverCommand {
		t.Errorf(
			"init container command %q args %q, want the image's entrypoint with %s",
			c.Command,
			c.Args,
			drivercmd.WaitForDriverCommand,
		)
	}
	for _, want := range []string{
		"--container-driver-root=/driver-root", "--log-every=30s", "--timeout=10m",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("init container args %q lack %s", c.Args, want)
		}
	}
	if hostPath(spec, "driver-root") != "/run/nvidia/driver" || len(c.VolumeMounts) != 1 ||
		c.VolumeMounts[0].Name != "driver-root" ||
		c.VolumeMounts[0].MountPath != "/driver-root" ||
		!c.VolumeMounts[0].ReadOnly ||
		c.VolumeMounts[0].MountPropagation == nil ||
		*c.VolumeMounts[0].MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf(
			"init container mounts %+v (driver root %s), want /run/nvidia/driver read-only at "+
				"/driver-root, HostToContainer",
			c.VolumeMounts,
			hostPath(spec, "driver-root"),
		)
	}
	if got := initOf("--set", "waitForDriver.enabled=false"); len(got) != 0 {
		t.Errorf("waitForDriver.enabled=false: init containers %+v", got)
	}
	var sim []string
	for _, v := range deploy.SimulatorValues() {
		sim = append(sim, "--set", v)
	}
	if got := initOf(sim...); len(got) != 0 {
		t.Errorf(
			"the simulator's values: init containers %+v, want none (no driver to wait for)",
			got,
		)
	}
	if strings.Contains(strings.Join(initOf()[0].Args, " "), "--timeout") {
		t.Errorf("default: %q, want no timeout", initOf()[0].Args)
	}
}
