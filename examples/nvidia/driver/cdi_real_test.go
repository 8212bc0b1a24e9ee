package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/cdi"
	kit "github.com/drakit/drakit/driver"
)

// With the GPU Operator's driver root (/run/nvidia/driver on the node,
// /driver-root in the driver's container), the device nodes a container
// gets are the host's under the root, and the MIG capability minors are
// the kernel's (this process's /proc), not read under the root.
func TestDriverRootEdits(t *testing.T) {
	ctx := context.Background()
	proc := fakeHostProc(t)
	mounted := t.TempDir() // where this process sees the node's driver root
	if err := os.Mkdir(filepath.Join(mounted, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFixture(
		t,
		WithSimulatedContainers(false),
		WithDriverRoot(DriverRoot{Host: "/run/nvidia/driver", Container: mounted}),
	)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	writeMIGCaps(t, f, proc, 2, "gpu-2-3g-71gb-4", 31, 32)
	all := claimSpecs(
		t,
		f,
		claim("r1"),
		[]kit.AllocatedDevice{alloc("gpu-2-3g-71gb-4"), alloc("gpu-1")},
	)
	for _, n := range []string{
		"/dev/nvidia2",
		"/dev/nvidia-caps/nvidia-cap31",
		"/dev/nvidia-caps/nvidia-cap32",
		"/dev/nvidia1",
		"/dev/nvidiactl",
		"/dev/nvidia-uvm",
		"/dev/nvidia-uvm-tools",
	} {
		if want := fmt.Sprintf(
			`"path":%q,"hostPath":"/run/nvidia/driver%s"`, n, n,
		); !strings.Contains(
			all,
			want,
		) {
			t.Errorf("edits lack %s: %s", want, all)
		}
	}
	if _, err := New(
		f.sim, "node-1", WithStateDir(t.TempDir()), WithDriverRoot(DriverRoot{Host: "run/nvidia"}),
	); err == nil {
		t.Error("a relative driver root was accepted")
	}
}

// A driver root without dev and proc folders (GKE's
// /home/kubernetes/bin/nvidia: libraries and binaries only) has its
// device nodes under "/", as in NVIDIA's driver, and serves MIG devices,
// static and dynamic: their capability nodes come from the kernel's view
// in this process's /proc, whatever the driver root, with the mode the
// kernel module gives them.
func TestDriverRootWithoutDevOrProc(t *testing.T) {
	ctx := context.Background()
	proc := fakeHostProc(t)
	root := t.TempDir() // lib64 and bin only: no proc, no dev
	for _, d := range []string{"lib64", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := newFixture(
		t,
		WithSimulatedContainers(false),
		WithDriverRoot(DriverRoot{Host: "/home/kubernetes/bin/nvidia", Container: root}),
	)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	writeMIGCaps(t, f, proc, 2, "gpu-2-3g-71gb-4", 21, 22)
	c, devs := claim(
		"gke",
	), []kit.AllocatedDevice{
		alloc("gpu-2-3g-71gb-4"),
		alloc("gpu-6-1g-18gb-3"),
	}
	if err := f.d.PrepareClaim(ctx, c, devs); err != nil {
		t.Fatal(err)
	}
	gis, err := f.sim.GPUInstances(6)
	if err != nil || len(gis) != 1 {
		t.Fatalf("GPU 6 instances %+v, %v: want the claim's", gis, err)
	}
	writeMIGCapsAt(t, proc, 6, gis[0].ID, gis[0].ComputeInstances[0].ID, 31, 32)
	all := claimSpecs(t, f, c, devs)
	for _, want := range []string{
		// The device nodes are the host's /dev: the driver root has none.
		`"path":"/dev/nvidia2","type":`,
		`"path":"/dev/nvidia-caps/nvidia-cap21","type":"c","major":236,"minor":21,"fileMode":292`,
		`"path":"/dev/nvidia-caps/nvidia-cap22","type":"c","major":236,"minor":22,"fileMode":292`,
		`"path":"/dev/nvidia-caps/nvidia-cap31","type":"c","major":236,"minor":31,"fileMode":292`,
	} {
		if !strings.Contains(all, want) &&
			!strings.Contains(all, strings.TrimSuffix(want, `,"type":`)) {
			t.Errorf("edits lack %s: %s", want, all)
		}
	}
	if strings.Contains(all, "/home/kubernetes/bin/nvidia/dev") {
		t.Errorf("device nodes named under a driver root without dev: %s", all)
	}
}

// recordingEditor is a ContainerEditor that records what it was asked.
type recordingEditor struct{ devs []ContainerDevice }

func (r *recordingEditor) DeviceEdits(dev ContainerDevice) (*cdi.Edits, error) {
	r.devs = append(r.devs, dev)
	return (&cdi.Edits{}).DeviceNode(cdi.DeviceNode{Path: "/dev/from-editor-" + dev.UUID}), nil
}

func (r *recordingEditor) CommonEdits() (*cdi.Edits, error) {
	return (&cdi.Edits{}).Mount("/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so.1", "ro", "bind"), nil
}

// WithContainerEditor's editor gives a real GPU's container edits: it
// gets each device's UUID, minor and MIG instance, and its common edits
// come once per claim.
func TestContainerEditor(t *testing.T) {
	ctx := context.Background()
	rec := &recordingEditor{}
	f := newFixture(t, WithSimulatedContainers(false), WithContainerEditor(rec))
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	all := claimSpecs(
		t,
		f,
		claim("r1"),
		[]kit.AllocatedDevice{alloc("gpu-2-3g-71gb-4"), alloc("gpu-1")},
	)
	mig, _ := f.d.deviceInfo("gpu-2-3g-71gb-4")
	if len(rec.devs) != 2 || !rec.devs[0].MIG || rec.devs[0].Minor != f.d.gpus[2].Minor ||
		rec.devs[0].GI != mig.gi || rec.devs[0].CI != mig.ci ||
		!strings.HasPrefix(rec.devs[0].UUID, "MIG-") ||
		rec.devs[1].MIG ||
		rec.devs[1].UUID != f.d.gpus[1].UUID {
		b, _ := json.Marshal(rec.devs)
		t.Errorf("the editor was asked for %s", b)
	}
	if strings.Count(all, "libcuda.so.1") != 2 || strings.Contains(all, `"/dev/nvidiactl"`) ||
		!strings.Contains(all, "/dev/from-editor-"+rec.devs[1].UUID) {
		t.Errorf("edits: %s", all)
	}
}
