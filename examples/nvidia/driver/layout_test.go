package driver_test

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/fleet"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/testenv"
)

// TestClassProfile: every profile of every product in the catalog comes
// back from its class and its extended resource.
func TestClassProfile(t *testing.T) {
	for _, p := range mig.Products() {
		for _, pr := range p.Profiles {
			if got, ok := nvdriver.ClassProfile(nvdriver.ProfileClass(pr.Name)); !ok ||
				got != pr.Name {
				t.Errorf(
					"%s: ClassProfile(%s) = %q, %v",
					p.Name,
					nvdriver.ProfileClass(pr.Name),
					got,
					ok,
				)
			}
			er := corev1.ResourceName(nvdriver.ProfileExtendedResource(pr.Name))
			if got, ok := nvdriver.ExtendedResourceProfile(er); !ok || got != pr.Name {
				t.Errorf("%s: ExtendedResourceProfile(%s) = %q, %v", p.Name, er, got, ok)
			}
		}
	}
	for _, c := range []string{nvdriver.ClassGPU} {
		if got, ok := nvdriver.ClassProfile(c); !ok || got != partition.WholeCard {
			t.Errorf("ClassProfile(%s) = %q, %v; want the whole card", c, got, ok)
		}
	}
	for _, c := range []string{
		nvdriver.ClassMIG, "mig-x.nvidia.drakit.dev", "mig-1g-18gb.example.com", "",
	} {
		if got, ok := nvdriver.ClassProfile(c); ok {
			t.Errorf("ClassProfile(%q) = %q; want nothing", c, got)
		}
	}
	if got, ok := nvdriver.ExtendedResourceProfile(nvdriver.ExtendedResourceGPU); !ok ||
		got != partition.WholeCard {
		t.Errorf("ExtendedResourceProfile(%s) = %q, %v", nvdriver.ExtendedResourceGPU, got, ok)
	}
}

// TestLayoutTwoInstances runs the reference driver's layout publication
// as the chart runs it, on a real API server with the real
// kube-scheduler: two driver instances on one node (a rolling update's
// surge: one simulated DGX H200, dynamic MIG on two GPUs so that the
// stream keeps re-laying them out, one MIG journal shared), each with
// its ledger agent, the fleet planner, and the layout webhook
// (admission.LayoutGuard, failure policy Fail). A stream of 40 pods, each
// with one claim (a 1g, 2g or 3g MIG device or a whole GPU), is placed by
// the scheduler; the test plays the kubelet, preparing each bound pod's
// claim on one of the two instances a moment after the bind, holding it
// a moment, unpreparing it and ending the pod. The planner is restarted
// after a third of the pods and instance A after two thirds. Every pod
// must be placed and prepared (NVML refuses an instance that overlaps
// another: a pod stuck on an allocation that cannot be prepared fails
// the test), the allocations committed must never overlap (every claim
// event checked), every published version of every GPU must be a valid
// layout with never the whole GPU beside its MIG devices, and at the end
// no MIG device may be left and every GPU is published whole.
func TestLayoutTwoInstances(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const node, ns = "nv-layout", "layout"
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	profiles := []string{"1g.18gb", "1g.18gb", "1g.18gb", "2g.35gb", "2g.35gb", "3g.71gb", ""}
	for _, c := range nvdriver.DeviceClasses(profiles[:6]) {
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(
			ctx, c, metav1.CreateOptions{},
		); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(
		ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	for { // pods need the namespace's default ServiceAccount
		if _, err := env.Client.CoreV1().ServiceAccounts(ns).Get(
			ctx, "default", metav1.GetOptions{},
		); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	startLayoutWebhook(ctx, t, env)

	// Every version of the node's slices, and every claim's allocation,
	// judged as they come.
	h200, err := mig.Lookup("NVIDIA H200")
	if err != nil {
		t.Fatal(err)
	}
	var vmu sync.Mutex
	var bad []string
	versions := 0
	sw, err := env.Client.ResourceV1().
		ResourceSlices().
		Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()
	go func() {
		for ev := range sw.ResultChan() {
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			msg := judgeLayoutSlice(h200, s)
			vmu.Lock()
			versions++
			if msg != "" && len(bad) < 10 {
				bad = append(bad, msg)
			}
			vmu.Unlock()
		}
	}()
	cw, err := env.Client.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Stop()
	go func() {
		allocated := map[string][]string{} // claim -> devices
		for ev := range cw.ResultChan() {
			c, ok := ev.Object.(*resourceapi.ResourceClaim)
			if !ok {
				continue
			}
			delete(allocated, c.Name)
			if ev.Type != watch.Deleted && c.Status.Allocation != nil {
				for _, r := range c.Status.Allocation.Devices.Results {
					allocated[c.Name] = append(allocated[c.Name], r.Device)
				}
			}
			var all []string
			for _, d := range allocated {
				all = append(all, d...)
			}
			if msg := overlapping(h200, all); msg != "" {
				vmu.Lock()
				bad = append(bad, "committed allocations overlap: "+msg)
				vmu.Unlock()
			}
		}
	}()

	dir := t.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{0, 1}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	stopPlanner := startPlanner(ctx, t, env)
	state := filepath.Join(dir, "state")
	var imu sync.Mutex
	dirA := t.TempDir()
	inst := [2]*benchDriver{
		startLayoutDriverAt(ctx, t, env, sim, node, state, dirA, true, 0, 1),
		startLayoutDriver(ctx, t, env, sim, node, state, true, 0, 1),
	}
	defer func() {
		imu.Lock()
		defer imu.Unlock()
		for _, d := range inst {
			d.stop()
		}
	}()

	const pods, conc = 40, 8
	var mu sync.Mutex
	var failures []string
	handled := map[string]bool{}
	slots := make(chan struct{}, conc)
	var wg sync.WaitGroup
	pwatch, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pwatch.Stop()
	rng := rand.New(rand.NewSource(1))
	delays, holds := make([]time.Duration, pods), make([]time.Duration, pods)
	for i := range holds {
		delays[i] = time.Duration(500+rng.Intn(1500)) * time.Millisecond
		holds[i] = time.Duration(rng.Intn(1500)) * time.Millisecond
	}
	go func() {
		for ev := range pwatch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			if handled[p.Name] {
				mu.Unlock()
				continue
			}
			handled[p.Name] = true
			mu.Unlock()
			var i int
			fmt.Sscanf(p.Name, "p-%d", &i)
			wg.Add(1)
			go func(name string, i int) {
				defer wg.Done()
				defer func() { <-slots }()
				time.Sleep(delays[i])
				// The kubelet calls the instance's socket: the same path
				// after a restart.
				call := func(f func(kl *drivertest.Kubelet) error) error {
					imu.Lock()
					d := inst[i%2]
					imu.Unlock()
					kl, err := drivertest.Dial(d.k.DRASocket())
					if err != nil {
						return err
					}
					defer kl.Close()
					return f(kl)
				}
				claims := env.Client.ResourceV1().ResourceClaims(ns)
				claim, err := claims.Get(ctx, name, metav1.GetOptions{})
				// A call that reached instance A just before its restart
				// finds no socket: the kubelet tries the prepare again.
				for try := 0; err == nil; try++ {
					err = call(
						func(kl *drivertest.Kubelet) error {
							_, err := kl.Prepare(ctx, claim)
							return err
						},
					)
					if status.Code(err) != codes.Unavailable || try == 49 {
						break
					}
					err = nil
					time.Sleep(100 * time.Millisecond)
				}
				if err == nil {
					time.Sleep(holds[i])
					for try := 0; try < 50; try++ { // an instance restarting meanwhile
						unprepare := func(kl *drivertest.Kubelet) error {
							return kl.Unprepare(ctx, claim)
						}
						if err = call(unprepare); err == nil {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("pod %s: %v", name, err))
					mu.Unlock()
				}
				_ = env.Client.CoreV1().
					Pods(ns).
					Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				_ = claims.Delete(ctx, name, metav1.DeleteOptions{})
			}(p.Name, i)
		}
	}()
	take := func() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf(
				"the stream did not finish: %v; %d pods handled; failures: %v",
				ctx.Err(),
				len(handled),
				failures,
			)
		}
	}
	for i := range pods {
		take()
		switch i {
		case pods / 3:
			stopPlanner()
			stopPlanner = startPlanner(ctx, t, env)
			t.Logf("pod %d: the planner restarted", i)
		case 2 * pods / 3:
			// Instance A restarts: its prepares wait for it.
			imu.Lock()
			inst[0].stop()
			inst[0] = startLayoutDriverAt(ctx, t, env, sim, node, state, dirA, true, 0, 1)
			imu.Unlock()
			t.Logf("pod %d: instance A restarted", i)
		}
		name := fmt.Sprintf("p-%04d", i)
		class := nvdriver.ClassGPU
		if prof := profiles[rng.Intn(len(profiles))]; prof != "" {
			class = nvdriver.ProfileClass(prof)
		}
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class},
				}}},
			},
		}
		if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(
			ctx, claim, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{
					{
						Name:  "c",
						Image: "busybox",
						Resources: corev1.ResourceRequirements{
							Claims: []corev1.ResourceClaim{{Name: "gpu"}},
						},
					},
				},
				ResourceClaims: []corev1.PodResourceClaim{
					{Name: "gpu", ResourceClaimName: ptr.To(name)},
				},
				NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			},
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(
			ctx, pod, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	for range conc { // every pod bound and ended
		take()
	}
	wg.Wait()
	mu.Lock()
	for _, f := range failures {
		t.Error(f)
	}
	mu.Unlock()

	// Idle again: no MIG device left, every dynamic GPU published whole.
	deadline := time.Now().Add(time.Minute)
	for {
		names := layoutPublished(ctx, t, env, node)
		left := 0
		for g := range 8 {
			gis, err := sim.GPUInstances(g)
			if err != nil {
				t.Fatal(err)
			}
			left += len(gis)
		}
		if slices.Equal(names, []string{"gpu-0", "gpu-1"}) && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf(
				"not idle a minute after the stream: layout devices %v, %d MIG devices left",
				names,
				left,
			)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopPlanner()
	vmu.Lock()
	defer vmu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d pods, %d slice versions", pods, versions)
}

// overlapping says which of the devices (MIG device names of one node)
// overlap on a GPU, "" when none do.
func overlapping(p *mig.Product, names []string) string {
	parts := map[int]mig.Layout{}
	whole := map[int]int{}
	for _, n := range names {
		ref, err := mig.ParseDeviceName(n)
		if err != nil {
			continue
		}
		if ref.Profile == "" {
			whole[ref.GPU]++
			continue
		}
		parts[ref.GPU] = append(
			parts[ref.GPU],
			mig.Instance{Profile: ref.Profile, Start: ref.Start},
		)
	}
	for g := range 8 {
		if whole[g] > 1 || whole[g] == 1 && len(parts[g]) > 0 {
			return fmt.Sprintf("GPU %d whole beside %v", g, parts[g])
		}
		if err := p.Validate(parts[g]); err != nil {
			return fmt.Sprintf("GPU %d: %v", g, err)
		}
	}
	return ""
}

// judgeLayoutSlice says what is wrong with one version of a layout slice:
// "" when it is one slice of its pool, has no counters, and each GPU's
// devices are its whole device alone or a valid MIG layout.
func judgeLayoutSlice(p *mig.Product, s *resourceapi.ResourceSlice) string {
	if s.Spec.Pool.ResourceSliceCount != 1 || len(s.Spec.SharedCounters) > 0 {
		return fmt.Sprintf(
			"slice %s: %d slices in its pool, %d counter sets",
			s.Name,
			s.Spec.Pool.ResourceSliceCount,
			len(s.Spec.SharedCounters),
		)
	}
	whole := map[int]bool{}
	layouts := map[int]mig.Layout{}
	for _, dv := range s.Spec.Devices {
		if len(dv.ConsumesCounters) > 0 {
			return fmt.Sprintf("slice %s: device %s consumes counters", s.Name, dv.Name)
		}
		ref, err := mig.ParseDeviceName(dv.Name)
		if err != nil {
			return fmt.Sprintf("slice %s: %v", s.Name, err)
		}
		if ref.Profile == "" {
			whole[ref.GPU] = true
			continue
		}
		layouts[ref.GPU] = append(
			layouts[ref.GPU],
			mig.Instance{Profile: ref.Profile, Start: ref.Start},
		)
	}
	for g, l := range layouts {
		if whole[g] {
			return fmt.Sprintf(
				"slice %s (generation %d): GPU %d published whole beside %s",
				s.Name,
				s.Spec.Pool.Generation,
				g,
				l,
			)
		}
		if err := p.Validate(l); err != nil {
			return fmt.Sprintf(
				"slice %s (generation %d): GPU %d: %v",
				s.Name,
				s.Spec.Pool.Generation,
				g,
				err,
			)
		}
	}
	return ""
}

// TestLayoutSwitch: a driver switched from the placements publication to
// the layout (the chart's default changed under it) while a claim holds
// a device of a dynamic GPU through the placements' pool of that GPU
// publishes nothing of that GPU: the layout would list the same MIG
// device in its own pool, a device the scheduler sees as free, and it
// could be allocated twice. Once the claim is gone the GPU is published
// again.
func TestLayoutSwitch(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const node, ns = "nv-switch", "default"
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{0, 1}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	claims := env.Client.ResourceV1().ResourceClaims(ns)
	old, err := claims.Create(
		ctx,
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "placed"},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "mig",
					Exactly: &resourceapi.ExactDeviceRequest{
						DeviceClassName: nvdriver.ProfileClass("1g.18gb"),
					}}}},
			}},
		metav1.CreateOptions{},
	)
	if err != nil {
		t.Fatal(err)
	}
	old.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{
				{
					Request: "mig",
					Driver:  nvdriver.DriverName,
					Pool:    mig.GPUPoolName(node, 0),
					Device:  "gpu-0-1g-18gb-0",
				}},
		},
		NodeSelector: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchFields: []corev1.NodeSelectorRequirement{
					{
						Key:      "metadata.name",
						Operator: corev1.NodeSelectorOpIn,
						Values:   []string{node},
					}}},
			},
		},
	}
	if _, err := claims.UpdateStatus(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	defer startPlanner(ctx, t, env)()
	d := startLayoutDriver(ctx, t, env, sim, node, filepath.Join(dir, "state"), false, 0, 1)
	defer d.stop()
	select {
	case <-d.k.Published():
	case <-ctx.Done():
		t.Fatal("the driver did not publish")
	}
	published := func(gpu int) []string { return gpuPublished(ctx, t, env, node, gpu) }
	time.Sleep(2 * time.Second) // any later version is out by now
	if g := published(0); len(g) > 0 {
		t.Errorf(
			"GPU 0, whose device a claim holds through pool %s, publishes %v",
			mig.GPUPoolName(node, 0),
			g,
		)
	}
	if g := published(1); len(g) == 0 {
		t.Errorf("GPU 1, which no claim holds, publishes nothing")
	}

	if err := claims.Delete(ctx, "placed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for len(published(0)) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("GPU 0 is not published again after the claim went")
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("GPU 0 after the claim went: %v", published(0))
}

// layoutNamespace holds the layout ledgers in these tests.
const layoutNamespace = "kube-system"

// startLayoutDriver runs the reference driver for node on sim with the
// layout publication of the dynamic GPUs gpus, its ledger agent as
// drivercmd sets it up (rolling: sharing the state folder with another
// instance); stop also closes the driver.
func startLayoutDriver(
	ctx context.Context,
	t testing.TB,
	env *testenv.Env,
	sim *nvmlsim.Sim,
	node, stateDir string,
	rolling bool,
	gpus ...int,
) *benchDriver {
	t.Helper()
	return startLayoutDriverAt(ctx, t, env, sim, node, stateDir, t.TempDir(), rolling, gpus...)
}

// startLayoutDriverAt is startLayoutDriver with the runtime's folders
// (plugin data, registration, CDI) in dir: the same dir again is the
// same instance restarted.
func startLayoutDriverAt(
	ctx context.Context,
	t testing.TB,
	env *testenv.Env,
	sim *nvmlsim.Sim,
	node, stateDir, dir string,
	rolling bool,
	gpus ...int,
) *benchDriver {
	t.Helper()
	store, err := ledger.NewStore(env.Client, layoutNamespace, nvdriver.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := ledger.NewAgent(store, node, nvdriver.LayoutOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	opts := []nvdriver.Option{
		nvdriver.WithStateDir(stateDir),
		dynamicMIG(gpus),
		nvdriver.WithMIGLayout(agent),
	}
	if rolling {
		opts = append(opts, nvdriver.WithRollingUpdate("layout-test/nvidia-dra-driver"))
	}
	drv, err := nvdriver.New(sim, node, opts...)
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan struct{})
	go func() { _ = agent.Run(wctx, synced) }()
	<-synced
	k, err := kit.New(
		nvdriver.DriverName,
		append(
			drv.Options(),
			kit.WithRESTConfig(env.RESTConfig),
			kit.WithNodeName(node),
			kit.WithRegistrarDir(
				filepath.Join(dir, "reg"),
			),
			kit.WithPluginDataDir(filepath.Join(dir, "plugin")),
			kit.WithCDIDir(filepath.Join(dir, "cdi")),
		)...)
	if err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- k.Run(kctx) }()
	select {
	case <-k.Ready():
	case err := <-done:
		t.Fatalf("driver stopped: %v", err)
	}
	var once sync.Once
	d := &benchDriver{k: k, node: node, stop: func() {
		once.Do(func() { kcancel(); <-done; wcancel(); drv.Close() })
	}}
	t.Cleanup(d.stop)
	return d
}

// startPlanner runs the fleet planner of the reference driver's ledgers
// until stop.
func startPlanner(ctx context.Context, t testing.TB, env *testenv.Env) (stop func()) {
	t.Helper()
	store, err := ledger.NewStore(env.Client, layoutNamespace, nvdriver.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fleet.New(env.Client, store, nvdriver.DriverName, append(nvdriver.PlannerOptions(),
		fleet.WithInterval(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("planner: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startLayoutWebhook serves the layout webhook (admission.LayoutGuard)
// on a free local port, registered with failure policy Fail.
func startLayoutWebhook(ctx context.Context, t testing.TB, env *testenv.Env) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	g, err := admission.NewLayoutGuard(env.Client, nvdriver.DriverName, layoutNamespace)
	if err != nil {
		t.Fatal(err)
	}
	const cfg = "layout-webhook"
	vwc := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg},
		Webhooks: []admissionregv1.ValidatingWebhook{admission.LayoutWebhook(
			nvdriver.DriverName,
			admissionregv1.WebhookClientConfig{
				URL: ptr.To("https://" + addr + admission.LayoutPath),
			},
			admissionregv1.Fail,
		)}}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(
		ctx, vwc, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	srv, err := admission.NewServer(
		nil,
		admission.WithAddress(addr),
		admission.WithLayoutGuard(g),
		admission.WithDrain(0),
		admission.WithSelfSignedCert(
			admission.SelfSigned{Client: env.Client, Namespace: layoutNamespace,
				Secret: "layout-webhook-tls", WebhookConfiguration: cfg,
				IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}},
		),
	)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-srv.Started():
	case err := <-done:
		t.Fatalf("layout webhook: %v", err)
	}
}

// layoutPublished returns the names of node's published layout devices
// (its pool <node>/layout), sorted.
func layoutPublished(ctx context.Context, t testing.TB, env *testenv.Env, node string) []string {
	t.Helper()
	l, err := env.Client.ResourceV1().
		ResourceSlices().
		List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		if s.Spec.Pool.Name != ledger.PoolName(node) {
			continue
		}
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// gpuPublished returns the names of node's published devices of GPU gpu
// (the counter model's names), sorted.
func gpuPublished(
	ctx context.Context,
	t testing.TB,
	env *testenv.Env,
	node string,
	gpu int,
) []string {
	t.Helper()
	l, err := env.Client.ResourceV1().
		ResourceSlices().
		List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			if ref, err := mig.ParseDeviceName(d.Name); err == nil && ref.GPU == gpu {
				out = append(out, d.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}
