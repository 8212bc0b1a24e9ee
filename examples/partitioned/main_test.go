package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/testenv"
	"github.com/drakit/drakit/topology"
	"github.com/drakit/drakit/topology/topologytest"
)

// runAsDriver makes the test binary run as the driver, so that the
// conformance suite can start, kill -9 and restart it as a process.
const runAsDriver = "PARTITIONED_RUN_AS_DRIVER"

func TestMain(m *testing.M) {
	if os.Getenv(runAsDriver) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// machine is a fake sysfs with four cards, two on each of two PCIe roots,
// and a health folder.
func machine(t *testing.T) Config {
	t.Helper()
	s, err := topologytest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{SysfsRoot: s.Root, HealthDir: t.TempDir(), HealthInterval: 200 * time.Millisecond}
	for i, id := range []string{"0000:03:00.0", "0000:04:00.0", "0000:81:00.0", "0000:82:00.0"} {
		root := []string{"pci0000:00", "pci0000:80"}[i/2]
		dev := topologytest.PCIDevice{BusID: id, Root: root, NUMANode: i / 2}
		if err := s.AddPCIDevice(dev); err != nil {
			t.Fatal(err)
		}
		cfg.BusIDs = append(cfg.BusIDs, id)
	}
	return cfg
}

// TestConformance runs drakit's conformance suite against the driver as a
// process on a fake node, with a claim of the driver's own: two halves on
// one PCIe root. Every check must pass or skip for a stated reason; the
// concurrency check must run (it skips when the device order lets the
// main claims fragment every card).
func TestConformance(t *testing.T) {
	env := testenv.Start(t)
	cfg := machine(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := env.ConformanceConfig(DriverName)
	c.StartCommand = append([]string{self, "--cards", strings.Join(cfg.BusIDs, ","),
		"--sysfs-root", cfg.SysfsRoot, "--health-dir", cfg.HealthDir},
		env.DriverArgs(DriverName)...)
	c.StartEnv = []string{runAsDriver + "=1"}
	halves := []topology.Request{{Name: "halves", Count: 2, Selectors: []string{
		`!device.attributes["` + DriverName + `"].whole`}}}
	twoHalves, err := topology.ClaimSpec(halves, topology.SamePCIeRoot())
	if err != nil {
		t.Fatal(err)
	}
	c.ExtraClaims = []resourceapi.ResourceClaimSpec{twoHalves}
	for _, res := range conformance.Test(t, c).Results {
		if res.ID == "prepare.concurrent" && res.Status != conformance.Pass {
			t.Errorf("prepare.concurrent: %s %s", res.Status, res.Message)
		}
	}
}

// start runs the driver in-process on the environment's node until the
// test ends.
func start(t *testing.T, env *testenv.Env, cfg Config) {
	t.Helper()
	d, err := New(env.NodeName, cfg, env.DriverOptions(DriverName)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("driver stopped: %v", err)
	}
}

func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// tainted lists the driver's published devices that carry a taint.
func tainted(ctx context.Context, env *testenv.Env) ([]string, error) {
	opts := metav1.ListOptions{FieldSelector: "spec.driver=" + DriverName}
	list, err := env.Client.ResourceV1().ResourceSlices().List(ctx, opts)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if len(d.Taints) > 0 {
				out = append(out, d.Name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// TestCardHealth breaks a card: the whole card and both its halves are
// tainted, the other card is not; repairing it clears the taints.
func TestCardHealth(t *testing.T) {
	env := testenv.Start(t)
	cfg := machine(t)
	start(t, env, cfg)
	broken := filepath.Join(cfg.HealthDir, "card-1")
	if err := os.WriteFile(broken, []byte("Overheat\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{"card-1", "card-1-a", "card-1-b"}
	poll(t, "card-1 and its halves tainted", func(ctx context.Context) (bool, error) {
		got, err := tainted(ctx, env)
		return slices.Equal(got, want), err
	})
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	poll(t, "taints cleared", func(ctx context.Context) (bool, error) {
		got, err := tainted(ctx, env)
		return len(got) == 0, err
	})
}

// TestPacking has the real scheduler allocate one-device claims one after
// the other: they fill the first card's halves, so the second card is
// still whole for a claim that asks for a whole card.
func TestPacking(t *testing.T) {
	env := testenv.Start(t)
	start(t, env, machine(t))
	ctx := context.Background()
	createClass(t, env)
	poll(t, "slices published", func(ctx context.Context) (bool, error) {
		list, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) > 0, err
	})
	for i, tc := range []struct{ selector, want string }{
		{"true", "card-0-a"},
		{"true", "card-0-b"},
		{`device.attributes["` + DriverName + `"].whole`, "card-1"},
	} {
		name := []string{"first", "second", "whole"}[i]
		cel := &resourceapi.CELDeviceSelector{Expression: tc.selector}
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: "cards",
			Selectors: []resourceapi.DeviceSelector{{CEL: cel}}}
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "card", Exactly: req}}}}}
		claims := env.Client.ResourceV1().ResourceClaims("default")
		if _, err := claims.Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createPod(t, env, name, claim.Name)
		var got string
		poll(t, "claim "+name+" allocated", func(ctx context.Context) (bool, error) {
			c, err := claims.Get(ctx, name, metav1.GetOptions{})
			if err != nil || c.Status.Allocation == nil {
				return false, err
			}
			got = c.Status.Allocation.Devices.Results[0].Device
			return true, nil
		})
		if got != tc.want {
			t.Errorf("claim %s got %s, want %s", name, got, tc.want)
		}
	}
}

// createClass creates the class "cards" of every device of the driver.
func createClass(t *testing.T, env *testenv.Env) {
	t.Helper()
	sel := resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.driver == "` + DriverName + `"`}}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "cards"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{sel}}}
	ctx := context.Background()
	_, err := env.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createPod creates pod name in namespace default with the claim named
// claim, for its one container.
func createPod(t *testing.T, env *testenv.Env, name, claim string) {
	t.Helper()
	use := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "card"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "card", ResourceClaimName: &claim}},
			Containers:     []corev1.Container{{Name: "c", Image: "unused", Resources: use}}}}
	ctx := context.Background()
	_, err := env.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
