package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/testenv"
)

// nextImage is the image the upgrade goes to: the same package built
// again under another tag, so that the DaemonSet's template changes.
const nextImage = "drakit.dev/nvidia-dra-driver:next"

// admissionCase is a claim for one full GPU with an opaque configuration
// and what the webhook answers: refused with prepare's message, or
// allowed (wantErr "").
type admissionCase struct {
	name, driver, params, wantErr string
}

var admissionCases = []admissionCase{
	{
		name:   "correct",
		driver: nvdriver.DriverName,
		params: `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
			`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
	},
	{
		name:   "unknown-field",
		driver: nvdriver.DriverName,
		params: `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
			`{"strategy":"TimeSlicing","timeSlicingConfig":{"intervall":"Long"}}}`,
		wantErr: `invalid opaque device configuration: request "gpu": GpuConfig ` +
			`(gpu.nvidia.drakit.dev/v1alpha1) from the claim: json: unknown field "intervall"`,
	},
	{
		name:   "bad-value",
		driver: nvdriver.DriverName,
		params: `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
			`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`,
		wantErr: `invalid opaque device configuration: request "gpu": GpuConfig ` +
			`(gpu.nvidia.drakit.dev/v1alpha1): sharing.timeSlicingConfig.interval "Forever": ` +
			`want Default, Short, Medium or Long`,
	},
	{
		name:   "other-driver",
		driver: "resource.nvidia.com",
		params: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","whatever":1}`,
	},
}

func (c admissionCase) spec() resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{
				Name:    "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ClassGPU},
			},
		},
		Config: []resourceapi.DeviceClaimConfiguration{
			{
				DeviceConfiguration: resourceapi.DeviceConfiguration{
					Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: c.driver, Parameters: runtime.RawExtension{Raw: []byte(c.params)}},
				},
			},
		},
	}}
}

// helmUpgrade upgrades the release to image ref with the local cluster's
// values and set, and waits for it (helm --wait: the DaemonSet's new pod
// ready).
func helmUpgrade(
	t *testing.T,
	ctx context.Context,
	in *installed,
	ref string,
	set ...string,
) time.Duration {
	t.Helper()
	u, err := url.Parse(in.env.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, _ := strings.Cut(ref, ":")
	args := []string{
		"upgrade",
		deploy.Release,
		"chart",
		"--kubeconfig",
		in.env.Kubeconfig,
		"--namespace",
		deploy.Namespace,
		"--wait",
		"--timeout",
		"5m",
		"--set",
		"image.repository=" + repo,
		"--set",
		"image.tag=" + tag,
	}
	for _, v := range append(in.localValues(u.Port()), set...) {
		args = append(args, "--set", v)
	}
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, helm(t), args...).CombinedOutput()
	if err != nil {
		in.dumpDriver(t)
		t.Fatalf("helm upgrade to %s: %v\n%s", ref, err, out)
	}
	return time.Since(t0)
}

// podEvents are the messages of the pod's events with reason.
func podEvents(ctx context.Context, env *testenv.Env, pod, reason string) []string {
	l, err := env.Client.CoreV1().
		Events(storyNS).
		List(
			ctx,
			metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason},
		)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Message)
	}
	return out
}

// deletePod deletes a story pod as a workload's controller would,
// gracefully: the kubelet stops its containers and unprepares its claim
// before the pod leaves the API server, and only then is the claim's
// device given to another (the resourceclaim controller releases the
// claims of terminated pods). A forced deletion (grace 0) releases the
// device at once, while the node may still hold it for the old claim:
// the next claim's prepare is then refused ("device already prepared for
// another claim") until the kubelet has unprepared the old one.
func deletePod(ctx context.Context, env *testenv.Env, name string) error {
	err := env.Client.CoreV1().
		Pods(storyNS).
		Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// waitPodsGone waits until no pod in the story namespace has a name with
// prefix: the kubelet has unprepared their claims.
func waitPodsGone(ctx context.Context, env *testenv.Env, prefix string) error {
	return poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := env.Client.CoreV1().Pods(storyNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range l.Items {
			if strings.HasPrefix(p.Name, prefix) {
				return false, nil
			}
		}
		return true, nil
	})
}

// failedPrepares are the FailedPrepareDynamicResources events of the
// story pods whose names start with prefix (events outlive their pods).
func failedPrepares(ctx context.Context, env *testenv.Env, prefix string) ([]string, error) {
	l, err := env.Client.CoreV1().
		Events(storyNS).
		List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedPrepareDynamicResources"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range l.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			out = append(out, e.InvolvedObject.Name+": "+e.Message)
		}
	}
	return out, nil
}

// arrivals keeps pods arriving, one after the other, each with a 1g MIG
// device made for it at prepare, until stop: each (<prefix>-<i>) runs,
// prints its device and is deleted (gracefully, as its controller
// would). It records when each ran and which failed.
type arrivals struct {
	prefix string
	mu     sync.Mutex
	ran    []time.Time // when each pod's container printed its device
	failed []string
	stop   chan struct{}
	done   chan struct{}
}

func startArrivals(
	t *testing.T,
	ctx context.Context,
	env *testenv.Env,
	w deploy.Workload,
	prefix string,
) *arrivals {
	t.Helper()
	tmpl := w.Template.DeepCopy()
	tmpl.Name = prefix
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(storyNS).Create(
		ctx, tmpl, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	a := &arrivals{prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			default:
			}
			pod := w.Pod.DeepCopy()
			pod.Name = fmt.Sprintf("%s-%d", prefix, i)
			pod.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(tmpl.Name)
			if _, err := env.Client.CoreV1().Pods(storyNS).Create(
				ctx, pod, metav1.CreateOptions{},
			); err != nil {
				a.fail(fmt.Sprintf("%s: create: %v", pod.Name, err))
				return
			}
			s, _, err := waitSeen(ctx, env, pod.Name)
			switch {
			case err != nil:
				a.fail(
					fmt.Sprintf(
						"%s: %v (events %v)",
						pod.Name,
						err,
						podEvents(ctx, env, pod.Name, "FailedPrepareDynamicResources"),
					),
				)
			case len(s.UUIDs) != 1 || !strings.HasPrefix(s.UUIDs[0], "MIG-"):
				a.fail(fmt.Sprintf("%s saw %v, want one MIG device", pod.Name, s.UUIDs))
			default:
				a.mu.Lock()
				a.ran = append(a.ran, time.Now())
				a.mu.Unlock()
			}
			if err := deletePod(ctx, env, pod.Name); err != nil {
				a.fail(fmt.Sprintf("%s: delete: %v", pod.Name, err))
			}
		}
	}()
	return a
}

func (a *arrivals) fail(msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failed = append(a.failed, msg)
}

// end stops the arrivals after the one running, waits until the last
// ones are gone (their claims unprepared), and returns when each ran and
// what failed, a failed prepare included (the kubelet retries one, so a
// pod that ran may have had one).
func (a *arrivals) end(ctx context.Context, env *testenv.Env) ([]time.Time, []string) {
	close(a.stop)
	<-a.done
	prefix := a.prefix + "-"
	if err := waitPodsGone(ctx, env, prefix); err != nil {
		a.fail(fmt.Sprintf("the arrivals are not gone: %v", err))
	}
	if f, err := failedPrepares(ctx, env, prefix); err != nil {
		a.fail(fmt.Sprintf("list events: %v", err))
	} else {
		for _, m := range f {
			a.fail("failed prepare: " + m)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ran), slices.Clone(a.failed)
}

// watchPod keeps the last log of a driver pod until it is gone.
func watchPod(ctx context.Context, env *testenv.Env, pod *corev1.Pod) (log func() string) {
	var mu sync.Mutex
	last := ""
	go func() {
		for ctx.Err() == nil {
			if l, err := env.ContainerLog(ctx, pod.Namespace, pod.Name, "driver"); err == nil &&
				len(l) >= len(last) {
				mu.Lock()
				last = l
				mu.Unlock()
			}
			if _, err := env.Client.CoreV1().Pods(pod.Namespace).Get(
				ctx, pod.Name, metav1.GetOptions{},
			); apierrors.IsNotFound(
				err,
			) {
				// Gone: its log file may still be on the node.
				if l, err := env.ContainerLog(ctx, pod.Namespace, pod.Name, "driver"); err == nil &&
					len(l) >= len(last) {
					mu.Lock()
					last = l
					mu.Unlock()
				}
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// jsonLines parses a driver log of --logging-format=json: every line a
// JSON object with a msg.
func jsonLines(t *testing.T, what, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil || e["msg"] == nil {
			t.Errorf("%s: a log line is not a JSON entry (logging.format=json): %q", what, line)
			continue
		}
		out = append(out, e)
	}
	return out
}

// stoppedCleanly checks that a driver's JSON log ends with its clean stop:
// "Driver stopping" and no error after it (component-base's JSON errors
// have no "v").
func stoppedCleanly(t *testing.T, what, log string) {
	t.Helper()
	entries := jsonLines(t, what, log)
	stop := slices.IndexFunc(
		entries,
		func(e map[string]any) bool { return e["msg"] == "Driver stopping" },
	)
	if stop < 0 {
		t.Errorf(
			"%s: no \"Driver stopping\" in its log (last lines %v)",
			what,
			entries[max(0, len(entries)-5):],
		)
		return
	}
	for _, e := range entries[stop:] {
		if _, info := e["v"]; !info {
			t.Errorf("%s: an error after it was told to stop: %v", what, e)
		}
	}
}

// held is what the holder pods hold: their claims' allocations, the CDI
// specs and the MIG devices.
type held struct {
	allocations map[string]string // pod -> allocated devices
	cdi         []string
	mig         map[string]string
}

func holdings(
	t *testing.T,
	ctx context.Context,
	env *testenv.Env,
	stateFile string,
	holders []deploy.Workload,
) held {
	t.Helper()
	h := held{
		allocations: map[string]string{},
		cdi:         cdiSpecs(t, env),
		mig:         migInstances(t, stateFile),
	}
	for _, w := range holders {
		p, err := env.Client.CoreV1().Pods(storyNS).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 ||
			p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf(
				"holder %s: phase %s, container %+v",
				w.Name,
				p.Status.Phase,
				p.Status.ContainerStatuses,
			)
		}
		c, err := podClaim(ctx, env, p)
		if err != nil {
			t.Fatal(err)
		}
		var devs []string
		for _, r := range c.Status.Allocation.Devices.Results {
			devs = append(devs, r.Device)
		}
		h.allocations[w.Name] = strings.Join(devs, ",") + " " + string(c.UID)
	}
	return h
}

// TestUpgrade runs the chart's seamless rolling update on the real node
// while pods hold claims and new pods keep arriving, then a downgrade to
// the previous image, and the admission webhook's configuration check,
// which the upgrade makes fail closed. The chart's defaults: the dynamic
// GPUs' placements publication; the webhook runs from the upgrade on.
//
//   - Claims made before the chart (and its webhook) was installed: the
//     driver's prepare refuses each bad configuration; the kubelet's
//     event carries its message.
//   - helm upgrade to a new image (and the webhook's failurePolicy
//     Fail): the new pod starts
//     beside the old one (maxSurge), the old one stops only once the new
//     one is ready, and cleanly. Meanwhile pods arrive one after the
//     other, each with a MIG device made at prepare: every one runs (the
//     count is logged), none fails a prepare; the holders keep their
//     claims, CDI specs and MIG devices.
//   - The webhook then refuses each bad configuration with the message
//     prepare gave, and allows the correct one and another driver's.
//   - The driver logs JSON lines (logging.format=json).
//   - helm upgrade back to the previous image: the same, the previous
//     image reading the state the new one wrote, and it unprepares the
//     holders after.
func TestUpgrade(t *testing.T) {
	t.Parallel() // a real node of its own (the host runs two at once)
	env := testenv.Start(t, testenv.WithRealNode())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	values := append(deploy.SimulatorValues(), "logging.format=json", "logVerbosity=2")

	// What prepare says, before there is a webhook: the bad
	// configurations' claims are made before the chart is installed
	// (with migPublication=layout the chart runs the webhook from the
	// start). One full GPU each.
	for _, c := range admissionCases {
		name := "prepare-" + c.name
		w := deploy.Story(storyNS, env.BusyboxImage)[0] // one full GPU
		tmpl := w.Template.DeepCopy()
		tmpl.Name, tmpl.Spec.Spec = name, c.spec()
		pod := w.Pod.DeepCopy()
		pod.Name = name
		pod.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(name)
		if _, err := env.Client.ResourceV1().ResourceClaimTemplates(storyNS).Create(
			ctx, tmpl, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.CoreV1().Pods(storyNS).Create(
			ctx, pod, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		// The claim, made from the template by the resource claim
		// controller, exists before the webhook does.
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(storyNS).Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(p.Status.ResourceClaimStatuses) > 0 &&
				p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil, nil
		}); err != nil {
			t.Fatalf("%s: no claim made from its template: %v", name, err)
		}
	}
	in := install(t, ctx, env, deploy.DriverPackage, deploy.Image, values...)
	defer func() {
		if t.Failed() {
			in.dumpDriver(t)
		}
	}()
	tarball := filepath.Join(t.TempDir(), "next.tar")
	if _, err := deploy.BuildImage(ctx, deploy.DriverPackage, nextImage, tarball); err != nil {
		t.Fatal(err)
	}
	if err := env.ImportImage(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	stateFile := filepath.Join(in.stateDir, "state.json")
	if err := poll(
		ctx,
		time.Minute,
		func(ctx context.Context) (bool, error) { return len(deviceUUIDs(t, ctx, env)) > 0, nil },
	); err != nil {
		t.Fatalf("the driver published no devices: %v", err)
	}
	static := migInstances(t, stateFile)

	// What prepare said of the claims made before the webhook.
	prepared := map[string]string{}
	for _, c := range admissionCases {
		name := "prepare-" + c.name
		if c.wantErr == "" {
			if _, _, err := waitSeen(ctx, env, name); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		} else if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			for _, m := range podEvents(ctx, env, name, "FailedPrepareDynamicResources") {
				prepared[c.name] = m
				return true, nil
			}
			return false, nil
		}); err != nil {
			t.Errorf("%s: no FailedPrepareDynamicResources event: %v", c.name, err)
		}
	}
	for _, c := range admissionCases {
		if err := deletePod(ctx, env, "prepare-"+c.name); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range admissionCases {
		if err := waitPodsGone(ctx, env, "prepare-"+c.name); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}

	// Holders.
	story := map[string]deploy.Workload{}
	for _, w := range deploy.Story(storyNS, env.BusyboxImage) {
		story[w.Name] = w
	}
	var holders []deploy.Workload
	for _, name := range []string{"gpu", "mig-1g", "mig-3g", "mig-pair"} {
		w := story[name]
		holders = append(holders, w)
		if _, err := env.Client.ResourceV1().ResourceClaimTemplates(storyNS).Create(
			ctx, w.Template, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.CoreV1().Pods(storyNS).Create(
			ctx, w.Pod, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range holders {
		if _, _, err := waitSeen(ctx, env, w.Name); err != nil {
			t.Fatal(err)
		}
	}
	before := holdings(t, ctx, env, stateFile, holders)

	// The upgrade, with pods arriving.
	// The upgrade runs the webhook and makes its configuration check
	// fail closed.
	webhook := []string{"webhook.enabled=true", "webhook.failurePolicy=Fail"}
	upgrade := func(to, prefix string) (
		ran, during []time.Time, failed []string, oldLog, newLog string, took time.Duration,
	) {
		t.Helper()
		old, err := in.driverPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		oldLogOf := watchPod(ctx, env, old)
		arr := startArrivals(t, ctx, env, story["mig-1g"], prefix)
		// A few arrivals before, served by the old pod.
		if err := poll(ctx, 3*time.Minute, func(context.Context) (bool, error) {
			arr.mu.Lock()
			defer arr.mu.Unlock()
			return len(arr.ran) >= 2 || len(arr.failed) > 0, nil
		}); err != nil {
			t.Fatalf("arrivals before the upgrade: %v", err)
		}
		t0 := time.Now()
		took = helmUpgrade(t, ctx, in, to, append(slices.Clone(values), webhook...)...)
		if err := waitNewDriverPod(ctx, in, old.UID); err != nil {
			t.Fatal(err)
		}
		if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(deploy.Namespace).Get(
				ctx, old.Name, metav1.GetOptions{},
			)
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("the old driver pod %s is not gone: %v", old.Name, err)
		}
		t1 := time.Now()
		// A few arrivals after, served by the new pod.
		n := 0
		arr.mu.Lock()
		n = len(arr.ran)
		arr.mu.Unlock()
		if err := poll(ctx, 3*time.Minute, func(context.Context) (bool, error) {
			arr.mu.Lock()
			defer arr.mu.Unlock()
			return len(arr.ran) >= n+2 || len(arr.failed) > 0, nil
		}); err != nil {
			t.Errorf("arrivals after the upgrade: %v", err)
		}
		ran, failed = arr.end(ctx, env)
		for _, r := range ran {
			if r.After(t0) && r.Before(t1) {
				during = append(during, r)
			}
		}
		p, err := in.driverPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if newLog, err = env.ContainerLog(ctx, p.Namespace, p.Name, "driver"); err != nil {
			t.Fatal(err)
		}
		if img := p.Spec.Containers[0].Image; img != to {
			t.Errorf("the driver pod runs %s, want %s", img, to)
		}
		return ran, during, failed, oldLogOf(), newLog, took
	}

	ran, during, failed, oldLog, newLog, took := upgrade(nextImage, "arrive-up")
	t.Logf(
		"upgrade to %s: helm upgrade --wait %s; %d pods arrived and ran (a prepare and an "+
			"unprepare each), %d of them while both driver pods ran or the old one stopped; "+
			"failed: %d",
		nextImage,
		took.Round(time.Second),
		len(ran),
		len(during),
		len(failed),
	)
	for _, f := range failed {
		t.Errorf("an arriving pod failed during the upgrade: %s", f)
	}
	if len(during) == 0 {
		t.Error("no pod arrived during the upgrade: it proved nothing")
	}
	stoppedCleanly(t, "the old driver", oldLog)
	if entries := jsonLines(t, "the new driver", newLog); len(entries) == 0 {
		t.Error("the new driver logged nothing")
	}
	after := holdings(t, ctx, env, stateFile, holders)
	if !maps.Equal(before.allocations, after.allocations) || !slices.Equal(before.cdi, after.cdi) ||
		!maps.Equal(before.mig, after.mig) {
		t.Errorf(
			"the holders' claims changed across the upgrade:\nbefore %+v\nafter  %+v",
			before,
			after,
		)
	}
	for _, w := range holders {
		if m := podEvents(ctx, env, w.Name, "FailedPrepareDynamicResources"); len(m) > 0 {
			t.Errorf("holder %s: failed prepares %v", w.Name, m)
		}
	}

	// The webhook the upgrade turned on: each case as kubectl apply would
	// send it.
	claims := env.Client.ResourceV1().ResourceClaims(storyNS)
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: storyNS},
			Spec:       admissionCases[1].spec(),
		}
		_, err := claims.Create(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "denied the request"), nil
	}); err != nil {
		t.Fatalf("the API server does not call the webhook: %v", err)
	}
	for _, c := range admissionCases {
		_, err := claims.Create(
			ctx,
			&resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "admit-" + c.name, Namespace: storyNS},
				Spec:       c.spec(),
			},
			metav1.CreateOptions{},
		)
		_, msg, _ := strings.Cut(fmt.Sprint(err), "denied the request: ")
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.wantErr == "":
		case msg != c.wantErr:
			t.Errorf("%s: %v\nwant refused with %s", c.name, err, c.wantErr)
		case !strings.HasSuffix(prepared[c.name], ": "+msg):
			t.Errorf(
				"%s: the webhook says\n%s\nprepare said (the kubelet's event)\n%s",
				c.name,
				msg,
				prepared[c.name],
			)
		}
	}

	// The downgrade: the previous image reads what the new one wrote.
	ran, during, failed, oldLog, _, took = upgrade(deploy.Image, "arrive-down")
	t.Logf(
		"downgrade to %s: helm upgrade --wait %s; %d pods arrived and ran, %d of them during the "+
			"downgrade; failed: %d",
		deploy.Image,
		took.Round(time.Second),
		len(ran),
		len(during),
		len(failed),
	)
	for _, f := range failed {
		t.Errorf("an arriving pod failed during the downgrade: %s", f)
	}
	stoppedCleanly(t, "the upgraded driver", oldLog)
	if after := holdings(t, ctx, env, stateFile, holders); !maps.Equal(
		before.allocations,
		after.allocations,
	) ||
		!slices.Equal(before.cdi, after.cdi) ||
		!maps.Equal(before.mig, after.mig) {
		t.Errorf(
			"the holders' claims changed across the downgrade:\nbefore %+v\nafter  %+v",
			before,
			after,
		)
	}
	// The previous image unprepares what the upgraded one prepared.
	for _, w := range holders {
		if err := deletePod(ctx, env, w.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := claims.List(ctx, metav1.ListOptions{})
		pending := 0
		for _, c := range l.Items {
			if c.Status.Allocation != nil {
				pending++
			}
		}
		return err == nil && pending == 0 && len(cdiSpecs(t, env)) == 0 &&
			maps.Equal(migInstances(t, stateFile), static), err
	}); err != nil {
		t.Errorf(
			"after the holders: CDI specs %v, MIG devices %v (static %v): %v",
			cdiSpecs(t, env),
			migInstances(t, stateFile),
			static,
			err,
		)
	}
}
