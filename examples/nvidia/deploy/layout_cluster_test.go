package deploy_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/testenv"
)

// layoutSlice is a ResourceSlice that is the whole of pool on node (the
// layout publication's shape) or, with count > 1, one of count slices of
// it, listing devices.
func layoutSlice(
	name, driver, pool, node string,
	count int64,
	devices ...string,
) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver,
			Pool: resourceapi.ResourcePool{
				Name:               pool,
				Generation:         1,
				ResourceSliceCount: count,
			},
			NodeName: ptr.To(node),
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// claimIn creates an unallocated claim for one device of the driver's
// class in ns.
func claimIn(
	ctx context.Context,
	c kubernetes.Interface,
	ns, name string,
) (*resourceapi.ResourceClaim, error) {
	return c.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name:    "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.DriverName},
			}}},
		},
	}, metav1.CreateOptions{})
}

// allocate sets c's allocation to one device, as the scheduler's PreBind
// writes it.
func allocate(
	c *resourceapi.ResourceClaim,
	driver, pool, device string,
) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: driver, Pool: pool, Device: device,
			}},
		},
		AllocationTimestamp: ptr.To(metav1.Now()),
	}
	return c
}

// staleMessage is what the layout webhook says of device of node's
// layout pool.
func staleMessage(device, node string) string {
	return "device " + ledger.PoolName(
		node,
	) + "/" + device + " (driver " + nvdriver.DriverName + ") on node " + node +
		": not open for allocation in the node's layout ledger"
}

// layoutValues are the chart's values of the layout publication (an
// option, with a dynamic GPU) with the webhook (which auto runs then) on
// the host's network at port, called by URL (the local cluster has no
// service proxy).
func layoutValues(port int) []string {
	return []string{"dynamicMIGGPUs=0", "featureGates.DynamicMIG=true", layoutPub,
		"webhook.hostNetwork=true",
		fmt.Sprintf("webhook.port=%d", port), fmt.Sprintf("webhook.url=https://127.0.0.1:%d", port)}
}

// serveChartWebhook runs, in the test's process, the webhook that r's
// Deployment runs: the reference driver's configuration scheme and
// admission.Flags parsed from the Deployment's arguments (those of the
// component flags left out), with kubeconfig, until the test ends or
// stop is called. It returns once the server is ready (its
// layout guard synced).
func serveChartWebhook(
	tb testing.TB,
	ctx context.Context,
	kubeconfig string,
	r rendered,
) (stop func()) {
	tb.Helper()
	var args []string
	for _, d := range r.deployments {
		if d.Name == webhookName {
			args = d.Spec.Template.Spec.Containers[0].Args
		}
	}
	if len(args) == 0 || args[0] != drivercmd.WebhookCommand {
		tb.Fatalf("webhook Deployment args %v", args)
	}
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	var f admission.Flags
	f.Register(fs)
	own := []string{"--kubeconfig=" + kubeconfig}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if fs.Lookup(name) != nil {
			own = append(own, a)
		}
	}
	if err := fs.Parse(own); err != nil {
		tb.Fatal(err)
	}
	if !f.LayoutAllocations {
		tb.Fatalf("webhook args %v: no --layout-allocations", args)
	}
	v, err := admission.NewValidator(nvdriver.ConfigScheme())
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := f.Server(v)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("webhook: %v", err)
			}
		})
	}
	tb.Cleanup(stop)
	select {
	case <-srv.Started():
	case err := <-done:
		tb.Fatalf("webhook stopped: %v", err)
	case <-ctx.Done():
		tb.Fatal("the webhook did not start")
	}
	return stop
}

// freeLocalPort is a port nothing listens on now.
func freeLocalPort(tb testing.TB) int {
	tb.Helper()
	p, err := deploy.FreeLocalPort()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// asWebhook is a kubeconfig of env's cluster that acts as the chart's
// webhook's ServiceAccount.
func asWebhook(t *testing.T, env *testenv.Env) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + deploy.Namespace + ":" + webhookName
		a.ImpersonateGroups = []string{
			"system:serviceaccounts",
			"system:serviceaccounts:" + deploy.Namespace,
			"system:authenticated",
		}
	}
	path := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLayoutWebhook installs the chart with migPublication=layout and
// the webhook (by URL, on the host's network) on a real API server, runs
// the two replicas its Deployment describes (serveChartWebhook: the
// Deployment's arguments, --reuse-port sharing one port) as its
// ServiceAccount (the chart's RBAC: its Secret, its configuration's
// caBundle, the ledgers' ConfigMaps), and writes allocations as the
// scheduler's PreBind does. Node n1's ledger (seeded, as the planner
// does) opens gpu-0-1g-18gb-0 and gpu-0-1g-18gb-1. An allocation of an
// open device is admitted; of a device that is not open, or that the
// node closed since, refused with a message that names the claim and the
// device; of a device of a node without a ledger, refused. Admitted
// without the webhook: another driver's device, the driver's device of a
// pool that is not a layout pool; and every write that does not
// allocate. Then one of the two replicas is stopped (SIGTERM's path: it
// drains) during a burst of 40 allocations: none is refused.
// (admission.TestLayoutOnAPIServer checks the same of the SDK's webhook,
// and what happens while no replica runs.)
func TestLayoutWebhook(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	values := layoutValues(freeLocalPort(t))
	helmInstall(t, ctx, env, values...)
	r := template(t, values...)
	for _, d := range r.deployments {
		if d.Name == webhookName && (d.Spec.Replicas == nil || *d.Spec.Replicas != 2) {
			t.Fatalf("the webhook Deployment runs %v replicas, want 2", d.Spec.Replicas)
		}
	}
	// The two replicas, as their ServiceAccount: the chart's grants suffice.
	stopFirst := serveChartWebhook(t, ctx, asWebhook(t, env), r)
	serveChartWebhook(t, ctx, asWebhook(t, env), r)
	const ns, other = "layout", "other.example.com"
	if _, err := env.Client.CoreV1().Namespaces().Create(
		ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	store, err := ledger.NewStore(env.Client, deploy.Namespace, nvdriver.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	const pool = "n1/layout"
	if _, err := store.Update(ctx, "n1", true, func(l *ledger.Ledger) error {
		l.Seeded, l.Open = true, []ledger.Device{
			{Pool: pool, Name: "gpu-0-1g-18gb-0"}, {Pool: pool, Name: "gpu-0-1g-18gb-1"},
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	claims := env.Client.ResourceV1().ResourceClaims(ns)
	newClaim := func(name string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := claimIn(ctx, env.Client, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	// The API server reads the webhook's configuration through an
	// informer.
	probe := newClaim("probe")
	untilRefused(
		t,
		ctx,
		"an allocation of a device that is not open",
		func(ctx context.Context) error {
			_, err := claims.UpdateStatus(
				ctx,
				allocate(probe, nvdriver.DriverName, pool, "gpu-0-1g-18gb-7"),
				dryRun,
			)
			return err
		},
		staleMessage("gpu-0-1g-18gb-7", "n1"),
	)
	admitted := func(what string, c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		t.Helper()
		got, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			t.Errorf("%s: %v, want admitted", what, err)
			return c
		}
		return got
	}

	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("unlisted"), nvdriver.DriverName, pool, "gpu-0-1g-18gb-7"),
		metav1.UpdateOptions{},
	)
	refused(t, "allocate a device that is not open", err, staleMessage("gpu-0-1g-18gb-7", "n1"))
	if err != nil && !strings.Contains(err.Error(), "claim "+ns+"/unlisted") {
		t.Errorf("the refusal %q does not name the claim", err)
	}
	held := admitted(
		"allocate an open device",
		allocate(newClaim("listed"), nvdriver.DriverName, pool, "gpu-0-1g-18gb-0"),
	)
	admitted(
		"allocate another driver's device",
		allocate(newClaim("other-driver"), other, pool, "gone"),
	)
	admitted(
		"allocate the driver's device of a pool that is not a layout pool",
		allocate(newClaim("static"), nvdriver.DriverName, "n1", "gpu-3"),
	)
	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("no-ledger"), nvdriver.DriverName, "n3/layout", "gpu-0"),
		metav1.UpdateOptions{},
	)
	refused(t, "allocate a device of a node without a ledger", err, "not seeded")

	// The node lays the GPU out again: gpu-0-1g-18gb-1 closed, a 2g open.
	if _, err := store.Update(ctx, "n1", false, func(l *ledger.Ledger) error {
		l.Open = []ledger.Device{{Pool: pool, Name: "gpu-0-2g-35gb-2"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("withdrawn"), nvdriver.DriverName, pool, "gpu-0-1g-18gb-1"),
		metav1.UpdateOptions{},
	)
	refused(t, "allocate a device the node closed", err, staleMessage("gpu-0-1g-18gb-1", "n1"))
	admitted(
		"allocate a device of the new layout",
		allocate(newClaim("new-layout"), nvdriver.DriverName, pool, "gpu-0-2g-35gb-2"),
	)

	withStatus := held.DeepCopy()
	withStatus.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
		Driver: nvdriver.DriverName, Pool: pool, Device: "gpu-0-1g-18gb-0",
		Data: &runtime.RawExtension{Raw: []byte(`{"uuid":"MIG-1"}`)},
	}}
	held = admitted("the driver's status.devices", withStatus)
	reserve := held.DeepCopy()
	reserve.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
		{Resource: "pods", Name: "p", UID: "1234"},
	}
	held = admitted("reserve the claim", reserve)
	var got *resourceapi.ResourceClaim
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		now, err := claims.Get(ctx, held.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now.Status = resourceapi.ResourceClaimStatus{}
		got, err = claims.UpdateStatus(ctx, now, metav1.UpdateOptions{})
		return err
	})
	switch {
	case err != nil:
		t.Errorf("deallocate: %v, want admitted", err)
	case got.Status.Allocation != nil:
		t.Errorf("the deallocated claim has allocation %+v", got.Status.Allocation)
	}

	// One replica stops during a burst.
	const burst = 40
	var open []ledger.Device
	for i := range burst {
		open = append(open, ledger.Device{Pool: "n2/layout", Name: fmt.Sprintf("gpu-%d", i)})
	}
	if _, err := store.Update(ctx, "n2", true, func(l *ledger.Ledger) error {
		l.Seeded, l.Open = true, open
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		c := newClaim(fmt.Sprintf("burst-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			if _, err := claims.UpdateStatus(
				ctx, allocate(c, nvdriver.DriverName, "n2/layout", open[i].Name),
				metav1.UpdateOptions{},
			); err != nil {
				errs <- fmt.Errorf("burst-%d: %w", i, err)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	stopFirst()
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		n++
		t.Errorf("a replica stopped during a burst: %v", err)
	}
	t.Logf("a replica stopped during a burst of %d allocations: %d refused", burst, n)
}

// BenchmarkLayoutWebhook measures the layout webhook's price on a real
// API server with 500 nodes of this driver's layout (each 8 GPUs as the
// layout publishes them: 56 MIG devices with the driver's attributes in
// the pool <node>/layout, and the node's ledger with all of them open):
// the latency of the scheduler's allocation write (UpdateStatus setting
// status.allocation to an open device: the webhook moves it to Held in
// the node's ledger, a compare-and-swap, before it admits the write) and
// of the driver's status.devices write that follows, with the
// chart's webhook configuration (the webhook in the test's process, as
// its Deployment runs it, called by URL) and without it. Both are
// measured in the same run, interleaved write by write: the chart's
// layout webhook is registered with a namespaceSelector, so that the
// claims of one namespace go through it and those of the other do not.
// Each of b.N iterations is 5 rounds of 20 writes of each kind; it
// reports the median latencies and the ratios with webhook / without:
// the median over the rounds and their minimum and maximum. Run with
// -benchtime=1x (the cluster starts once per call of the function, and
// go test calls it again for every b.N above 1).
func BenchmarkLayoutWebhook(b *testing.B) {
	const pools, gpus, perGPU, rounds, writes = 500, 8, 7, 5, 20
	env := testenv.Start(b)
	ctx := context.Background()

	values := layoutValues(freeLocalPort(b))
	r := template(b, values...)
	const on, off = "with-webhook", "without-webhook"
	for _, ns := range []string{deploy.Namespace, on, off} {
		labels := map[string]string{}
		if ns == on {
			labels["layout-webhook"] = "on"
		}
		if _, err := env.Client.CoreV1().Namespaces().Create(
			ctx,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}},
			metav1.CreateOptions{},
		); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range r.secrets {
		if _, err := env.Client.CoreV1().Secrets(s.Namespace).Create(
			ctx, s, metav1.CreateOptions{},
		); err != nil {
			b.Fatal(err)
		}
	}
	if len(r.webhooks) != 1 || len(r.webhooks[0].Webhooks) != 2 {
		b.Fatalf("%d webhook configurations", len(r.webhooks))
	}
	cfg := r.webhooks[0]
	cfg.Webhooks = cfg.Webhooks[1:]
	if cfg.Webhooks[0].Name != admission.LayoutWebhookName(nvdriver.DriverName) {
		b.Fatalf("webhook %s, want the layout's", cfg.Webhooks[0].Name)
	}
	cfg.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{
		MatchLabels: map[string]string{"layout-webhook": "on"},
	}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(
		ctx, cfg, metav1.CreateOptions{},
	); err != nil {
		b.Fatal(err)
	}
	createSlices(b, ctx, env.Client, pools, gpus, perGPU)
	serveChartWebhook(b, ctx, env.Kubeconfig, r)
	// The webhook is called once it refuses an allocation of a device the
	// last node's ledger does not open.
	probe, err := claimIn(ctx, env.Client, on, "probe")
	if err != nil {
		b.Fatal(err)
	}
	last := fmt.Sprintf("node-%03d", pools-1)
	untilRefused(b, ctx, "the webhook with every ledger", func(ctx context.Context) error {
		_, err := env.Client.ResourceV1().
			ResourceClaims(on).
			UpdateStatus(
				ctx,
				allocate(probe, nvdriver.DriverName, ledger.PoolName(last), "gpu-9-1g-18gb-0"),
				metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}},
			)
		return err
	}, staleMessage("gpu-9-1g-18gb-0", last))

	var allocRatios, statusRatios []float64
	var allocOn, allocOff, statusOn, statusOff []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N*rounds; i++ {
		b.StopTimer()
		type pair struct{ on, off *resourceapi.ResourceClaim }
		ps := make([]pair, writes)
		for w := range ps {
			for _, ns := range []string{on, off} {
				c, err := claimIn(ctx, env.Client, ns, fmt.Sprintf("r%d-w%d", i, w))
				if err != nil {
					b.Fatal(err)
				}
				if ns == on {
					ps[w].on = c
				} else {
					ps[w].off = c
				}
			}
		}
		b.StartTimer()
		var aOn, aOff, sOn, sOff []time.Duration
		timed := func(c *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, time.Duration) {
			t0 := time.Now()
			got, err := env.Client.ResourceV1().
				ResourceClaims(c.Namespace).
				UpdateStatus(ctx, c, metav1.UpdateOptions{})
			d := time.Since(t0)
			if err != nil {
				b.Fatalf("write of %s/%s: %v", c.Namespace, c.Name, err)
			}
			return got, d
		}
		for w, p := range ps {
			// A device the node's ledger has open: the webhook moves it to
			// Held (a compare-and-swap of the node's ledger) and admits it.
			pool := ledger.PoolName(fmt.Sprintf("node-%03d", (i*writes+w)%pools))
			dev := fmt.Sprintf("gpu-%d-1g-18gb-%d", w%gpus, w%perGPU)
			order := []*resourceapi.ResourceClaim{p.on, p.off}
			if w%2 == 1 { // alternate which goes first
				slices.Reverse(order)
			}
			var got []*resourceapi.ResourceClaim
			for _, c := range order {
				g, d := timed(allocate(c, nvdriver.DriverName, pool, dev))
				if g.Namespace == on {
					aOn = append(aOn, d)
				} else {
					aOff = append(aOff, d)
				}
				got = append(got, g)
			}
			for _, g := range got {
				c := g.DeepCopy()
				c.Status.Devices = []resourceapi.AllocatedDeviceStatus{
					{Driver: nvdriver.DriverName, Pool: pool, Device: dev,
						Data: &runtime.RawExtension{Raw: []byte(`{"uuid":"MIG-1"}`)}},
				}
				_, d := timed(c)
				if c.Namespace == on {
					sOn = append(sOn, d)
				} else {
					sOff = append(sOff, d)
				}
			}
		}
		allocRatios = append(allocRatios, ms(median(aOn))/ms(median(aOff)))
		statusRatios = append(statusRatios, ms(median(sOn))/ms(median(sOff)))
		allocOn, allocOff = append(allocOn, aOn...), append(allocOff, aOff...)
		statusOn, statusOff = append(statusOn, sOn...), append(statusOff, sOff...)
	}
	b.StopTimer()
	report := func(what string, with, without []time.Duration, ratios []float64) {
		mr, lo, hi := medianF(ratios), minF(ratios), maxF(ratios)
		b.ReportMetric(ms(median(with)), what+"-ms-with")
		b.ReportMetric(ms(median(without)), what+"-ms-without")
		b.ReportMetric(mr, what+"-ratio")
		b.ReportMetric(lo, what+"-ratio-min")
		b.ReportMetric(hi, what+"-ratio-max")
		b.Logf(
			"%s writes, %d slices of %d devices: median %.2f ms with the webhook, "+
				"%.2f ms without (%d writes each); ratio %.2f (rounds: min %.2f, max %.2f, "+
				"%d rounds)",
			what,
			pools,
			gpus*perGPU,
			ms(median(with)),
			ms(median(without)),
			len(with),
			mr,
			lo,
			hi,
			len(ratios),
		)
	}
	report("alloc", allocOn, allocOff, allocRatios)
	report("status", statusOn, statusOff, statusRatios)
}

// createSlices creates n one-slice pools of the driver, node-000 ...,
// each a node of gpus GPUs laid out in perGPU MIG devices (1g.18gb of an
// H200) with the attributes and capacities the driver publishes.
func createSlices(tb testing.TB, ctx context.Context, c kubernetes.Interface, n, gpus, perGPU int) {
	tb.Helper()
	store, err := ledger.NewStore(c, deploy.Namespace, nvdriver.DriverName)
	if err != nil {
		tb.Fatal(err)
	}
	str := func(s string) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
	}
	num := func(i int) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(i))}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				node := fmt.Sprintf("node-%03d", i)
				s := layoutSlice(
					node+"-layout",
					nvdriver.DriverName,
					ledger.PoolName(node),
					node,
					1,
				)
				for g := range gpus {
					for d := range perGPU {
						s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
							Name: fmt.Sprintf("gpu-%d-1g-18gb-%d", g, d),
							Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
								"type": str(
									"mig",
								), "index": num(g), "productName": str("NVIDIA H200"),
								"uuid": str(
									fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i, g),
								), "profile": str("1g.18gb"),
								"profileID": num(
									19,
								), "placementStart": num(d), "placementSize": num(1),
							},
							Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
								"memory": {
									Value: resource.MustParse("16384Mi"),
								}, "computeSlices": {Value: resource.MustParse("1")},
							},
						})
					}
				}
				if _, err := c.ResourceV1().ResourceSlices().Create(
					ctx, s, metav1.CreateOptions{},
				); err != nil {
					errs <- err
				}
				// The node's ledger, seeded, every device open.
				var open []ledger.Device
				for _, d := range s.Spec.Devices {
					open = append(open, ledger.Device{Pool: s.Spec.Pool.Name, Name: d.Name})
				}
				if _, err := store.Update(ctx, node, true, func(l *ledger.Ledger) error {
					l.Seeded, l.Open = true, open
					return nil
				}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("create slices: %v", err)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func medianF(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func minF(fs []float64) float64 { return slices.Min(fs) }
func maxF(fs []float64) float64 { return slices.Max(fs) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
