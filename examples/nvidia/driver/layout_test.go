package driver_test

import (
	"context"
	"fmt"
	"math/rand"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/claimwatch"
	"github.com/drakit/drakit/testenv"
)

// TestClassProfile: every profile of every product in the catalog comes
// back from its class and its extended resource.
func TestClassProfile(t *testing.T) {
	for _, p := range mig.Products() {
		for _, pr := range p.Profiles {
			if got, ok := nvdriver.ClassProfile(nvdriver.ProfileClass(pr.Name)); !ok || got != pr.Name {
				t.Errorf("%s: ClassProfile(%s) = %q, %v", p.Name, nvdriver.ProfileClass(pr.Name), got, ok)
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
	for _, c := range []string{nvdriver.ClassMIG, "mig-x.nvidia.drakit.dev", "mig-1g-18gb.example.com", ""} {
		if got, ok := nvdriver.ClassProfile(c); ok {
			t.Errorf("ClassProfile(%q) = %q; want nothing", c, got)
		}
	}
	if got, ok := nvdriver.ExtendedResourceProfile(nvdriver.ExtendedResourceGPU); !ok || got != partition.WholeCard {
		t.Errorf("ExtendedResourceProfile(%s) = %q, %v", nvdriver.ExtendedResourceGPU, got, ok)
	}
}

// TestLayoutStream runs the reference driver with the layout publication
// (WithMIGLayout, a claimwatch.Watcher on the API server) on a fake node
// of a simulated DGX H200 with dynamic MIG on two GPUs (the others full
// GPUs; two, so that the stream keeps re-laying them out), and the real
// kube-scheduler placing a stream of pods, each with one claim: a 1g, 2g
// or 3g MIG device or a whole GPU. The test plays the kubelet: it
// prepares each bound pod's claim a moment after the bind, holds it a moment (so that layouts are
// made around devices in use), unprepares it and ends the pod. Every
// pod must be placed and prepared without an error (NVML refuses an
// instance that overlaps another, so an overlap the scheduler allocated
// would fail a prepare), every published version of every GPU must be a
// valid layout with never the whole GPU beside its MIG devices, and at
// the end no MIG device may be left and every GPU is published whole.
func TestLayoutStream(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const node, ns = "nv-layout", "layout"
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	profiles := []string{"1g.18gb", "1g.18gb", "1g.18gb", "2g.35gb", "2g.35gb", "3g.71gb", ""}
	for _, c := range nvdriver.DeviceClasses(profiles[:6]) {
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for { // pods need the namespace's default ServiceAccount
		if _, err := env.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every version of the node's slices, judged as it comes.
	h200, err := mig.Lookup("NVIDIA H200")
	if err != nil {
		t.Fatal(err)
	}
	var vmu sync.Mutex
	var bad []string
	versions := 0
	sw, err := env.Client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
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

	dir := t.TempDir()
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer("dgx-h200"), nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{0, 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var drv *nvdriver.Driver
	w, err := claimwatch.New(env.Client, nvdriver.DriverName, append(nvdriver.LayoutWatchOptions(),
		claimwatch.WithMaxPerClaim(func(p string) int { return drv.MaxPerClaim(p) }))...)
	if err != nil {
		t.Fatal(err)
	}
	d := runDriver(ctx, t, env, nvdriver.DriverName, node, func(node string) ([]kit.Option, error) {
		var err error
		drv, err = nvdriver.New(sim, node, nvdriver.WithStateDir(filepath.Join(dir, "state")), dynamicMIG([]int{0, 1}), nvdriver.WithMIGLayout(w))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { drv.Close() })
		if err := w.Start(ctx); err != nil {
			return nil, err
		}
		return drv.Options(), nil
	})
	defer d.stop()
	kl, err := drivertest.Dial(d.k.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer kl.Close()

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
	// The kubelet prepares a claim a moment after the pod is bound (it
	// makes the pod's sandbox first): the driver must keep an allocated
	// device out of every re-layout before it is prepared.
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
			go func(name string, delay, hold time.Duration) {
				defer wg.Done()
				defer func() { <-slots }()
				time.Sleep(delay)
				claims := env.Client.ResourceV1().ResourceClaims(ns)
				claim, err := claims.Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					if _, err = kl.Prepare(ctx, claim); err == nil {
						time.Sleep(hold)
						err = kl.Unprepare(ctx, claim)
					}
				}
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("pod %s: %v", name, err))
					mu.Unlock()
				}
				_ = env.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				_ = claims.Delete(ctx, name, metav1.DeleteOptions{})
			}(p.Name, delays[i], holds[i])
		}
	}()
	take := func() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the stream did not finish: %v; %d pods handled; failures: %v", ctx.Err(), len(handled), failures)
		}
	}
	for i := range pods {
		take()
		name := fmt.Sprintf("p-%04d", i)
		class := nvdriver.ClassGPU
		if prof := profiles[rng.Intn(len(profiles))]; prof != "" {
			class = nvdriver.ProfileClass(prof)
		}
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class},
			}}}},
		}
		if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
				NodeSelector:   map[string]string{"kubernetes.io/hostname": node},
			},
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
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

	// Idle again: no MIG device left, every GPU published whole.
	deadline := time.Now().Add(time.Minute)
	for {
		sl, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range sl.Items {
			for _, dv := range s.Spec.Devices {
				names = append(names, dv.Name)
			}
		}
		left := 0
		for g := range 8 {
			gis, err := sim.GPUInstances(g)
			if err != nil {
				t.Fatal(err)
			}
			left += len(gis)
		}
		if len(sl.Items) == 1 && len(names) == 8 && !strings.Contains(strings.Join(names, ","), "g-") && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle a minute after the stream: %d slices, devices %v, %d MIG devices left", len(sl.Items), names, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	vmu.Lock()
	defer vmu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d pods, %d slice versions", pods, versions)
}

// judgeLayoutSlice says what is wrong with one version of a layout slice:
// "" when it is one slice of its pool, has no counters, and each GPU's
// devices are its whole device alone or a valid MIG layout.
func judgeLayoutSlice(p *mig.Product, s *resourceapi.ResourceSlice) string {
	if s.Spec.Pool.ResourceSliceCount != 1 || len(s.Spec.SharedCounters) > 0 {
		return fmt.Sprintf("slice %s: %d slices in its pool, %d counter sets", s.Name, s.Spec.Pool.ResourceSliceCount, len(s.Spec.SharedCounters))
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
		layouts[ref.GPU] = append(layouts[ref.GPU], mig.Instance{Profile: ref.Profile, Start: ref.Start})
	}
	for g, l := range layouts {
		if whole[g] {
			return fmt.Sprintf("slice %s (generation %d): GPU %d published whole beside %s", s.Name, s.Spec.Pool.Generation, g, l)
		}
		if err := p.Validate(l); err != nil {
			return fmt.Sprintf("slice %s (generation %d): GPU %d: %v", s.Name, s.Spec.Pool.Generation, g, err)
		}
	}
	return ""
}

// TestLayoutRestart: a restarted driver starts from what the node
// published before (claimwatch.WithPublished, LayoutPublisher.Restore)
// instead of laying its GPUs out afresh, so a restart renames no device.
// Dynamic GPU 0 is laid out as seven 1g devices for a pending claim; one
// of them is allocated and prepared, the pending claim goes (its free 1g
// devices stay: they still fit); the driver restarts. The new process's
// publication must be the same seven devices, where a fresh layout would
// fill the GPU around the prepared 1g with the default mix.
func TestLayoutRestart(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const node, ns = "nv-restart", "default"
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer("dgx-h200"), nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{0}}))
	if err != nil {
		t.Fatal(err)
	}
	claims := env.Client.ResourceV1().ResourceClaims(ns)
	claimOf := func(name string, n int64) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ProfileClass("1g.18gb"),
					AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}}}}}}
	}
	if _, err := claims.Create(ctx, claimOf("more", 7), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := func() *benchDriver { return startLayoutDriver(ctx, t, env, sim, node, filepath.Join(dir, "state"), 0) }
	// gpu0 is GPU 0's published devices, sorted.
	gpu0 := func() []string { return gpuPublished(ctx, t, env, node, 0) }
	until := func(what string, ok func([]string) bool) []string {
		t.Helper()
		for {
			if g := gpu0(); ok(g) {
				return g
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: GPU 0 publishes %v", what, gpu0())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	seven := func(g []string) bool { return len(g) == 7 && !slices.Contains(g, "gpu-0") }

	d := start()
	until("seven 1g devices", seven)
	held, err := claims.Create(ctx, claimOf("held", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "mig", Driver: nvdriver.DriverName, Pool: node, Device: "gpu-0-1g-18gb-0"}}}}
	if held, err = claims.UpdateStatus(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kl, err := drivertest.Dial(d.k.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kl.Prepare(ctx, held); err != nil {
		t.Fatal(err)
	}
	kl.Close()
	if err := claims.Delete(ctx, "more", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := until("the pending claim gone", func(g []string) bool { return seven(g) })
	time.Sleep(2 * partition.DefaultFence) // any re-layout the deletion caused is published by now
	if g := gpu0(); !slices.Equal(g, before) {
		t.Fatalf("the first process changed GPU 0 after the pending claim went: %v, was %v", g, before)
	}
	d.stop()

	d = start()
	defer d.stop()
	select {
	case <-d.k.Published():
	case <-ctx.Done():
		t.Fatal("the restarted driver did not publish")
	}
	time.Sleep(2 * partition.DefaultFence) // and a fence's re-layout too
	if g := gpu0(); !slices.Equal(g, before) {
		t.Errorf("after the restart GPU 0 publishes %v; before it %v", g, before)
	}
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
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer("dgx-h200"), nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{0, 1}}))
	if err != nil {
		t.Fatal(err)
	}
	claims := env.Client.ResourceV1().ResourceClaims(ns)
	old, err := claims.Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "placed"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ProfileClass("1g.18gb")}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "mig", Driver: nvdriver.DriverName, Pool: mig.GPUPoolName(node, 0), Device: "gpu-0-1g-18gb-0"}}}}
	if _, err := claims.UpdateStatus(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	d := startLayoutDriver(ctx, t, env, sim, node, filepath.Join(dir, "state"), 0, 1)
	defer d.stop()
	select {
	case <-d.k.Published():
	case <-ctx.Done():
		t.Fatal("the driver did not publish")
	}
	published := func(gpu int) []string { return gpuPublished(ctx, t, env, node, gpu) }
	time.Sleep(2 * partition.DefaultFence) // any later version is out by now
	if g := published(0); len(g) > 0 {
		t.Errorf("GPU 0, whose device a claim holds through pool %s, publishes %v", mig.GPUPoolName(node, 0), g)
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

// startLayoutDriver runs the reference driver for node on sim with the
// layout publication of the dynamic GPUs gpus, its claimwatch.Watcher as
// drivercmd sets it up (the published pool read at start, the driver's
// per-claim limit); stop also closes the driver.
func startLayoutDriver(ctx context.Context, t *testing.T, env *testenv.Env, sim *nvmlsim.Sim, node, stateDir string, gpus ...int) *benchDriver {
	t.Helper()
	var drv *nvdriver.Driver
	w, err := claimwatch.New(env.Client, nvdriver.DriverName, append(nvdriver.LayoutWatchOptions(), claimwatch.WithPublished(node),
		claimwatch.WithMaxPerClaim(func(p string) int { return drv.MaxPerClaim(p) }))...)
	if err != nil {
		t.Fatal(err)
	}
	d := runDriver(ctx, t, env, nvdriver.DriverName, node, func(node string) ([]kit.Option, error) {
		var err error
		if drv, err = nvdriver.New(sim, node, nvdriver.WithStateDir(stateDir), dynamicMIG(gpus), nvdriver.WithMIGLayout(w)); err != nil {
			return nil, err
		}
		wctx, wcancel := context.WithCancel(ctx)
		t.Cleanup(wcancel)
		if err := w.Start(wctx); err != nil {
			return nil, err
		}
		return drv.Options(), nil
	})
	stop := d.stop
	d.stop = func() { stop(); drv.Close() }
	return d
}

// gpuPublished returns the names of node's published devices of GPU gpu
// (the counter model's names), sorted.
func gpuPublished(ctx context.Context, t *testing.T, env *testenv.Env, node string, gpu int) []string {
	t.Helper()
	l, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
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
