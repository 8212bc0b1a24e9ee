package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/drakit/drakit/cdi"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// driverVersion is a 580-series driver, as the fake root's files name it.
const driverVersion = "580.95.05"

// The MIG device of the fake node, a 1g.18gb on GPU 1, and the
// capability minors the kernel would give its GPU and compute instance.
const (
	migUUID          = "MIG-5b2d1d0c-3f6a-5c1e-9a53-1b2f7c1d0e42"
	giMinor, ciMinor = 30, 31
)

// fakeDriverRoot writes a driver root as NVIDIA's 580-series installer
// lays it out on x86_64: versioned libraries with their SONAME links,
// binaries, GSP firmware, and device nodes (character devices, as nvcdi
// checks), the MIG capability nodes included when capNodes. It needs
// CAP_MKNOD.
func fakeDriverRoot(t *testing.T, capNodes bool) string {
	t.Helper()
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	for _, name := range []string{
		"libcuda",
		"libnvidia-ml",
		"libnvidia-ptxjitcompiler",
		"libnvidia-nvvm",
		"libcudadebugger",
		"libnvidia-opencl",
		"libnvidia-cfg",
		"libnvidia-gpucomp",
		"libnvidia-allocator",
		"libnvidia-pkcs11-openssl3",
	} {
		file := name + ".so." + driverVersion
		write(t, filepath.Join(lib, file), "")
		link(t, file, filepath.Join(lib, name+".so.1"))
	}
	link(t, "libcuda.so.1", filepath.Join(lib, "libcuda.so"))
	for _, bin := range []string{
		"nvidia-smi",
		"nvidia-debugdump",
		"nvidia-persistenced",
		"nvidia-cuda-mps-control",
		"nvidia-cuda-mps-server",
	} {
		write(t, filepath.Join(root, "usr/bin", bin), "#!/bin/sh\n")
	}
	for _, fw := range []string{"gsp_ga10x.bin", "gsp_tu10x.bin"} {
		write(t, filepath.Join(root, "lib/firmware/nvidia", driverVersion, fw), "")
	}
	nodes := map[string]uint32{"nvidia0": 0, "nvidia1": 1, "nvidiactl": 255, "nvidia-modeset": 254}
	for name, minor := range nodes {
		mknod(t, filepath.Join(root, "dev", name), 195, minor)
	}
	mknod(t, filepath.Join(root, "dev/nvidia-uvm"), 511, 0)
	mknod(t, filepath.Join(root, "dev/nvidia-uvm-tools"), 511, 1)
	if capNodes {
		for _, m := range []uint32{1, 2, giMinor, ciMinor} {
			mknod(
				t,
				filepath.Join(root, "dev/nvidia-caps", fmt.Sprintf("nvidia-cap%d", m)),
				capsMajor,
				m,
			)
		}
	}
	return root
}

// capsMajor is the nvidia-caps major of the fake node's /proc/devices.
const capsMajor = 236

// writeProcCaps writes the kernel's /proc files of the MIG device
// (gi, ci) on GPU 1 as the NVIDIA kernel driver has them: the instances'
// capability files under /proc/driver/nvidia/capabilities, which the
// driver reads in its own /proc whatever the driver root. It runs in the
// private mount namespace of inPrivateProcDriver only, where
// /proc/driver is a fake and /proc/devices names the nvidia-caps major.
func writeProcCaps(t *testing.T, gi, ci int) {
	t.Helper()
	if os.Getenv(migMinorsEnv) == "" {
		t.Fatal("writeProcCaps outside the private mount namespace would write the host's /proc")
	}
	base := fmt.Sprintf("/proc/driver/nvidia/capabilities/gpu1/mig/gi%d", gi)
	write(
		t,
		filepath.Join(base, "access"),
		fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n", giMinor),
	)
	write(
		t,
		filepath.Join(base, fmt.Sprintf("ci%d/access", ci)),
		fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n", ciMinor),
	)
}

// inPrivateProcDriver runs test name again in a private mount namespace
// with a fake /proc/driver (nvcdi reads the MIG capability minors in
// /proc/driver/nvidia-caps/mig-minors, the driver reads the capability
// files under /proc/driver/nvidia, whatever the driver root) and a fake
// /proc/devices with the nvidia-caps major, and reports true in the run
// that should do the work.
func inPrivateProcDriver(t *testing.T, name string) bool {
	t.Helper()
	if dir := os.Getenv(migMinorsEnv); dir != "" {
		for _, m := range [][2]string{{"driver", "/proc/driver"}, {"devices", "/proc/devices"}} {
			if err := syscall.Mount(
				filepath.Join(dir, m[0]), m[1], "", syscall.MS_BIND, "",
			); err != nil {
				t.Fatalf("mount the fake %s: %v", m[1], err)
			}
		}
		return true
	}
	proc := t.TempDir()
	_, gi, ci := fakeNVML(t)
	write(t, filepath.Join(proc, "driver/nvidia-caps/mig-minors"), fmt.Sprintf("config "+
		"1\nmonitor 2\ngpu1/gi%d/access %d\ngpu1/gi%d/ci%d/access %d\n", gi, giMinor, gi, ci,
		ciMinor))
	write(t, filepath.Join(proc, "devices"), fmt.Sprintf("Character devices:\n  1 mem\n  4 "+
		"/dev/vc/0\n195 nvidia\n%d nvidia-caps\n511 nvidia-uvm\n\nBlock devices:\n  7 loop\n",
		capsMajor))
	cmd := exec.Command(
		"unshare",
		"-m",
		"--propagation",
		"private",
		os.Args[0],
		"-test.run=^"+name+"$",
		"-test.v",
	)
	cmd.Env = append(os.Environ(), migMinorsEnv+"="+proc)
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "unshare failed") {
		t.Skipf("no private mount namespace here: %s", out)
	}
	t.Logf("in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	return false
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mknod(t *testing.T, p string, major, minor uint32) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		t.Skipf("a fake driver root needs device nodes: %v", err)
	}
}

// fakeNVML is go-nvml's mock of an H200 server with two GPUs, driver
// 580.95.05, and on GPU 1 one 1g.18gb MIG device (migUUID), made through
// the mock's own MIG calls; it returns the device's GPU and compute
// instance IDs.
func fakeNVML(t *testing.T) (s *server.Server, gi, ci int) {
	t.Helper()
	return fakeNVMLOf(t, 2)
}

// fakeNVMLOf is fakeNVML with n GPUs (n >= 2).
func fakeNVMLOf(t *testing.T, n int) (s *server.Server, gi, ci int) {
	t.Helper()
	s, err := server.New(
		server.WithGPUs(gpus.Multiple(n, gpus.H200_SXM5_141GB)...),
		server.WithDriverVersion(
			driverVersion,
		),
		server.WithNVMLVersion("13."+driverVersion),
		server.WithCUDADriverVersion(13000),
	)
	if err != nil {
		t.Fatal(err)
	}
	parent := s.Devices[1].(*server.Device)
	if ret, _ := parent.SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		t.Fatalf("MIG mode: %v", ret)
	}
	pinfo, ret := parent.GetGpuInstanceProfileInfo(gonvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != gonvml.SUCCESS {
		t.Fatalf("1g profile: %v", ret)
	}
	g, ret := parent.CreateGpuInstance(&pinfo)
	if ret != gonvml.SUCCESS {
		t.Fatalf("GPU instance: %v", ret)
	}
	cinfo, ret := g.GetComputeInstanceProfileInfo(
		gonvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
		gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
	)
	if ret != gonvml.SUCCESS {
		t.Fatalf("compute profile: %v", ret)
	}
	c, ret := g.CreateComputeInstance(&cinfo)
	if ret != gonvml.SUCCESS {
		t.Fatalf("compute instance: %v", ret)
	}
	giInfo, _ := g.GetInfo()
	ciInfo, _ := c.GetInfo()
	gi, ci = int(giInfo.Id), int(ciInfo.Id)
	// What the mock leaves out: the MIG device handle and the lookups
	// from it.
	parent.GetGpuInstanceByIdFunc = func(id int) (gonvml.GpuInstance, gonvml.Return) {
		if id == gi {
			return g, gonvml.SUCCESS
		}
		return nil, gonvml.ERROR_NOT_FOUND
	}
	g.(*server.GpuInstance).GetComputeInstanceByIdFunc = func(id int) (
		gonvml.ComputeInstance, gonvml.Return,
	) {
		if id == ci {
			return c, gonvml.SUCCESS
		}
		return nil, gonvml.ERROR_NOT_FOUND
	}
	m := &mock.Device{}
	m.IsMigDeviceHandleFunc = func() (bool, gonvml.Return) { return true, gonvml.SUCCESS }
	m.GetUUIDFunc = func() (string, gonvml.Return) { return migUUID, gonvml.SUCCESS }
	m.GetIndexFunc = func() (int, gonvml.Return) { return 0, gonvml.SUCCESS }
	m.GetGpuInstanceIdFunc = func() (int, gonvml.Return) { return gi, gonvml.SUCCESS }
	m.GetComputeInstanceIdFunc = func() (int, gonvml.Return) { return ci, gonvml.SUCCESS }
	m.GetDeviceHandleFromMigDeviceHandleFunc = func() (gonvml.Device, gonvml.Return) {
		return parent, gonvml.SUCCESS
	}
	m.GetMinorNumberFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	m.GetAttributesFunc = func() (gonvml.DeviceAttributes, gonvml.Return) {
		return gonvml.DeviceAttributes{
			MultiprocessorCount:       16,
			GpuInstanceSliceCount:     1,
			ComputeInstanceSliceCount: 1,
			MemorySizeMB:              16384,
		}, gonvml.SUCCESS
	}
	m.GetNameFunc = func() (string, gonvml.Return) {
		return "NVIDIA H200 MIG 1g.18gb", gonvml.SUCCESS
	}
	parent.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	parent.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i == 0 {
			return m, gonvml.SUCCESS
		}
		return nil, gonvml.ERROR_NOT_FOUND
	}
	for _, d := range s.Devices {
		d := d.(*server.Device)
		if d != parent {
			d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, gonvml.SUCCESS }
		}
		d.IsMigDeviceHandleFunc = func() (bool, gonvml.Return) { return false, gonvml.SUCCESS }
	}
	byUUID := s.DeviceGetHandleByUUIDFunc
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (gonvml.Device, gonvml.Return) {
		if uuid == migUUID {
			return m, gonvml.SUCCESS
		}
		return byUUID(uuid)
	}
	return s, gi, ci
}

// migMinorsEnv names, in the re-executed test, the folder whose driver
// folder and devices file are mounted over /proc/driver and
// /proc/devices: nvcdi and the driver read the kernel's files there,
// whatever the driver root.
const migMinorsEnv = "DRAKIT_CUDA_TEST_PROC_DRIVER"

// TestEditsAreNvcdis prepares, on a fake 580-series driver root seen at
// one path (as the driver's pod sees /driver-root) and named at another
// on the node (/run/nvidia/driver, the GPU Operator's), a full GPU and a
// MIG device the way the reference driver does (Editor.DeviceEdits and
// CommonEdits, through drakit's CDI spec writer), and checks that the
// container gets exactly what nvcdi's own spec for that device and root
// gives: the device nodes, the driver's libraries and binaries, the
// hooks; with paths on the node's driver root. The MIG device needs
// /proc/driver/nvidia-caps/mig-minors, which only a private mount
// namespace can fake: the test runs itself again under unshare -m.
func TestEditsAreNvcdis(t *testing.T) {
	if !inPrivateProcDriver(t, "TestEditsAreNvcdis") {
		return
	}
	mounted := fakeDriverRoot(t, true)
	const host = "/run/nvidia/driver"
	root := nvdriver.DriverRoot{Host: host, Container: mounted}
	nv, gi, ci := fakeNVML(t)
	writeProcCaps(t, gi, ci)
	e, err := New(nv, root, WithHookPath("/usr/local/nvidia/toolkit/nvidia-cdi-hook"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := nvcdi.New(
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithNvmlLib(nv),
		nvcdi.WithDriverRoot(mounted),
		nvcdi.WithDevRoot(mounted),
		nvcdi.WithNVIDIACDIHookPath(
			"/usr/local/nvidia/toolkit/nvidia-cdi-hook",
		),
		nvcdi.WithLogger(logger{}),
	)
	if err != nil {
		t.Fatal(err)
	}
	gpu1, _ := nv.Devices[1].GetUUID()
	for _, dev := range []nvdriver.ContainerDevice{
		{UUID: gpu1, Minor: 1}, {UUID: migUUID, Minor: 1, MIG: true, GI: gi, CI: ci},
	} {
		t.Run(dev.UUID[:3], func(t *testing.T) {
			// The reference driver's: the device's edits and the common
			// ones, in drakit's claim spec.
			de, err := e.DeviceEdits(dev)
			if err != nil {
				t.Fatal(err)
			}
			ce, err := e.CommonEdits()
			if err != nil {
				t.Fatal(err)
			}
			w, err := cdi.NewWriter(t.TempDir(), "nvidia.drakit.dev", "gpu")
			if err != nil {
				t.Fatal(err)
			}
			spec, _, err := w.Spec(
				cdi.Claim{
					UID:       "9f1c",
					Namespace: "ns",
					Name:      "c",
					Devices:   []cdi.Device{{Name: "d", Edits: de.Append(ce)}},
				},
			)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(
				append([]cdispec.ContainerEdits{spec.ContainerEdits}, editsOf(spec)...)...)

			// nvcdi's own spec of the device, moved to the node's root.
			s, err := ref.GetSpec(dev.UUID)
			if err != nil {
				t.Fatal(err)
			}
			raw := s.Raw()
			if err := transformroot.NewDriverTransformer(
				transformroot.WithDriverRoot(mounted), transformroot.WithTargetDriverRoot(host),
			).Transform(raw); err != nil {
				t.Fatal(err)
			}
			var devs []cdispec.ContainerEdits
			for _, d := range raw.Devices {
				if d.Name != "all" {
					devs = append(devs, d.ContainerEdits)
				}
			}
			want := collect(append([]cdispec.ContainerEdits{raw.ContainerEdits}, devs...)...)
			if d := cmp.Diff(want, got, cmp.AllowUnexported(edits{})); d != "" {
				t.Errorf("container edits differ from nvcdi's (-nvcdi +driver):\n%s", d)
			}

			// And they are what a CUDA container needs, on the node's paths.
			nodes := []string{
				"/dev/nvidia1",
				"/dev/nvidiactl",
				"/dev/nvidia-uvm",
				"/dev/nvidia-uvm-tools",
			}
			if dev.MIG {
				nodes = append(
					nodes,
					fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giMinor),
					fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ciMinor),
				)
			}
			for _, n := range nodes {
				if !slices.Contains(got.nodes, n+" <- "+host+n) {
					t.Errorf("no device node %s from %s%s: %v", n, host, n, got.nodes)
				}
			}
			for _, f := range []string{
				"/usr/lib/x86_64-linux-gnu/libcuda.so." + driverVersion,
				"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + driverVersion,
				"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so." + driverVersion,
				"/usr/bin/nvidia-smi",
				"/usr/bin/nvidia-cuda-mps-control",
			} {
				if !slices.ContainsFunc(
					got.mounts,
					func(m string) bool { return strings.HasPrefix(m, f+" <- "+host+f+" ") },
				) {
					t.Errorf("no mount of %s from %s%s: %v", f, host, f, got.mounts)
				}
			}
			for _, h := range []string{"update-ldcache", "create-symlinks"} {
				if !slices.ContainsFunc(got.hooks, func(s string) bool {
					return strings.Contains(
						s,
						"/usr/local/nvidia/toolkit/nvidia-cdi-hook [nvidia-cdi-hook "+h,
					)
				}) {
					t.Errorf("no %s hook: %v", h, got.hooks)
				}
			}
		})
	}
}

// TestMIGDeviceWithoutCapNodes: a MIG device made after the node booted
// has no /dev/nvidia-caps nodes on the node (nvcdi silently leaves them
// out of its spec); its container still gets both capability nodes, as
// character devices with the major of /proc/devices and the minors of
// /proc/driver/nvidia/capabilities, so that the runtime makes them.
func TestMIGDeviceWithoutCapNodes(t *testing.T) {
	if !inPrivateProcDriver(t, "TestMIGDeviceWithoutCapNodes") {
		return
	}
	mounted := fakeDriverRoot(t, false)
	nv, gi, ci := fakeNVML(t)
	writeProcCaps(t, gi, ci)
	if _, err := os.Stat(filepath.Join(mounted, "proc")); err == nil {
		t.Fatal("the fake driver root has a proc folder: the test would not show that none is " +
			"needed")
	}
	const host = "/run/nvidia/driver"
	e, err := New(nv, nvdriver.DriverRoot{Host: host, Container: mounted})
	if err != nil {
		t.Fatal(err)
	}
	de, err := e.DeviceEdits(
		nvdriver.ContainerDevice{UUID: migUUID, Minor: 1, MIG: true, GI: gi, CI: ci},
	)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cdi.NewWriter(t.TempDir(), "nvidia.drakit.dev", "gpu")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := w.Spec(
		cdi.Claim{
			UID:       "9f1c",
			Namespace: "ns",
			Name:      "c",
			Devices:   []cdi.Device{{Name: "d", Edits: de}},
		},
	)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range append([]cdispec.ContainerEdits{spec.ContainerEdits}, editsOf(spec)...) {
		for _, n := range c.DeviceNodes {
			mode := "-"
			if n.FileMode != nil {
				mode = fmt.Sprintf("%#o", uint32(*n.FileMode))
			}
			got = append(
				got,
				fmt.Sprintf(
					"%s <- %s %s %d:%d %s",
					n.Path,
					n.HostPath,
					n.Type,
					n.Major,
					n.Minor,
					mode,
				),
			)
		}
	}
	for _, m := range []int{giMinor, ciMinor} {
		want := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d <- %s/dev/nvidia-caps/nvidia-cap%d c "+
			"%d:%d 0444", m, host, m, capsMajor, m)
		if !slices.Contains(got, want) {
			t.Errorf("no capability node %q: %v", want, got)
		}
	}
	if !slices.ContainsFunc(
		got,
		func(s string) bool { return strings.HasPrefix(s, "/dev/nvidia1 <- "+host+"/dev/nvidia1") },
	) {
		t.Errorf("no /dev/nvidia1: %v", got)
	}
	// Without the capability files the edits fail, naming the file.
	if err := os.RemoveAll("/proc/driver/nvidia/capabilities"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DeviceEdits(
		nvdriver.ContainerDevice{UUID: migUUID, Minor: 1, MIG: true, GI: gi, CI: ci},
	); err == nil ||
		!strings.Contains(err.Error(), "capabilities/gpu1/mig") {
		t.Errorf("without /proc/driver/nvidia/capabilities: %v, want an error naming the file", err)
	}
}

// TestSandboxUtilsNotLoaded: a driver root with libnvidia-sandboxutils
// (580-series drivers ship it) does not get it loaded into the driver's
// process: a stand-in whose constructor leaves a mark shows that New and
// the edits never dlopen it.
func TestSandboxUtilsNotLoaded(t *testing.T) {
	mounted := fakeDriverRoot(t, true)
	mark := filepath.Join(t.TempDir(), "loaded")
	src := filepath.Join(t.TempDir(), "sandbox.c")
	write(
		t,
		src,
		fmt.Sprintf(
			"#include <stdio.h>\n__attribute__((constructor)) static void mark(void) { FILE *f = "+
				"fopen(%q, \"w\"); if (f) fclose(f); }\nint nvSandboxUtilsInit(void *in) { "+
				"return 1; }\nint nvSandboxUtilsShutdown(void) { return 0; }\n",
			mark,
		),
	)
	lib := filepath.Join(
		mounted,
		"usr/lib/x86_64-linux-gnu/libnvidia-sandboxutils.so."+driverVersion,
	)
	if out, err := exec.Command(
		"cc", "-shared", "-fPIC", "-Wl,-soname,libnvidia-sandboxutils.so.1", "-o", lib, src,
	).CombinedOutput(); err != nil {
		t.Skipf("no C compiler for the stand-in library: %v: %s", err, out)
	}
	link(t, filepath.Base(lib), filepath.Join(filepath.Dir(lib), "libnvidia-sandboxutils.so.1"))
	nv, _, _ := fakeNVML(t)
	e, err := New(nv, nvdriver.DriverRoot{Host: "/", Container: mounted})
	if err != nil {
		t.Fatal(err)
	}
	gpu0, _ := nv.Devices[0].GetUUID()
	if _, err := e.DeviceEdits(nvdriver.ContainerDevice{UUID: gpu0, Minor: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CommonEdits(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error(
			"libnvidia-sandboxutils.so.1 of the driver root was loaded into the driver's process",
		)
	}
}

func editsOf(s *cdispec.Spec) []cdispec.ContainerEdits {
	var out []cdispec.ContainerEdits
	for _, d := range s.Devices {
		out = append(out, d.ContainerEdits)
	}
	return out
}

// edits are container edits as sorted strings: what the container gets,
// whatever the order and whether an edit came with the device or the
// claim.
type edits struct{ nodes, mounts, hooks, env []string }

func collect(cs ...cdispec.ContainerEdits) edits {
	var e edits
	for _, c := range cs {
		for _, n := range c.DeviceNodes {
			hp := n.HostPath
			if hp == "" {
				hp = n.Path
			}
			e.nodes = append(e.nodes, n.Path+" <- "+hp)
		}
		for _, m := range c.Mounts {
			e.mounts = append(
				e.mounts,
				fmt.Sprintf("%s <- %s %s %v", m.ContainerPath, m.HostPath, m.Type, m.Options),
			)
		}
		for _, h := range c.Hooks {
			e.hooks = append(e.hooks, fmt.Sprintf("%s %s %v %v", h.HookName, h.Path, h.Args, h.Env))
		}
		e.env = append(e.env, c.Env...)
	}
	for _, s := range [][]string{e.nodes, e.mounts, e.hooks, e.env} {
		slices.Sort(s)
	}
	e.nodes, e.mounts, e.hooks, e.env = slices.Compact(
		e.nodes,
	), slices.Compact(
		e.mounts,
	), slices.Compact(
		e.hooks,
	), slices.Compact(
		e.env,
	)
	return e
}

// InstallHook puts the image's hook at the host path, executable,
// replaces an older one, leaves the same one alone, and says which file
// it could not read.
func TestInstallHook(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "image-hook"), filepath.Join(dir, "plugin/nvidia-cdi-hook")
	write(t, from, "#!/bin/sh\necho v1.20.2\n")
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, []byte("old hook"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time it is already there
		if err := InstallHook(from, to); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(to)
		fi, serr := os.Stat(to)
		if err != nil || serr != nil || string(b) != "#!/bin/sh\necho v1.20.2\n" ||
			fi.Mode().Perm() != 0o755 {
			t.Fatalf(
				"installed hook %q (%v, %v), mode %v; want the image's, 0755",
				b,
				err,
				serr,
				fi.Mode(),
			)
		}
	}
	if err := InstallHook(filepath.Join(dir, "none"), to); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(dir, "none")) {
		t.Errorf("a missing hook: %v, want an error naming it", err)
	}
	if err := InstallHook("image-hook", to); err == nil {
		t.Error("a relative path was accepted")
	}
}
