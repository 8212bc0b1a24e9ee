package cuda

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/examples/nvidia/gpucheck"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// TestContainerFromDriverSpec is the container half of gpu-check.sh
// without a GPU. On a fake 580-series driver root whose libcuda is the
// stand-in (gpucheck.BuildStandInCUDA) and go-nvml's mock of two H200s
// (GPU 0 full, GPU 1 with a 1g.18gb MIG device), the image's own driver
// code (drivercmd.Run -check -check-cdi-dir, with this package's nvcdi
// editor and the image's nvidia-cdi-hook) writes the CDI spec of a claim
// on each; runc makes the container from the driver's image with the
// spec's edits applied by the CDI library, and cuda-probe runs in it.
// What it prints must show every kind of edit: one device, named after
// the device node of the claimed GPU (and the MIG device's capability
// nodes), libcuda.so.1 loaded from the mounted driver library (linked by
// the hooks), the variables the spec sets. Without the spec's libcuda
// mount the probe's dlopen fails. It needs root, runc
// (cmd/drakit/setup/setup.sh installs it) and a C compiler.
func TestContainerFromDriverSpec(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver's image")
	}
	if os.Geteuid() != 0 {
		t.Skip("runc and device nodes need root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("no runc on this machine (cmd/drakit/setup/setup.sh installs it): " + err.Error())
	}
	if !inPrivateProcDriver(t, "TestContainerFromDriverSpec") {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()

	// The fake driver root, with the stand-in libcuda as the versioned
	// library its libcuda.so.1 links to.
	droot := fakeDriverRoot(t, true)
	if err := gpucheck.BuildStandInCUDA(
		ctx, filepath.Join(droot, "usr/lib/x86_64-linux-gnu/libcuda.so."+driverVersion),
	); err != nil {
		t.Skipf("no C compiler for the stand-in libcuda: %v", err)
	}
	probe := filepath.Join(tmp, "cuda-probe")
	if err := gpucheck.BuildProbe(ctx, probe); err != nil {
		t.Fatal(err)
	}
	sim, nv := simWithMock(t, droot)

	// The driver's image, unpacked, and its nvidia-cdi-hook on the
	// "host", as the chart installs it.
	tarball := os.Getenv(imageEnv)
	if tarball == "" {
		tarball = filepath.Join(tmp, "image.tar")
		if _, err := deploy.BuildImage(
			ctx, deploy.DriverPackage, deploy.Image, tarball,
		); err != nil {
			t.Fatal(err)
		}
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := ociimage.Unpack(tarball, rootfs); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(tmp, "toolkit/nvidia-cdi-hook")
	if err := os.MkdirAll(filepath.Dir(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := InstallHook(filepath.Join(rootfs, deploy.ImageHookPath), hook); err != nil {
		t.Fatal(err)
	}

	// The driver's -check writes the claims' specs.
	check := filepath.Join(tmp, "check")
	var out bytes.Buffer
	err := drivercmd.Run(
		[]string{
			"-check",
			"-node-name=node-1",
			"-state-dir=" + filepath.Join(tmp, "state"),
			"-driver-root=" + droot,
			"-check-cdi-dir=" + check,
		},
		drivercmd.WithOutput(&out),
		drivercmd.WithBackend(sim),
		drivercmd.WithContainerEditor(
			func(_ nvml.Interface, root nvdriver.DriverRoot) (nvdriver.ContainerEditor, error) {
				return New(nv, root, WithHookPath(hook))
			},
		),
	)
	if err != nil {
		t.Fatalf("nvidia-dra-driver -check: %v\n%s", err, out.String())
	}
	ids := checkDevices(t, check)
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	gis, err := sim.GPUInstances(1)
	if err != nil || len(gis) != 1 || len(gis[0].ComputeInstances) != 1 {
		t.Fatalf("the simulator's MIG devices on GPU 1: %+v (%v)", gis, err)
	}

	for _, tc := range []struct {
		gpu, name, uuid, envSuffix string
	}{
		{"0", "drakit stand-in GPU /dev/nvidia0", gpus[0].UUID, "GPU_0"},
		{
			"1",
			"drakit stand-in GPU /dev/nvidia1 with nvidia-cap30 nvidia-cap31",
			gis[0].ComputeInstances[0].UUID,
			"GPU_1_1G_18GB_",
		},
	} {
		t.Run("gpu"+tc.gpu, func(t *testing.T) {
			id, ok := ids[tc.gpu]
			if !ok {
				t.Fatalf("-check wrote no spec for GPU %s: %v\n%s", tc.gpu, ids, out.String())
			}
			res, err := gpucheck.Run(
				ctx,
				gpucheck.Container{
					Root:    rootfs,
					CDIDirs: []string{filepath.Join(check, "cdi")},
					Devices: []string{id},
					Args: []string{
						gpucheck.ProbePath,
					},
					Binds: map[string]string{gpucheck.ProbePath: probe},
				},
			)
			t.Logf(
				"container of %s (hooks %q, left out %q):\n%s",
				id,
				res.Hooks,
				res.SkippedHooks,
				res.Output,
			)
			if err != nil {
				t.Fatal(err)
			}
			got := string(res.Output)
			lib := "/usr/lib/x86_64-linux-gnu/libcuda.so." + driverVersion
			for _, want := range []string{
				"cuda-probe: env " + nvdriver.EnvVisibleDevices + "=" +
					nvdriver.VisibleDevicesVoid + "\n",
				"cuda-probe: env " + nvdriver.EnvDevicePrefix + tc.envSuffix,
				"=" + tc.uuid + "\n",
				"cuda-probe: libcuda.so.1 loaded from /usr/lib/x86_64-linux-gnu/libcuda.so.1 (" +
					lib + ")\n",
				"cuda-probe: cuInit: 0\n",
				"cuda-probe: cuDeviceGetCount: 0, count 1\n",
				"cuda-probe: device 0: cuDeviceGetName: 0, " + tc.name + "\n",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("the probe in the container did not print %q", want)
				}
			}
			if len(res.SkippedHooks) > 0 ||
				!slices.ContainsFunc(
					res.Hooks,
					func(h string) bool { return strings.Contains(h, "update-ldcache") },
				) {
				t.Errorf(
					"hooks run %q, left out %q: want the spec's update-ldcache hook run",
					res.Hooks,
					res.SkippedHooks,
				)
			}
		})
	}

	// The same container from the GPU 0 spec less its libcuda mount: the
	// probe finds no libcuda.so.1.
	broken := filepath.Join(tmp, "broken")
	withoutMount(t, filepath.Join(check, "cdi"), broken, "libcuda.so")
	fresh := filepath.Join(tmp, "rootfs2")
	if err := ociimage.Unpack(tarball, fresh); err != nil {
		t.Fatal(err)
	}
	res, err := gpucheck.Run(
		ctx,
		gpucheck.Container{Root: fresh, CDIDirs: []string{broken}, Devices: []string{ids["0"]},
			Args: []string{
				gpucheck.ProbePath,
			}, Binds: map[string]string{gpucheck.ProbePath: probe}},
	)
	if err == nil ||
		!strings.Contains(string(res.Output), "cuda-probe: dlopen libcuda.so.1: FAILED") {
		t.Errorf(
			"without the spec's libcuda mount: %v\n%s\nwant the probe's dlopen to fail",
			err,
			res.Output,
		)
	}
}

// simWithMock is the driver's view of the node, the simulator's DGX H200
// with GPU 1 in MIG mode holding one 1g.18gb MIG device, and nvcdi's,
// go-nvml's mock of eight H200s (fakeNVMLOf) answering for the
// simulator's GPUs and MIG device by their UUIDs. It writes the driver
// root's device nodes of the eight GPUs and the /proc files of the
// simulator's MIG device.
func simWithMock(t *testing.T, droot string) (*nvmlsim.Sim, *server.Server) {
	t.Helper()
	sim, err := nvmlsim.Open(
		filepath.Join(t.TempDir(), "sim.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(
			nvmlsim.Setup{
				MIGGPUs:   []int{1},
				Instances: []nvmlsim.Instance{{GPU: 1, Profile: "1g.18gb", Start: 0}},
			},
		),
	)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	gis, err := sim.GPUInstances(1)
	if err != nil || len(gis) != 1 || len(gis[0].ComputeInstances) != 1 {
		t.Fatalf("the simulator's MIG devices on GPU 1: %+v (%v)", gis, err)
	}
	nv, _, _ := fakeNVMLOf(t, len(gpus))
	byUUID := map[string]gonvml.Device{}
	for i, g := range gpus {
		d := nv.Devices[i].(*server.Device)
		uuid := g.UUID
		d.GetUUIDFunc = func() (string, gonvml.Return) { return uuid, gonvml.SUCCESS }
		byUUID[uuid] = d
		if node := filepath.Join(droot, "dev", fmt.Sprintf("nvidia%d", g.Minor)); !exists(node) {
			mknod(t, node, 195, uint32(g.Minor))
		}
	}
	m, ret := nv.DeviceGetHandleByUUID(migUUID)
	if ret != gonvml.SUCCESS {
		t.Fatalf("the mock's MIG device: %v", ret)
	}
	simMIG := gis[0].ComputeInstances[0].UUID
	m.(*mock.Device).GetUUIDFunc = func() (string, gonvml.Return) { return simMIG, gonvml.SUCCESS }
	byUUID[simMIG] = m
	nv.DeviceGetHandleByUUIDFunc = func(uuid string) (gonvml.Device, gonvml.Return) {
		if d, ok := byUUID[uuid]; ok {
			return d, gonvml.SUCCESS
		}
		return nil, gonvml.ERROR_NOT_FOUND
	}
	writeProcCaps(t, gis[0].ID, gis[0].ComputeInstances[0].ID)
	return sim, nv
}

// imageEnv names an image tarball of the driver (`go run ./cmd/drakit
// image -o FILE`) that TestContainerFromDriverSpec uses instead of
// building one.
const imageEnv = "DRAKIT_TEST_DRIVER_IMAGE"

// checkDevices reads the GPU index to CDI device ID list -check wrote.
func checkDevices(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, drivercmd.CheckDevicesFile))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		gpu, id, _ := strings.Cut(l, " ")
		ids[gpu] = id
	}
	return ids
}

// withoutMount copies the JSON CDI specs of from into to, leaving out the
// mounts whose host path contains s.
func withoutMount(t *testing.T, from, to, s string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(from, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no JSON specs in %s (%v)", from, err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	drop := func(e *cdispec.ContainerEdits) {
		e.Mounts = slices.DeleteFunc(
			e.Mounts,
			func(m *cdispec.Mount) bool { return strings.Contains(m.HostPath, s) },
		)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		drop(&spec.ContainerEdits)
		for i := range spec.Devices {
			drop(&spec.Devices[i].ContainerEdits)
		}
		if b, err = json.Marshal(spec); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
