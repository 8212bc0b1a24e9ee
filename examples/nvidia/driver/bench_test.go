package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/testenv"
)

// minimalPreparer is examples/minimal's preparer (that package is a main
// package and cannot be imported): one environment variable per device.
type minimalPreparer struct{}

func (minimalPreparer) PrepareDevice(
	_ context.Context,
	_ kit.Claim,
	dev kit.AllocatedDevice,
) (kit.PreparedDevice, error) {
	return kit.PreparedDevice{Edits: (&cdi.Edits{}).Env("MINIMAL_DEVICE", dev.Device)}, nil
}

func (minimalPreparer) UnprepareDevice(
	context.Context,
	kit.ClaimRef,
	kit.AllocatedDevice,
	json.RawMessage,
) error {
	return nil
}

const minimalName = "minimal.drakit.dev"

// benchDriver is one driver running in this process for a node of its own.
type benchDriver struct {
	k    *kit.Runtime
	stop func()
	node string
}

// runDriver starts a driver on a new fake node; start is called first and
// makes the driver's options (it is part of the measured start).
func runDriver(
	ctx context.Context,
	b testing.TB,
	env *testenv.Env,
	name, node string,
	start func(node string) ([]kit.Option, error),
) *benchDriver {
	b.Helper()
	opts, err := start(node)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	opts = append(
		opts,
		kit.WithRESTConfig(env.RESTConfig),
		kit.WithNodeName(node),
		kit.WithRegistrarDir(
			filepath.Join(dir, "reg"),
		),
		kit.WithPluginDataDir(filepath.Join(dir, "plugin")),
		kit.WithCDIDir(filepath.Join(dir, "cdi")),
	)
	k, err := kit.New(name, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	select {
	case <-k.Ready():
	case err := <-done:
		b.Fatalf("driver stopped: %v", err)
	}
	return &benchDriver{k: k, node: node, stop: func() { cancel(); <-done }}
}

// shmDir is a new folder on tmpfs (/dev/shm), removed at the end.
func shmDir(b testing.TB) string {
	b.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "nvidia-bench-")
	if err != nil {
		b.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// nvidiaStart opens a fresh simulated DGX H200 with all GPUs in MIG mode
// (dynamic MIG) and makes the driver for node.
func nvidiaStart(b testing.TB, migGPUs []int, tmpfs bool) func(node string) ([]kit.Option, error) {
	return func(node string) ([]kit.Option, error) {
		dir := b.TempDir()
		if tmpfs {
			dir = shmDir(b)
		}
		sim, err := nvmlsim.Open(
			filepath.Join(dir, "gpus.json"),
			nvmlsim.WithServer("dgx-h200"),
			nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: migGPUs}),
		)
		if err != nil {
			return nil, err
		}
		d, err := nvdriver.New(
			sim,
			node,
			nvdriver.WithStateDir(filepath.Join(dir, "state")),
			dynamicMIG(migGPUs),
		)
		if err != nil {
			return nil, err
		}
		return d.Options(), nil
	}
}

func minimalStart(node string) ([]kit.Option, error) {
	pool := device.Pool{Name: node}
	for i := range 4 {
		pool.Devices = append(
			pool.Devices,
			device.New(fmt.Sprintf("dev-%d", i)).StringAttribute("model", "simulated"),
		)
	}
	inv := &device.Inventory{Driver: minimalName, Pools: []device.Pool{pool}}
	return []kit.Option{
		kit.WithDiscoverer(device.StaticDiscoverer{Inv: inv}),
		kit.WithPreparer(minimalPreparer{}),
	}, nil
}

// startToFirstSlice measures from the driver's construction to the first
// ResourceSlice of its node in the API server.
func startToFirstSlice(
	ctx context.Context,
	b *testing.B,
	env *testenv.Env,
	name, node string,
	start func(string) ([]kit.Option, error),
) time.Duration {
	b.Helper()
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		b.Fatal(err)
	}
	w, err := env.Client.ResourceV1().
		ResourceSlices().
		Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	t0 := time.Now()
	d := runDriver(ctx, b, env, name, node, start)
	defer d.stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Added {
			return time.Since(t0)
		}
	}
	b.Fatal("watch ended")
	return 0
}

// prepareTimes prepares and unprepares a claim for device n times and
// returns the prepare call times.
func prepareTimes(
	ctx context.Context,
	b *testing.B,
	env *testenv.Env,
	d *benchDriver,
	name, dev string,
	n, round int,
) []time.Duration {
	b.Helper()
	kl, err := drivertest.Dial(d.k.DRASocket())
	if err != nil {
		b.Fatal(err)
	}
	defer kl.Close()
	out := make([]time.Duration, 0, n)
	for i := range n {
		claim, err := drivertest.CreateAllocatedClaim(ctx, env.Client, drivertest.ClaimSpec{
			Namespace: "default",
			Name:      fmt.Sprintf("%s-%d-%d", strings.Split(name, ".")[0], round, i),
			Driver:    name,
			Devices:   []drivertest.Device{{Pool: d.node, Device: dev}},
		})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := kl.Prepare(ctx, claim); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(t0))
		if err := kl.Unprepare(ctx, claim); err != nil {
			b.Fatal(err)
		}
		// An idle node between claims: the republish that the MIG
		// change scheduled runs now, not during the next prepare.
		time.Sleep(nvdriver.DefaultRepublishDelay + 50*time.Millisecond)
		if err := env.Client.ResourceV1().ResourceClaims("default").Delete(
			ctx, claim.Name, metav1.DeleteOptions{},
		); err != nil &&
			!apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	return out
}

// allocTimes runs the real scheduler allocator n times for one device
// matching selector on the slices and returns the times (allocator
// construction and Allocate, as kube-scheduler does per claim).
func allocTimes(
	ctx context.Context,
	b *testing.B,
	node string,
	slices []*resourceapi.ResourceSlice,
	selector string,
	n int,
) []time.Duration {
	b.Helper()
	one := newOneDevice(node, selector)
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		res, err := one.allocate(ctx, slices)
		out = append(out, time.Since(t0))
		if err != nil || len(res) != 1 {
			b.Fatalf("allocate: %v (%d results)", err, len(res))
		}
	}
	return out
}

// oneDevice is a claim for one device matching a CEL selector, allocated
// on one node by the scheduler's own allocator with the features
// kube-scheduler 1.37 enables.
type oneDevice struct {
	features structured.Features
	cache    *cel.Cache
	classes  classList
	node     *corev1.Node
	claim    *resourceapi.ResourceClaim
}

func newOneDevice(node, selector string) *oneDevice {
	req := resourceapi.ExactDeviceRequest{
		DeviceClassName: "c",
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
		Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: selector}},
		},
	}
	return &oneDevice{
		features: structured.Features{
			AdminAccess:            true,
			PartitionableDevices:   true,
			PrioritizedList:        true,
			DeviceTaints:           true,
			DeviceBindingAndStatus: true,
			ConsumableCapacity:     true,
		},
		cache:   cel.NewCache(256, cel.Features{EnableConsumableCapacity: true}),
		classes: classList{&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}},
		node:    &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		claim: &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: "claim-uid"},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{
					Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}},
				},
			},
		},
	}
}

// allocate runs the allocator once on the slices with nothing allocated:
// one result when a device matches, none when none does.
func (o *oneDevice) allocate(
	ctx context.Context,
	slices []*resourceapi.ResourceSlice,
) ([]resourceapi.AllocationResult, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	al, err := structured.NewAllocator(ctx, o.features, state, o.classes, slices, o.cache)
	if err != nil {
		return nil, err
	}
	return al.Allocate(ctx, o.node, []*resourceapi.ResourceClaim{o.claim})
}

type classList []*resourceapi.DeviceClass

func (l classList) List() ([]*resourceapi.DeviceClass, error) { return l, nil }
func (l classList) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// spread prints the median and the range of xs.
func spread(xs []float64) string {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f [%.2f..%.2f]", s[len(s)/2], s[0], s[len(s)-1])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkDriver measures the reference driver against baselines in the
// same run, once per b.N round (run with -benchtime=5x for five rounds),
// and prints every round and the median ratio with its range:
//
//   - start to first slice: nvdriver.New on a fresh simulated DGX H200
//     with dynamic MIG on all 8 GPUs (NVML reads, MIG recovery, counter
//     model and mig.Preference for 192 devices) plus the drakit runtime's
//     start, until the API server has the node's first ResourceSlice;
//     against examples/minimal's driver (4 plain devices);
//   - prepare p50/p99 of a claim for a dynamic 1g.18gb device (MIG journal
//     record, GPU and compute instance created in the simulator's state
//     file, CDI spec, devices file) against examples/minimal's prepare,
//     over the real kubelet gRPC protocol;
//   - the scheduler allocator's time for a one-device 1g.18gb claim on the
//     node's slices against a one-device claim on a node of 8 full GPUs.
//
// It needs the cluster binaries (skipped with -short).
func BenchmarkDriver(b *testing.B) {
	env := testenv.Start(b)
	klog.LogToStderr(false) // quiet: the table is the output
	klog.SetOutput(io.Discard)
	ctx := context.Background()
	const prepares, allocs = 32, 200
	var rows [][]string
	var startR, p50R, p99R, p50sR, p99sR, allocR []float64
	for round := range b.N {
		nvStart := startToFirstSlice(
			ctx,
			b,
			env,
			nvdriver.DriverName,
			fmt.Sprintf("nv-start-%d", round),
			nvidiaStart(b, nil, false),
		)
		minStart := startToFirstSlice(
			ctx,
			b,
			env,
			minimalName,
			fmt.Sprintf("min-start-%d", round),
			minimalStart,
		)

		nvNode, shmNode, minNode := fmt.Sprintf(
			"nv-prep-%d",
			round,
		), fmt.Sprintf(
			"shm-prep-%d",
			round,
		), fmt.Sprintf(
			"min-prep-%d",
			round,
		)
		for _, n := range []string{nvNode, shmNode, minNode} {
			if err := env.AddFakeNode(ctx, n, nil); err != nil {
				b.Fatal(err)
			}
		}
		nv := runDriver(ctx, b, env, nvdriver.DriverName, nvNode, nvidiaStart(b, nil, false))
		shm := runDriver(ctx, b, env, nvdriver.DriverName, shmNode, nvidiaStart(b, nil, true))
		mn := runDriver(ctx, b, env, minimalName, minNode, minimalStart)
		var nvT, shmT, minT []time.Duration
		for i := range 4 { // interleaved
			nvT = append(
				nvT,
				prepareTimes(
					ctx,
					b,
					env,
					nv,
					nvdriver.DriverName,
					"gpu-4-1g-18gb-0",
					prepares/4,
					round*100+i,
				)...)
			shmT = append(
				shmT,
				prepareTimes(
					ctx,
					b,
					env,
					shm,
					nvdriver.DriverName,
					"gpu-4-1g-18gb-0",
					prepares/4,
					round*100+10+i,
				)...)
			minT = append(
				minT,
				prepareTimes(ctx, b, env, mn, minimalName, "dev-0", prepares/4, round*100+i)...)
		}
		nv.stop()
		shm.stop()
		mn.stop()

		migSlices := inventorySlices(b, nvNode, nil)
		fullSlices := inventorySlices(b, nvNode, []int{})
		sel := func(typ, extra string) string {
			return fmt.Sprintf(
				`device.driver == %q && device.attributes[%q].type == %q%s`,
				nvdriver.DriverName,
				nvdriver.DriverName,
				typ,
				extra,
			)
		}
		migA := pct(
			allocTimes(
				ctx,
				b,
				nvNode,
				migSlices,
				sel(
					"mig",
					fmt.Sprintf(
						` && device.attributes[%q].profile == "1g.18gb"`,
						nvdriver.DriverName,
					),
				),
				allocs,
			),
			0.5,
		)
		fullA := pct(allocTimes(ctx, b, nvNode, fullSlices, sel("gpu", ""), allocs), 0.5)

		startR = append(startR, float64(nvStart)/float64(minStart))
		p50R = append(p50R, float64(pct(nvT, 0.5))/float64(pct(minT, 0.5)))
		p99R = append(p99R, float64(pct(nvT, 0.99))/float64(pct(minT, 0.99)))
		p50sR = append(p50sR, float64(pct(shmT, 0.5))/float64(pct(minT, 0.5)))
		p99sR = append(p99sR, float64(pct(shmT, 0.99))/float64(pct(minT, 0.99)))
		allocR = append(allocR, float64(migA)/float64(fullA))
		rows = append(rows, []string{
			fmt.Sprint(round),
			fmt.Sprintf("%.0f / %.0f", ms(nvStart), ms(minStart)),
			fmt.Sprintf(
				"%.2f / %.2f / %.2f",
				ms(pct(nvT, 0.5)),
				ms(pct(shmT, 0.5)),
				ms(pct(minT, 0.5)),
			),
			fmt.Sprintf(
				"%.2f / %.2f / %.2f",
				ms(pct(nvT, 0.99)),
				ms(pct(shmT, 0.99)),
				ms(pct(minT, 0.99)),
			),
			fmt.Sprintf("%.3f / %.3f", ms(migA), ms(fullA)),
		})
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintln(
		tw,
		"round\tstart->1st slice ms (nvidia / minimal)\tprepare p50 ms (nvidia 1g / same, state "+
			"on tmpfs / minimal)\tprepare p99 ms (same)\talloc ms (1g on MIG node / 1 GPU on "+
			"full node)",
	)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	fmt.Fprintf(
		tw,
		"ratio median [min..max]\t%s\t%s / %s\t%s / %s\t%s\n",
		spread(startR),
		spread(p50R),
		spread(p50sR),
		spread(p99R),
		spread(p99sR),
		spread(allocR),
	)
	tw.Flush()
}

// inventorySlices is the ResourceSlices of a fresh simulated DGX H200
// node whose GPUs migGPUs have MIG mode on (nil: all, dynamic MIG; empty:
// none, 8 full GPUs).
func inventorySlices(b *testing.B, node string, migGPUs []int) []*resourceapi.ResourceSlice {
	b.Helper()
	dir := b.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: migGPUs}),
	)
	if err != nil {
		b.Fatal(err)
	}
	d, err := nvdriver.New(
		sim,
		node,
		nvdriver.WithStateDir(filepath.Join(dir, "state")),
		dynamicMIG(migGPUs),
	)
	if err != nil {
		b.Fatal(err)
	}
	inv, err := d.Inventory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return inv.ResourceSlices(node)
}

// dynamicMIG names the GPUs in MIG mode (nil: all eight) the dynamic MIG
// GPUs, as a deployment's dynamicMIGGPUs value does.
func dynamicMIG(migGPUs []int) nvdriver.Option {
	if migGPUs == nil {
		migGPUs = []int{0, 1, 2, 3, 4, 5, 6, 7}
	}
	var ids []string
	for _, g := range migGPUs {
		ids = append(ids, fmt.Sprint(g))
	}
	return nvdriver.WithDynamicGPUs(ids...)
}
