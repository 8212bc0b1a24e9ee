package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/conformance"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/testenv"
)

// asDriverEnv makes the test binary run as the driver, so that tests run
// it as a real process and can kill -9 it.
const asDriverEnv = "DRAKIT_NVIDIA_RUN_AS_DRIVER"

func TestMain(m *testing.M) {
	if os.Getenv(asDriverEnv) == "1" {
		if err := run(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// simArgs are the README's simulated DGX H200 flags for a state file.
func simArgs(state string) []string {
	return []string{
		"-nvml-sim=dgx-h200", "-nvml-sim-state=" + state, "-nvml-sim-mig-gpus=2-7",
		"-dynamic-mig-gpus=4,5,6,7",
		"--feature-gates=DynamicMIG=true,DynamicMIGWholeGPU=true",
		"-nvml-sim-instances=2:4g.71gb@0,2:3g.71gb@4,3:3g.71gb@0,3:2g.35gb@4,3:1g.18gb@6",
	}
}

// driverCommand is the command line that runs the driver on env's node.
func driverCommand(t *testing.T, env *testenv.Env, state string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]string{self}, simArgs(state)...), env.DriverArgs(nvdriver.DriverName)...)
}

// extraClaims are a claim shape users of this driver write, for the
// suite's prepare.extra-claims: two 1g.18gb devices on one GPU (one
// request with a count and matchAttribute on the GPU index, as package
// mig's doc says). The suite allocates it while its main claims hold
// devices, so a full-GPU claim (the node has two) may find none free.
func extraClaims() []resourceapi.ResourceClaimSpec {
	index := resourceapi.FullyQualifiedName(nvdriver.DriverName + "/" + mig.AttrIndex)
	return []resourceapi.ResourceClaimSpec{{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: nvdriver.ProfileClass(
					"1g.18gb",
				), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}},
		},
		Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: &index}},
	}}}
}

// checkXIDTaints raises an XID on GPU 3 and waits for its devices to be
// tainted in the published slices, then recovers it and waits for the
// taints to go.
func checkXIDTaints(ctx context.Context, t *testing.T, env *testenv.Env, state string) {
	t.Helper()
	sim, err := nvmlsim.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	// tainted lists the published devices with a taint, as
	// "device=value".
	tainted := func(ctx context.Context) ([]string, error) {
		sl, err := env.Client.ResourceV1().
			ResourceSlices().
			List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, s := range sl.Items {
			for _, d := range s.Spec.Devices {
				for _, tn := range d.Taints {
					out = append(out, d.Name+"="+tn.Value)
				}
			}
		}
		sort.Strings(out)
		return out, nil
	}
	if err := sim.RaiseXID(3, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	// The driver need not have subscribed yet: GPU 3 answers NVML
	// GPU_IS_LOST after XID 79, and its devices are tainted for that.
	want := "gpu-3-1g-18gb-6=GPULost gpu-3-2g-35gb-4=GPULost gpu-3-3g-71gb-0=GPULost"
	var got []string
	poll(ctx, t, "GPU 3's devices tainted", func(ctx context.Context) (bool, error) {
		got, err = tainted(ctx)
		return strings.Join(got, " ") == want, err
	})
	if err := sim.RecoverGPU(3); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "taints removed after the recovery", func(ctx context.Context) (bool, error) {
		got, err = tainted(ctx)
		return len(got) == 0, err
	})
}

// proc is the driver running as a process.
type proc struct {
	cmd  *exec.Cmd
	done chan error
}

func startDriver(
	ctx context.Context,
	t *testing.T,
	env *testenv.Env,
	state string,
	extra ...string,
) *proc {
	t.Helper()
	args := append(driverCommand(t, env, state), extra...)
	cmd := exec.Command(args[0], append(args[1:], "-v=3")...)
	cmd.Env = append(os.Environ(), asDriverEnv+"=1")
	log, err := os.Create(filepath.Join(t.TempDir(), "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("driver log (pid %d):\n%s", cmd.Process.Pid, tail(string(b), 60))
		}
	})
	// Ready when this process says so (an earlier one's socket and
	// slices may still be there) and slices are published.
	poll(ctx, t, "driver ready and slices published", func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.done:
			return false, fmt.Errorf("driver exited: %v", err)
		default:
		}
		b, _ := os.ReadFile(log.Name())
		sl, err := env.Client.ResourceV1().
			ResourceSlices().
			List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName})
		return err == nil && strings.Contains(string(b), `"Driver ready"`) && len(sl.Items) > 0, nil
	})
	return p
}

// kill sends SIGKILL to the driver by PID and waits for it.
func (p *proc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func poll(ctx context.Context, t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(
		ctx, 200*time.Millisecond, 2*time.Minute, true, cond,
	); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// deviceUUIDs returns the values of the device variables
// (nvdriver.EnvDevicePrefix) in a podWith container's log.
func deviceUUIDs(log string) []string {
	var out []string
	for l := range strings.Lines(log) {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok &&
			strings.HasPrefix(k, nvdriver.EnvDevicePrefix) {
			out = append(out, v)
		}
	}
	return out
}

// podWith runs a pod whose container prints its environment's NVIDIA
// variables and the claim's devices file, then sleeps.
func podWith(env *testenv.Env, name, claim string) *corev1.Pod {
	script := `env | grep '^NVIDIA' | sort; cat $` + nvdriver.EnvClaimFileDir +
		`/*.json | tr -d ' \n'; echo; sleep 3600`
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimName: &claim},
			},
			Containers: []corev1.Container{
				{Name: "c",
					Image:           env.BusyboxImage,
					ImagePullPolicy: corev1.PullNever,
					Command: []string{
						"sh",
						"-c",
						script,
					},
					Resources: corev1.ResourceRequirements{
						Claims: []corev1.ResourceClaim{{Name: "gpu"}},
					}},
			},
		}}
}

// createClaim creates a claim for one device of class; a non-empty mode
// selects devices whose migMode attribute is mode; config, when set, is
// the driver's opaque configuration.
func createClaim(
	ctx context.Context,
	t *testing.T,
	env *testenv.Env,
	name, class, mode string,
	config ...string,
) {
	t.Helper()
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	if mode != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(
				`device.attributes[%q].%s == %q`,
				nvdriver.DriverName,
				nvdriver.AttrMIGMode,
				mode,
			)}}}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}},
			},
		}}
	for _, cfg := range config {
		c.Spec.Devices.Config = append(c.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{
			DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver:     nvdriver.DriverName,
					Parameters: runtime.RawExtension{Raw: []byte(cfg)}},
			}})
	}
	if _, err := env.Client.ResourceV1().ResourceClaims("default").Create(
		ctx, c, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
}

func waitRunning(ctx context.Context, t *testing.T, env *testenv.Env, pod string) {
	t.Helper()
	poll(ctx, t, "pod "+pod+" running", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf(
				"pod ended: %s %+v",
				p.Status.Phase,
				p.Status.ContainerStatuses,
			)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
}

func deletePod(ctx context.Context, t *testing.T, env *testenv.Env, pod string) {
	t.Helper()
	if err := env.Client.CoreV1().Pods("default").Delete(
		ctx, pod, metav1.DeleteOptions{},
	); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "pod "+pod+" gone", func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func containerLog(ctx context.Context, t *testing.T, env *testenv.Env, pod string) string {
	t.Helper()
	var logs string
	poll(ctx, t, "output of "+pod, func(ctx context.Context) (bool, error) {
		logs, _ = env.ContainerLog(ctx, "default", pod, "c")
		return strings.Contains(logs, "{"), nil
	})
	return logs
}

// migInstances lists the simulator's GPU instances on the dynamic GPUs
// 4-7, as "gpu:profileID@start" with "(half)" for one without a compute
// instance.
func migInstances(t *testing.T, sim *nvmlsim.Sim) []string {
	t.Helper()
	var out []string
	for gpu := 4; gpu < 8; gpu++ {
		gis, err := sim.GPUInstances(gpu)
		if err != nil {
			t.Fatal(err)
		}
		for _, gi := range gis {
			s := fmt.Sprintf("%d:%d@%d", gpu, gi.ProfileID, gi.Placement.Start)
			if len(gi.ComputeInstances) == 0 {
				s += "(half)"
			}
			out = append(out, s)
		}
	}
	return out
}

// TestDriver runs the driver as a process for the real local node
// (kubelet, containerd) on the README's simulated DGX H200, all on one
// cluster:
//
//   - pods: a pod with a dynamic 1g MIG claim and one with a time-sliced
//     full GPU run and see their devices; the MIG device exists in the
//     simulator while its pod runs and is gone after;
//   - old-style pods asking for nvidia.com/gpu and nvidia.com/mig-1g.18gb
//     in their limits run on the DeviceClasses' extended resources;
//   - a kill -9 of the driver in the middle of a MIG creation leaves no
//     half-made instance once it is back;
//   - drakit's conformance suite passes (it plays the kubelet for its own
//     claims, kills -9 and restarts the driver);
//   - an XID taints the GPU's devices in the published slices and a
//     recovery removes the taints.
func TestDriver(t *testing.T) {
	env := testenv.Start(t, testenv.WithRealNode())
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	state := filepath.Join(t.TempDir(), "gpus.json")
	drv := startDriver(ctx, t, env, state)
	sim, err := nvmlsim.Open(state) // the driver's simulated GPUs, shared through the file
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range nvdriver.DeviceClasses(sim.Product().ProfileNames()) {
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(
			ctx, c, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("pods", func(t *testing.T) {
		createClaim(ctx, t, env, "mig", nvdriver.ProfileClass("1g.18gb"), nvdriver.ModeDynamic)
		createClaim(
			ctx,
			t,
			env,
			"full",
			nvdriver.ClassGPU,
			"",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":`+
				`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
		)
		for _, p := range []*corev1.Pod{
			podWith(env, "mig-user", "mig"), podWith(env, "gpu-user", "full"),
		} {
			if _, err := env.Client.CoreV1().Pods("default").Create(
				ctx, p, metav1.CreateOptions{},
			); err != nil {
				t.Fatal(err)
			}
		}
		waitRunning(ctx, t, env, "mig-user")
		waitRunning(ctx, t, env, "gpu-user")

		migLog, gpuLog := containerLog(
			ctx,
			t,
			env,
			"mig-user",
		), containerLog(
			ctx,
			t,
			env,
			"gpu-user",
		)
		t.Logf("mig-user saw:\n%s\ngpu-user saw:\n%s", migLog, gpuLog)
		inst := migInstances(t, sim)
		if len(inst) != 1 || strings.Contains(inst[0], "half") {
			t.Fatalf("MIG instances while the pod runs: %v, want one complete", inst)
		}
		claim, err := env.Client.ResourceV1().
			ResourceClaims("default").
			Get(ctx, "mig", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dev := claim.Status.Allocation.Devices.Results[0].Device
		ref, err := mig.ParseDeviceName(dev)
		if err != nil {
			t.Fatal(err)
		}
		gpu, _ := sim.GPUInstances(ref.GPU)
		uuid := gpu[0].ComputeInstances[0].UUID
		for _, want := range []string{
			nvdriver.EnvDevicePrefix + strings.ToUpper(strings.ReplaceAll(dev, "-", "_")) + "=" +
				uuid,
			nvdriver.EnvVisibleDevices + "=" + nvdriver.VisibleDevicesVoid,
			`"profile":"1g.18gb"`,
			`"uuid":"` + uuid + `"`,
			`"mode":"dynamic"`,
		} {
			if !strings.Contains(migLog, want) {
				t.Errorf("mig-user did not see %s", want)
			}
		}
		gpus, _ := sim.GPUs()
		seen := deviceUUIDs(gpuLog)
		if len(seen) != 1 || !strings.Contains(gpuLog, `"type":"gpu"`) {
			t.Errorf("gpu-user did not see one GPU UUID (%v) and its devices file", seen)
		}
		found := false
		for _, g := range gpus {
			found = found || slices.Contains(seen, g.UUID)
		}
		if !found {
			t.Errorf("gpu-user's device variable %v holds no simulated GPU's UUID", seen)
		}
		full, err := env.Client.ResourceV1().
			ResourceClaims("default").
			Get(ctx, "full", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fullRef, _ := mig.ParseDeviceName(full.Status.Allocation.Devices.Results[0].Device)
		if ts, _ := sim.TimeSlice(fullRef.GPU); ts != nvml.TimeSliceLong {
			t.Errorf("GPU %d time-slice %q while gpu-user runs, want Long", fullRef.GPU, ts)
		}
		if !strings.Contains(
			gpuLog,
			fmt.Sprintf("%sGPU_%d=Long", nvdriver.EnvTimeSlicePrefix, fullRef.GPU),
		) ||
			!strings.Contains(gpuLog, `"timeSlice":"Long"`) {
			t.Errorf("gpu-user did not see its time-slice")
		}

		deletePod(ctx, t, env, "mig-user")
		deletePod(ctx, t, env, "gpu-user")
		poll(
			ctx,
			t,
			"MIG device destroyed and time-slice reset",
			func(ctx context.Context) (bool, error) {
				ts, err := sim.TimeSlice(fullRef.GPU)
				return len(migInstances(t, sim)) == 0 && ts == nvml.TimeSliceDefault, err
			},
		)
	})

	t.Run("extended-resources", func(t *testing.T) {
		// Device-plugin style pods, unchanged: the DeviceClasses'
		// extendedResourceName makes the scheduler allocate them.
		for name, res := range map[string]string{
			"old-gpu": nvdriver.ExtendedResourceGPU,
			"old-mig": nvdriver.ProfileExtendedResource("1g.18gb"),
		} {
			p := podWith(env, name, "")
			p.Spec.ResourceClaims = nil
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")},
			}
			if _, err := env.Client.CoreV1().Pods("default").Create(
				ctx, p, metav1.CreateOptions{},
			); err != nil {
				t.Fatal(err)
			}
		}
		waitRunning(ctx, t, env, "old-gpu")
		waitRunning(ctx, t, env, "old-mig")
		gpuLog, migLog := containerLog(ctx, t, env, "old-gpu"), containerLog(ctx, t, env, "old-mig")
		t.Logf("old-gpu saw:\n%s\nold-mig saw:\n%s", gpuLog, migLog)
		g, m := deviceUUIDs(gpuLog), deviceUUIDs(migLog)
		if len(g) != 1 || !strings.HasPrefix(g[0], "GPU-") || len(m) != 1 ||
			!strings.HasPrefix(m[0], "MIG-") ||
			!strings.Contains(migLog, `"profile":"1g.18gb"`) {
			t.Errorf("old-style pods did not get a GPU and a 1g.18gb MIG device")
		}
		deletePod(ctx, t, env, "old-gpu")
		deletePod(ctx, t, env, "old-mig")
	})

	t.Run("kill-9-during-MIG-creation", func(t *testing.T) {
		// The next compute instance create stalls: the GPU instance then
		// exists without it, the state a crash between the two calls leaves.
		if err := sim.InjectFault(
			nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: -1, Stall: true},
		); err != nil {
			t.Fatal(err)
		}
		createClaim(ctx, t, env, "mig2", nvdriver.ProfileClass("1g.18gb"), nvdriver.ModeDynamic)
		if _, err := env.Client.CoreV1().Pods("default").Create(
			ctx, podWith(env, "mig2-user", "mig2"), metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "the driver stalled in MIG creation", func(ctx context.Context) (bool, error) {
			st, err := sim.Stalls()
			return err == nil && len(st) == 1 && st[0].PID == drv.cmd.Process.Pid, err
		})
		if inst := migInstances(t, sim); len(inst) != 1 || !strings.Contains(inst[0], "half") {
			t.Fatalf("instances at the stall: %v, want one half-made", inst)
		}
		drv.kill()
		drv = startDriver(ctx, t, env, state)
		for _, in := range migInstances(t, sim) { // the kubelet may have prepared it again already
			if strings.Contains(in, "half") {
				t.Errorf("instances after the restart: %v, want no half-made one", in)
			}
		}
		waitRunning(ctx, t, env, "mig2-user") // the kubelet's retry prepares it afresh
		if inst := migInstances(t, sim); len(inst) != 1 || strings.Contains(inst[0], "half") {
			t.Errorf("instances while mig2-user runs: %v, want one complete", inst)
		}
		deletePod(ctx, t, env, "mig2-user")
		poll(ctx, t, "MIG device destroyed", func(ctx context.Context) (bool, error) {
			return len(migInstances(t, sim)) == 0, nil
		})
	})
	t.Run("lost-journal-and-checkpoint", func(t *testing.T) {
		// The previous subtest's driver ended with it (its cleanup).
		drv = startDriver(ctx, t, env, state)
		plugin := env.PluginDataDir(nvdriver.DriverName)
		// runPod runs a pod with a dynamic 1g claim and returns its
		// device's name.
		runPod := func(name string) string {
			createClaim(ctx, t, env, name, nvdriver.ProfileClass("1g.18gb"), nvdriver.ModeDynamic)
			if _, err := env.Client.CoreV1().Pods("default").Create(
				ctx, podWith(env, name+"-user", name), metav1.CreateOptions{},
			); err != nil {
				t.Fatal(err)
			}
			waitRunning(ctx, t, env, name+"-user")
			if inst := migInstances(t, sim); len(inst) != 1 {
				t.Fatalf("MIG instances while %s-user runs: %v, want one", name, inst)
			}
			c, err := env.Client.ResourceV1().
				ResourceClaims("default").
				Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return c.Status.Allocation.Devices.Results[0].Device
		}

		// Item 1: the MIG intent journal deleted under a running pod. Its
		// GPU stays dynamic (not the administrator's), and the device is
		// destroyed when the pod ends.
		dev := runPod("lost-journal")
		ref, _ := mig.ParseDeviceName(dev)
		drv.kill()
		if err := os.Remove(filepath.Join(plugin, "nvidia", "intents.json")); err != nil {
			t.Fatal(err)
		}
		drv = startDriver(ctx, t, env, state)
		poll(
			ctx,
			t,
			fmt.Sprintf("GPU %d still published as dynamic beside %s", ref.GPU, dev),
			func(ctx context.Context) (bool, error) {
				sl, err := env.Client.ResourceV1().
					ResourceSlices().
					List(
						ctx,
						metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName},
					)
				if err != nil {
					return false, err
				}
				for _, s := range sl.Items {
					for _, d := range s.Spec.Devices {
						if r, err := mig.ParseDeviceName(d.Name); err == nil && r.GPU == ref.GPU &&
							d.Name != dev {
							return true, nil
						}
					}
				}
				return false, nil
			},
		)
		deletePod(ctx, t, env, "lost-journal-user")
		poll(
			ctx,
			t,
			"MIG device destroyed after the journal was lost",
			func(ctx context.Context) (bool, error) {
				return len(migInstances(t, sim)) == 0, nil
			},
		)

		// Item 2: the runtime's checkpoint wiped under a running pod: no
		// held claim names its MIG device, which is destroyed at start, so
		// no later claim gets its UUID.
		runPod("lost-checkpoint")
		drv.kill()
		if err := os.RemoveAll(filepath.Join(plugin, "checkpoint")); err != nil {
			t.Fatal(err)
		}
		drv = startDriver(ctx, t, env, state)
		if inst := migInstances(t, sim); len(inst) != 0 {
			t.Errorf(
				"MIG instances after the checkpoint was wiped: %v, want the unheld device "+
					"destroyed",
				inst,
			)
		}
		deletePod(ctx, t, env, "lost-checkpoint-user")
	})
	t.Run("lost-CDI-folder", func(t *testing.T) {
		// The CDI folder deleted under a running pod with a dynamic MIG
		// device, then the driver restarted (issue 35: the restart undid
		// the claim and destroyed the MIG device the pod used). The
		// claim stays prepared, its MIG device is kept, and its spec is
		// written again, so a second pod on the claim runs on the same
		// device.
		drv.kill() // the first one's, when only this subtest runs
		drv = startDriver(ctx, t, env, state)
		createClaim(ctx, t, env, "cdi-lost", nvdriver.ProfileClass("1g.18gb"), nvdriver.ModeDynamic)
		if _, err := env.Client.CoreV1().Pods("default").Create(
			ctx, podWith(env, "cdi-lost-user", "cdi-lost"), metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		waitRunning(ctx, t, env, "cdi-lost-user")
		before := migInstances(t, sim)
		first := deviceUUIDs(containerLog(ctx, t, env, "cdi-lost-user"))
		if len(before) != 1 || len(first) != 1 {
			t.Fatalf(
				"MIG instances %v and device UUIDs %v while cdi-lost-user runs, want one each",
				before,
				first,
			)
		}
		if err := os.RemoveAll(env.CDIDir); err != nil {
			t.Fatal(err)
		}
		drv.kill()
		drv = startDriver(ctx, t, env, state)
		if after := migInstances(t, sim); !slices.Equal(after, before) {
			t.Fatalf(
				"MIG instances after the restart: %v, want %v (the running pod's kept)",
				after,
				before,
			)
		}
		if _, err := env.Client.CoreV1().Pods("default").Create(
			ctx, podWith(env, "cdi-lost-second", "cdi-lost"), metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		waitRunning(ctx, t, env, "cdi-lost-second")
		if second := deviceUUIDs(containerLog(ctx, t, env, "cdi-lost-second")); !slices.Equal(
			second,
			first,
		) {
			t.Errorf("the second pod on the claim got %v, want the first's %v", second, first)
		}
		deletePod(ctx, t, env, "cdi-lost-user")
		deletePod(ctx, t, env, "cdi-lost-second")
		poll(
			ctx,
			t,
			"MIG device destroyed after both pods",
			func(ctx context.Context) (bool, error) {
				return len(migInstances(t, sim)) == 0, nil
			},
		)
	})
	// Each starts its own driver (the previous subtest's cleanup killed
	// the one it had started; the first one is killed when only these run).
	t.Run("admin-access-across-kill-9", func(t *testing.T) {
		drv.kill()
		adminAccessAcrossKill(ctx, t, env, state, sim)
	})
	t.Run("read-only-and-full-state-folder", func(t *testing.T) {
		drv.kill()
		brokenStateFolder(ctx, t, env, state, sim)
	})
	drv.kill() // the suite starts its own

	t.Run("conformance", func(t *testing.T) {
		cfg := env.ConformanceConfig(nvdriver.DriverName)
		cfg.StartCommand = driverCommand(t, env, state)
		cfg.StartEnv = []string{asDriverEnv + "=1"}
		cfg.ExtraClaims = extraClaims()
		conformance.Test(t, cfg)
	})

	t.Run("xid-taints", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		startDriver(ctx, t, env, state)
		checkXIDTaints(ctx, t, env, state)
	})
}
