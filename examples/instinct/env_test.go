package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/testenv"
)

// TestConformance runs drakit's conformance suite against the driver as a
// process on a fake node of two cards, with a claim of the driver's own:
// two CPX/NPS4 partitions. Every check must pass or skip.
func TestConformance(t *testing.T) {
	env := testenv.Start(t)
	root, _ := machine(t, 2)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := env.ConformanceConfig(DriverName)
	c.StartCommand = append([]string{self, "--sysfs-root", root, "--state-dir",
		filepath.Join(t.TempDir(), "state")}, env.DriverArgs(DriverName)...)
	c.StartEnv = []string{runAsDriver + "=1"}
	attrs := `device.attributes["` + DriverName + `"]`
	sel := attrs + `.type == "xcp" && ` + attrs + `.profile == "CPX/NPS4"`
	two := &resourceapi.ExactDeviceRequest{Count: 2,
		Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: sel}}}}
	c.ExtraClaims = []resourceapi.ResourceClaimSpec{{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "xcps", Exactly: two}}}}}
	rep := conformance.Test(t, c)
	counts := map[conformance.Status]int{}
	for _, res := range rep.Results {
		counts[res.Status]++
	}
	t.Logf("conformance: %v", counts)
}

func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestPartitionAtPrepare runs the driver in-process on a fake node of two
// cards with its DeviceClasses, has the real scheduler allocate, and
// plays the kubelet: a claim for a CPX/NPS4 partition gets one, made at
// prepare (card 0 goes from SPX to CPX/NPS4) and destroyed at unprepare;
// card 0 then publishes only what still fits (CPX/NPS4 partitions); an
// unchanged pod asking for amd.com/gpu gets card 1 whole; a claim with a
// bad XCPConfig fails its prepare with the config's message and leaves
// nothing behind.
func TestPartitionAtPrepare(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	root, ids := machine(t, 2)
	d := open(t, env.NodeName, root, filepath.Join(t.TempDir(), "state"))
	opts := append(env.DriverOptions(DriverName), driver.WithDiscoverer(d), driver.WithPreparer(d))
	rt, err := driver.New(DriverName, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	}()
	for _, c := range DeviceClasses() {
		dc, err := c.DeviceClass()
		if err == nil {
			_, err = env.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.WaitForPools(ctx, DriverName); err != nil {
		t.Fatal(err)
	}
	kubelet, err := drivertest.Dial(filepath.Join(env.PluginDataDir(DriverName), "dra.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()

	// schedule creates a pod (with a claim of class, or asking for the
	// extended resource) and returns its allocated claim.
	claims := env.Client.ResourceV1().ResourceClaims("default")
	pods := env.Client.CoreV1().Pods("default")
	schedule := func(name, class, extended, config string) *resourceapi.ResourceClaim {
		t.Helper()
		meta := metav1.ObjectMeta{Name: name, Namespace: "default"}
		pod := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "unused"}}}}
		claimName := name
		if extended != "" {
			one := corev1.ResourceList{corev1.ResourceName(extended): resource.MustParse("1")}
			pod.Spec.Containers[0].Resources.Limits = one
		} else {
			req := &resourceapi.ExactDeviceRequest{DeviceClassName: class}
			reqs := []resourceapi.DeviceRequest{{Name: "xcp", Exactly: req}}
			cl := &resourceapi.ResourceClaim{ObjectMeta: meta, Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: reqs}}}
			if config != "" {
				opaque := &resourceapi.OpaqueDeviceConfiguration{Driver: DriverName,
					Parameters: runtime.RawExtension{Raw: []byte(config)}}
				cl.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{
					{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaque}}}
			}
			if _, err := claims.Create(ctx, cl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			use := corev1.PodResourceClaim{Name: "xcp", ResourceClaimName: &cl.Name}
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{use}
			pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "xcp"}}
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var claim *resourceapi.ResourceClaim
		poll(t, "pod "+name+"'s claim allocated", func(ctx context.Context) (bool, error) {
			if extended != "" {
				p, err := pods.Get(ctx, name, metav1.GetOptions{})
				if err != nil || p.Status.ExtendedResourceClaimStatus == nil {
					return false, err
				}
				claimName = p.Status.ExtendedResourceClaimStatus.ResourceClaimName
			}
			c, err := claims.Get(ctx, claimName, metav1.GetOptions{})
			if err != nil || c.Status.Allocation == nil {
				return false, nil
			}
			claim = c
			return true, nil
		})
		return claim
	}
	device := func(c *resourceapi.ResourceClaim) string {
		return c.Status.Allocation.Devices.Results[0].Device
	}

	xcp := schedule("xcp", "cpx-nps4."+DriverName, "", "")
	if got := device(xcp); got != "gpu-0-cpx-nps4-0" {
		t.Errorf("the CPX/NPS4 claim got %s, want the planner's first choice gpu-0-cpx-nps4-0", got)
	}
	if got := modes(t, root, 0); got != "SPX/NPS1" && got != "CPX/NPS1" {
		t.Errorf("card 0 before the prepare: %q, want no partition", got)
	}
	if _, err := kubelet.Prepare(ctx, xcp); err != nil {
		t.Fatal(err)
	}
	if got := modes(t, root, 0); got != "CPX/NPS4 0" {
		t.Errorf("card 0 after the prepare: %q, want CPX/NPS4 with XCP 0", got)
	}
	k, _ := d.Key(driver.AllocatedDevice{Device: device(xcp)}, nil)
	p, _ := d.Made(k)
	spec := cdiSpecs(t, env.CDIDir)
	if p.ID == "" || !strings.Contains(spec, "INSTINCT_XCP_GPU_0_CPX_NPS4_0="+p.ID) {
		t.Errorf("the CDI specs do not hand the container partition %q:\n%s", p.ID, spec)
	}
	poll(t, "card 0 publishing only CPX/NPS4 partitions", func(ctx context.Context) (bool, error) {
		opts := metav1.ListOptions{FieldSelector: "spec.driver=" + DriverName}
		list, err := env.Client.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return false, err
		}
		n := 0
		for _, s := range list.Items {
			for _, dev := range s.Spec.Devices {
				if strings.HasPrefix(dev.Name, "gpu-0") {
					if !strings.HasPrefix(dev.Name, "gpu-0-cpx-nps4-") {
						return false, nil
					}
					n++
				}
			}
		}
		return n == 8, nil
	})

	gpu := schedule("old-style", "", "amd.com/gpu", "")
	if got := device(gpu); got != "gpu-1" {
		t.Errorf("the amd.com/gpu pod got %s, want card 1 whole", got)
	}
	if _, err := kubelet.Prepare(ctx, gpu); err != nil {
		t.Fatal(err)
	}
	got, spec := modes(t, root, 1), cdiSpecs(t, env.CDIDir)
	if got != "SPX/NPS1" || !strings.Contains(spec, "INSTINCT_XCP_GPU_1="+ids[1]) {
		t.Errorf("card 1 whole: %q, CDI specs:\n%s", got, spec)
	}

	maybe := `{"apiVersion":"` + DriverName + `/v1","kind":"XCPConfig","xnack":"maybe"}`
	bad := schedule("bad", "cpx-nps4."+DriverName, "", maybe)
	_, err = kubelet.Prepare(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), `xnack "maybe": want on or off`) {
		t.Errorf("prepare with a bad XCPConfig: %v", err)
	}
	if got := modes(t, root, 0); got != "CPX/NPS4 0" {
		t.Errorf("card 0 after the failed prepare: %q, want only the first claim's XCP", got)
	}
	if err := kubelet.Unprepare(ctx, xcp, gpu, bad); err != nil {
		t.Fatal(err)
	}
	for i := range ids {
		if got := modes(t, root, i); strings.Contains(got, " ") {
			t.Errorf("card %d after every unprepare: %q, want no partition", i, got)
		}
	}
}

// cdiSpecs is every CDI spec in dir, concatenated.
func cdiSpecs(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
