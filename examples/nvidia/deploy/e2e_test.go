package deploy_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/testenv"
)

const storyNS = "default"

// migInstances returns the simulator's MIG devices (UUID -> "GPU g
// profileID@start"), read from its state file as any process on the
// host can.
func migInstances(t *testing.T, stateFile string) map[string]string {
	t.Helper()
	sim, err := nvmlsim.Open(stateFile, nvmlsim.WithServer("dgx-h200"))
	if err != nil {
		t.Fatalf("open the simulator's state: %v", err)
	}
	defer sim.Close()
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range gpus {
		gis, err := sim.GPUInstances(g.Index)
		if err != nil {
			continue // MIG mode off
		}
		for _, gi := range gis {
			for _, ci := range gi.ComputeInstances {
				out[ci.UUID] = fmt.Sprintf(
					"GPU %d profile %d @%d",
					g.Index,
					gi.ProfileID,
					gi.Placement.Start,
				)
			}
		}
	}
	return out
}

// deviceUUIDs maps the driver's published devices to their uuid attribute
// (full GPUs and static MIG devices have one; dynamic MIG devices get
// theirs when prepared).
func deviceUUIDs(t *testing.T, ctx context.Context, env *testenv.Env) map[string]string {
	t.Helper()
	l, err := env.Client.ResourceV1().
		ResourceSlices().
		List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes[nvdriver.AttrUUID]; ok && a.StringValue != nil {
				out[d.Name] = *a.StringValue
			}
		}
	}
	return out
}

// podClaim returns the allocated claim of a story pod: from its template
// or the one the scheduler made for its extended resources.
func podClaim(
	ctx context.Context,
	env *testenv.Env,
	pod *corev1.Pod,
) (*resourceapi.ResourceClaim, error) {
	name := ""
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		name = s.ResourceClaimName
	}
	if name == "" {
		return nil, fmt.Errorf("pod %s has no claim in its status", pod.Name)
	}
	return env.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
}

// TestE2E deploys the driver as users do (image imported into the real
// node's containerd, chart installed with helm and its default
// publication, the driver a DaemonSet pod registered with the kubelet
// through the hostPath folders) on a simulated DGX H200, and runs the
// story's pods at once: each runs and sees its devices (what the
// container printed), the MIG devices made for them exist in the
// simulator while they run and are gone after; the request that cannot
// fit stays Pending with the scheduler's reason; deleting the driver's
// pod mid-way (the DaemonSet starts another) loses nothing: the pods keep
// running, and unprepare works after. The dynamic GPUs are published as
// the chart's default, the placements (every placement of every profile,
// with shared counters), and GPU 1 is shared too (sharing.gpus); then MPS
// shares of GPU 1 (testSharing) and the MIG defragmenter run on the same
// cluster and driver.
func TestE2E(t *testing.T) {
	t.Parallel() // a real node of its own (the host runs two at once)
	e2e(t, false)
}

// TestE2ELayout is TestE2E with migPublication=layout (an option): the
// driver lays each GPU out for the story's pods as they arrive, as the
// planner tells it, and the chart's webhook (its pods on the node, which
// the chart runs for the layout) admits each allocation through the
// node's layout ledger, failing closed; every version of the node's
// layout pool is one slice without counters and a valid layout per GPU.
// Then the MIG defragmenter runs with the layout.
func TestE2ELayout(t *testing.T) {
	t.Parallel() // a real node of its own (the host runs two at once)
	e2e(t, true)
}

func e2e(t *testing.T, layout bool) {
	env := testenv.Start(t, testenv.WithRealNode())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	values := deploy.SimulatorValues()
	var versions *layoutVersions
	if layout {
		// The layout's allocation check runs in the chart's webhook,
		// pods on the node (host network, LocalClusterValues).
		versions = watchLayout(t, ctx, env)
		values = append(values, "migPublication=layout")
	} else {
		// GPU 1 is offered as MPS shares too (testSharing); the story's
		// whole-GPU pods take it whole before, as they did.
		values = append(values, "sharing.gpus=1")
	}
	in := install(t, ctx, env, deploy.DriverPackage, deploy.Image, values...)
	defer func() {
		if t.Failed() {
			in.dumpDriver(t)
		}
	}()
	stateFile := filepath.Join(in.stateDir, "state.json")
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		return len(deviceUUIDs(t, ctx, env)) > 0, nil
	}); err != nil {
		t.Fatalf("the driver published no devices: %v", err)
	}
	before := migInstances(t, stateFile)
	uuids := deviceUUIDs(t, ctx, env)

	// Every pod at once: the story's order does not matter to the test.
	story := deploy.Story(storyNS, env.BusyboxImage)
	for _, w := range story {
		if w.Template != nil {
			if _, err := env.Client.ResourceV1().ResourceClaimTemplates(storyNS).Create(
				ctx, w.Template, metav1.CreateOptions{},
			); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := env.Client.CoreV1().Pods(storyNS).Create(
			ctx, w.Pod, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]deploy.Seen{}
	claims := map[string]*resourceapi.ResourceClaim{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range story {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !w.Fits {
				checkPending(t, ctx, env, w.Name)
				return
			}
			s, claim, err := waitSeen(ctx, env, w.Name)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[w.Name], claims[w.Name] = s, claim
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	during := migInstances(t, stateFile)
	made := map[string]bool{} // MIG devices made for the pods
	for _, w := range story {
		if !w.Fits {
			continue
		}
		s, claim := seen[w.Name], claims[w.Name]
		results := claim.Status.Allocation.Devices.Results
		if len(s.UUIDs) != w.Devices || len(results) != w.Devices {
			t.Errorf(
				"pod %s (%s): allocated %d devices, the container saw %v; want %d",
				w.Name,
				w.Ask,
				len(results),
				s.UUIDs,
				w.Devices,
			)
			continue
		}
		if s.VisibleDevices != nvdriver.VisibleDevicesVoid {
			t.Errorf(
				"pod %s: the container saw %s=%q, want %q",
				w.Name,
				nvdriver.EnvVisibleDevices,
				s.VisibleDevices,
				nvdriver.VisibleDevicesVoid,
			)
		}
		if s.Env[nvdriver.EnvClaimFileDir] == "" || !strings.Contains(s.DevicesFiles, claim.Name) {
			t.Errorf(
				"pod %s: devices file %q (env %v) does not name claim %s",
				w.Name,
				s.DevicesFiles,
				s.Env,
				claim.Name,
			)
		}
		for _, r := range results {
			if r.Driver != nvdriver.DriverName {
				t.Errorf("pod %s got a device of driver %s", w.Name, r.Driver)
			}
			if u, ok := uuids[r.Device]; ok && !slices.Contains(s.UUIDs, u) {
				t.Errorf(
					"pod %s: allocated %s (UUID %s), the container saw %v",
					w.Name,
					r.Device,
					u,
					s.UUIDs,
				)
			}
		}
		for _, u := range s.UUIDs {
			switch {
			case strings.HasPrefix(u, "MIG-"):
				if _, ok := during[u]; !ok {
					t.Errorf(
						"pod %s sees MIG device %s, which the simulator does not have",
						w.Name,
						u,
					)
				}
				if _, static := before[u]; !static {
					made[u] = true
				}
			case strings.HasPrefix(u, "GPU-"):
				if !slices.Contains(slices.Collect(maps.Values(uuids)), u) {
					t.Errorf("pod %s sees GPU %s, which the driver does not publish", w.Name, u)
				}
			default:
				t.Errorf("pod %s sees %q, neither a GPU nor a MIG UUID", w.Name, u)
			}
		}
	}
	if len(made) == 0 {
		t.Errorf("no MIG device was made for the pods (static ones: %d)", len(before))
	}
	// The two devices of mig-pair are on one GPU.
	if pair := claims["mig-pair"]; pair != nil {
		var gpus []string
		for _, u := range seen["mig-pair"].UUIDs {
			gpus = append(gpus, strings.SplitN(during[u], " profile", 2)[0])
		}
		if len(gpus) != 2 || gpus[0] != gpus[1] {
			t.Errorf("mig-pair's devices are on %v, want one GPU", gpus)
		}
	}
	t.Logf("MIG devices made for the pods: %d; static ones: %d", len(made), len(before))

	// The driver's pod goes mid-way; the DaemonSet starts another. The
	// claims stay prepared: pods keep running, their CDI specs stay.
	old, err := in.driverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cdiBefore := cdiSpecs(t, env)
	if err := env.Client.CoreV1().Pods(deploy.Namespace).Delete(
		ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
	); err != nil {
		t.Fatal(err)
	}
	if err := waitNewDriverPod(ctx, in, old.UID); err != nil {
		t.Fatalf("the DaemonSet did not bring the driver back: %v", err)
	}
	for _, w := range story {
		if !w.Fits {
			continue
		}
		p, err := env.Client.CoreV1().Pods(storyNS).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("after the driver restart pod %s: %v %v", w.Name, err, p.Status.Phase)
		}
	}
	if got := cdiSpecs(t, env); !slices.Equal(got, cdiBefore) {
		t.Errorf("CDI specs after the driver restart %v, before %v", got, cdiBefore)
	}
	if after := migInstances(t, stateFile); !maps.Equal(after, during) {
		t.Errorf("MIG devices changed across the driver restart:\n%v\nwas\n%v", after, during)
	}

	// Unprepare after the restart: every pod goes, the MIG devices made
	// for them go, the static ones stay, the CDI specs go.
	for _, w := range story {
		if err := env.Client.CoreV1().Pods(storyNS).Delete(
			ctx, w.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		); err != nil {
			t.Error(err)
		}
	}
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := env.Client.ResourceV1().ResourceClaims(storyNS).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0 && maps.Equal(migInstances(t, stateFile), before) &&
			len(cdiSpecs(t, env)) == 0, err
	}); err != nil {
		l, _ := env.Client.ResourceV1().ResourceClaims(storyNS).List(ctx, metav1.ListOptions{})
		t.Fatalf(
			"after the pods: %d claims left, MIG devices %v (before the pods %v), CDI specs %v: %v",
			len(l.Items),
			migInstances(t, stateFile),
			before,
			cdiSpecs(t, env),
			err,
		)
	}
	freeAgent(t, ctx, env, stateFile, before)
	if layout {
		versions.check(t)
		// The MIG defragmenter with the layout.
		testLayoutDefrag(t, ctx, env)
		return
	}

	// MPS shares of GPU 1, then the MIG defragmenter, on the same
	// cluster and driver.
	testSharing(t, ctx, env)
	testDefrag(t, ctx, env)
}

// freeAgent is the end-to-end of a dynamic GPU that is a free agent
// again (issue 25), on the cluster TestE2E started: a 1g pod on dynamic
// GPU 4; after it ends, three unchanged nvidia.com/gpu: 1 pods, of which
// the third gets GPU 4 whole (the node's two full GPUs come first) with
// MIG mode off while it runs; after they end, MIG mode is on again and a
// 3g pod gets a MIG device on GPU 4.
func freeAgent(
	t *testing.T,
	ctx context.Context,
	env *testenv.Env,
	stateFile string,
	static map[string]string,
) {
	const gpu = 4
	t0 := time.Now()
	defer func() { t.Logf("free-agent steps: %s", time.Since(t0).Round(100*time.Millisecond)) }()
	story := map[string]deploy.Workload{}
	for _, w := range deploy.Story(storyNS, env.BusyboxImage) {
		story[w.Name] = w
	}
	sim, err := nvmlsim.Open(stateFile, nvmlsim.WithServer("dgx-h200"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	mode := func() nvml.MigMode {
		m, err := sim.MigMode(gpu)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	run := func(ws ...deploy.Workload) map[string]deploy.Seen {
		t.Helper()
		for _, w := range ws {
			if w.Template != nil {
				if _, err := env.Client.ResourceV1().ResourceClaimTemplates(storyNS).Create(
					ctx, w.Template, metav1.CreateOptions{},
				); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := env.Client.CoreV1().Pods(storyNS).Create(
				ctx, w.Pod, metav1.CreateOptions{},
			); err != nil {
				t.Fatal(err)
			}
		}
		out := map[string]deploy.Seen{}
		for _, w := range ws {
			s, _, err := waitSeen(ctx, env, w.Name)
			if err != nil {
				t.Fatal(err)
			}
			out[w.Name] = s
		}
		return out
	}
	end := func(ws ...deploy.Workload) {
		t.Helper()
		for _, w := range ws {
			if err := env.Client.CoreV1().Pods(storyNS).Delete(
				ctx, w.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
			); err != nil {
				t.Fatal(err)
			}
		}
		// Gone once its claim is, the kubelet unprepared it (its CDI spec
		// is gone: a claim of an extended resource is deleted before
		// that), its MIG devices are destroyed and the GPU is offered
		// whole again (fit-only publishing lists it only then).
		var claimsLeft int
		var whole bool
		if err := poll(ctx, 2*time.Minute, func(pctx context.Context) (bool, error) {
			l, err := env.Client.ResourceV1().ResourceClaims(storyNS).List(
				pctx, metav1.ListOptions{},
			)
			if err != nil {
				return false, nil
			}
			claimsLeft = len(l.Items)
			_, whole = deviceUUIDs(t, ctx, env)[fmt.Sprintf("gpu-%d", gpu)]
			return claimsLeft == 0 && len(cdiSpecs(t, env)) == 0 &&
				maps.Equal(migInstances(t, stateFile), static) && whole, nil
		}); err != nil {
			t.Fatalf("after pod %s: %d claims left, CDI specs %v, MIG devices %v (want %v), "+
				"GPU %d whole published %v: %v\nledgers: %s",
				ws[0].Name, claimsLeft, cdiSpecs(t, env), migInstances(t, stateFile), static, gpu,
				whole, err, ledgerJSON(t, ctx, env))
		}
	}

	oneG := pinned(story["mig-1g"], "free-1g", gpu)
	seen := run(oneG)
	if u := seen["free-1g"].UUIDs; len(u) != 1 ||
		!strings.HasPrefix(migInstances(t, stateFile)[u[0]], fmt.Sprintf("GPU %d ", gpu)) {
		t.Fatalf(
			"free-1g saw %v, want a MIG device of GPU %d (%v)",
			u,
			gpu,
			migInstances(t, stateFile),
		)
	}
	end(oneG)

	var legacy []deploy.Workload
	for i := range 3 {
		w := story["legacy-gpu"]
		w.Pod = w.Pod.DeepCopy()
		w.Name = fmt.Sprintf("free-gpu-%d", i)
		w.Pod.Name = w.Name
		legacy = append(legacy, w)
	}
	seen = run(legacy...)
	var got []string
	for _, w := range legacy {
		got = append(got, seen[w.Name].UUIDs...)
	}
	if !slices.Contains(got, gpus[gpu].UUID) {
		t.Errorf(
			"three nvidia.com/gpu: 1 pods saw %v; none got idle dynamic GPU %d (%s)",
			got,
			gpu,
			gpus[gpu].UUID,
		)
	}
	if m := mode(); m.Current || m.Pending {
		t.Errorf("GPU %d's MIG mode while a pod has it whole: %+v, want off", gpu, m)
	}
	end(legacy...)
	if m := mode(); !m.Current || !m.Pending {
		t.Errorf("GPU %d's MIG mode after its whole-GPU pod: %+v, want on", gpu, m)
	}

	threeG := pinned(story["mig-3g"], "free-3g", gpu)
	seen = run(threeG)
	if u := seen["free-3g"].UUIDs; len(u) != 1 ||
		!strings.HasPrefix(
			migInstances(t, stateFile)[u[0]],
			fmt.Sprintf("GPU %d profile 9 ", gpu),
		) {
		t.Errorf(
			"free-3g saw %v, want a 3g MIG device of GPU %d (%v)",
			u,
			gpu,
			migInstances(t, stateFile),
		)
	}
	end(threeG)
}

// pinned is a copy of a story workload with a claim template, named
// name, whose requests ask for a device of GPU gpu.
func pinned(w deploy.Workload, name string, gpu int) deploy.Workload {
	w.Name = name
	w.Pod = w.Pod.DeepCopy()
	w.Pod.Name = name
	w.Pod.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(name)
	w.Template = w.Template.DeepCopy()
	w.Template.Name = name
	for i := range w.Template.Spec.Spec.Devices.Requests {
		r := w.Template.Spec.Spec.Devices.Requests[i].Exactly
		r.Selectors = append(
			r.Selectors,
			resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(
					"device.attributes[%q].index == %d",
					nvdriver.DriverName,
					gpu,
				),
			}},
		)
	}
	return w
}

// cdiSpecs lists the driver's CDI spec files on the node.
func cdiSpecs(t *testing.T, env *testenv.Env) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(env.CDIDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range m {
		if b, err := os.ReadFile(f); err == nil &&
			strings.Contains(string(b), nvdriver.DriverName) {
			out = append(out, filepath.Base(f))
		}
	}
	sort.Strings(out)
	return out
}

// waitSeen waits until pod name runs and its container printed what it
// saw.
func waitSeen(
	ctx context.Context,
	env *testenv.Env,
	name string,
) (deploy.Seen, *resourceapi.ResourceClaim, error) {
	var s deploy.Seen
	var pod *corev1.Pod
	err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(storyNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s ended: %s %s", name, p.Status.Phase, p.Status.Message)
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		log, err := env.ContainerLog(ctx, storyNS, name, "ctr")
		if err != nil {
			return false, nil
		}
		s = deploy.ParseSeen(log)
		return s.Complete, nil
	})
	if err != nil {
		detail := ""
		if pod != nil {
			detail = fmt.Sprintf(
				" (phase %s, conditions %+v)",
				pod.Status.Phase,
				pod.Status.Conditions,
			)
		}
		return s, nil, fmt.Errorf(
			"pod %s did not run and print its devices%s: %w",
			name,
			detail,
			err,
		)
	}
	claim, err := podClaim(ctx, env, pod)
	if err != nil {
		return s, nil, err
	}
	if claim.Status.Allocation == nil {
		return s, nil, fmt.Errorf("pod %s runs with claim %s not allocated", name, claim.Name)
	}
	return s, claim, nil
}

// checkPending checks that pod name stays unscheduled with the
// scheduler's reason.
func checkPending(t *testing.T, ctx context.Context, env *testenv.Env, name string) {
	var reason string
	err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(storyNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was scheduled to %s", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				reason = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("pod %s: %v", name, err)
		return
	}
	if !strings.Contains(reason, "cannot allocate all claims") {
		t.Errorf(
			"pod %s is unschedulable for %q, want the DRA reason (cannot allocate all claims)",
			name,
			reason,
		)
	}
}

// waitNewDriverPod waits for a ready driver pod other than the one with
// UID old.
func waitNewDriverPod(ctx context.Context, in *installed, old types.UID) error {
	return poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := in.driverPod(ctx)
		if err != nil || apierrors.IsNotFound(err) {
			return false, nil
		}
		if p.UID == old {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
