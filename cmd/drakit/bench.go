package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/internal/cluster"
)

func init() {
	register(command{
		name:    "bench",
		summary: "benchmark a DRA driver's prepare/unprepare against a no-op floor (bench prepare)",
		run:     runBench,
	})
}

type benchConfig struct {
	kubeconfig, driverName, socket, pool, node string
	devicePrefix                               string
	iterations, batch, callers, held           int
	duration                                   time.Duration
	checkpointHeld                             int
	rssCalls                                   int
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "prepare" {
		return fmt.Errorf("%w: usage: drakit bench prepare [flags]", errUsage)
	}
	fs := flag.NewFlagSet("bench prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c benchConfig
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster the driver uses; empty: start a control-plane cluster (needs hack/setup.sh)")
	fs.StringVar(&c.socket, "socket", "", "DRA socket of the driver under test; empty: run drakit's runtime in-process with a preparer that sets one env var")
	fs.StringVar(&c.driverName, "driver", "bench.drakit.dev", "name of the driver under test (claims are allocated for it)")
	fs.StringVar(&c.node, "node", "bench-node", "node name the drivers publish for (created as a fake node when bench starts the cluster)")
	fs.StringVar(&c.pool, "pool", "", "pool of the allocated devices (default: the node name)")
	fs.StringVar(&c.devicePrefix, "device-prefix", "dev-", "allocated devices are <prefix>0, <prefix>1, ...; the driver under test must accept them")
	fs.IntVar(&c.iterations, "n", 300, "iterations of each latency measurement")
	fs.IntVar(&c.batch, "batch", 8, "claims per call in the batch measurement")
	fs.IntVar(&c.callers, "callers", 8, "concurrent callers in the throughput measurement")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "length of the throughput measurement")
	fs.IntVar(&c.held, "held", 256, "claims held prepared in the 'held' measurement")
	fs.IntVar(&c.checkpointHeld, "checkpoint-held", 10000, "records held in the large checkpoint measurement (the small one holds 10)")
	fs.IntVar(&c.rssCalls, "rss-calls", 0, "with the in-process driver: also run this many prepare+unprepare cycles and report this process's RSS before and after (0: skip)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if c.iterations < 10 || c.batch < 1 || c.callers < 1 || c.held < 0 || c.checkpointHeld < 10 {
		return fmt.Errorf("%w: -n must be >= 10, -batch and -callers >= 1, -held >= 0, -checkpoint-held >= 10", errUsage)
	}
	if c.pool == "" {
		c.pool = c.node
	}
	ctx = klog.NewContext(ctx, klog.Background())
	return benchPrepare(ctx, c, stdout, stderr)
}

func benchPrepare(ctx context.Context, c benchConfig, stdout, stderr io.Writer) error {
	tmp, err := os.MkdirTemp("", "drkb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var rc *rest.Config
	if c.kubeconfig == "" {
		fmt.Fprintln(stderr, "starting a control-plane cluster ...")
		cl, err := cluster.Start(ctx, cluster.WithDieWithParent())
		if err != nil {
			return fmt.Errorf("start cluster: %w", err)
		}
		defer cl.Stop()
		if err := cl.AddFakeNode(ctx, c.node, nil, nil); err != nil {
			return err
		}
		rc = cl.RESTConfig
	} else if rc, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = driver.DefaultQPS, driver.DefaultBurst
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ns := fmt.Sprintf("drakit-bench-%d", time.Now().Unix())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	defer func() {
		_ = admin.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()

	// The floor: a no-op driver on the same helper and API server.
	floorName := "floor.bench.drakit.dev"
	floorDir := filepath.Join(tmp, "floor")
	_ = os.MkdirAll(floorDir, 0o755)
	floorHelper, err := kubeletplugin.Start(ctx, noopPlugin{dir: floorDir, seq: new(atomic.Int64)}, kubeletplugin.DriverName(floorName), kubeletplugin.KubeClient(admin),
		kubeletplugin.NodeName(c.node), kubeletplugin.RegistrarDirectoryPath(floorDir), kubeletplugin.PluginDataDirectoryPath(floorDir),
		kubeletplugin.Serialize(false), kubeletplugin.GRPCVerbosity(-1))
	if err != nil {
		return fmt.Errorf("start floor driver: %w", err)
	}
	defer floorHelper.Stop()

	targetSocket := c.socket
	targetName := c.driverName
	if targetSocket == "" {
		dir := filepath.Join(tmp, "t")
		drv, err := driver.New(targetName,
			driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: targetName, Pools: []device.Pool{{Name: c.pool, Devices: []*device.Device{device.New("dev-0")}}}}}),
			driver.WithPreparer(envPreparer{}), driver.WithRESTConfig(rc), driver.WithNodeName(c.node),
			driver.WithRegistrarDir(dir), driver.WithPluginDataDir(dir), driver.WithCDIDir(filepath.Join(tmp, "cdi")),
			driver.WithUncheckedPools(c.pool), // claims are allocated without a scheduler
			driver.WithHelperOptions(kubeletplugin.GRPCVerbosity(-1)))
		if err != nil {
			return err
		}
		dctx, cancel := context.WithCancel(klog.NewContext(ctx, klog.Background().V(1)))
		done := make(chan error, 1)
		go func() { done <- drv.Run(dctx) }()
		defer func() { cancel(); <-done }()
		select {
		case <-drv.Ready():
		case err := <-done:
			return fmt.Errorf("run drakit driver: %w", err)
		}
		targetSocket = drv.DRASocket()
	}

	floor := &benchTarget{name: floorName, socket: filepath.Join(floorDir, "dra.sock"), pool: c.pool, prefix: c.devicePrefix, client: admin, ns: ns}
	target := &benchTarget{name: targetName, socket: targetSocket, pool: c.pool, prefix: c.devicePrefix, client: admin, ns: ns}
	for _, t := range []*benchTarget{floor, target} {
		if t.k, err = drivertest.Dial(t.socket); err != nil {
			return err
		}
		defer t.k.Close()
	}

	fsyncP50, fsyncP99, err := measureFsync(tmp, c.iterations)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "measuring (%d iterations each) ...\n", c.iterations)
	var rows []benchRow
	add := func(name string, floorV, targetV float64, unit, target string, higherBetter bool) {
		rows = append(rows, benchRow{name, floorV, targetV, unit, target, higherBetter})
	}
	var res [2]latencies
	for i, t := range []*benchTarget{floor, target} {
		if res[i], err = t.cycles(ctx, 1, c.iterations, 0); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	add("prepare p50, 1 claim 1 device", ms(res[0].prepare.p(50)), ms(res[1].prepare.p(50)), "ms", "<= 1.3x", false)
	add("prepare p99, 1 claim 1 device", ms(res[0].prepare.p(99)), ms(res[1].prepare.p(99)), "ms", "<= 2x", false)
	add("unprepare p50", ms(res[0].unprepare.p(50)), ms(res[1].unprepare.p(50)), "ms", "", false)
	add("unprepare p99", ms(res[0].unprepare.p(99)), ms(res[1].unprepare.p(99)), "ms", "", false)
	for i, t := range []*benchTarget{floor, target} {
		if res[i], err = t.cycles(ctx, c.batch, max(c.iterations/4, 10), 0); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	add(fmt.Sprintf("prepare p50, batch of %d claims", c.batch), ms(res[0].prepare.p(50)), ms(res[1].prepare.p(50)), "ms", "", false)
	add(fmt.Sprintf("prepare p99, batch of %d claims", c.batch), ms(res[0].prepare.p(99)), ms(res[1].prepare.p(99)), "ms", "", false)
	var tput [2]float64
	for i, t := range []*benchTarget{floor, target} {
		if tput[i], err = t.throughput(ctx, c.callers, c.duration); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	add(fmt.Sprintf("prepare+unprepare cycles/s, %d callers", c.callers), tput[0], tput[1], "/s", ">= 0.8x", true)
	var held0, heldN latencies
	if held0, err = target.cycles(ctx, 1, c.iterations, 0); err != nil {
		return err
	}
	if heldN, err = target.cycles(ctx, 1, c.iterations, c.held); err != nil {
		return err
	}
	add(fmt.Sprintf("drakit prepare p50: 0 vs %d claims held", c.held), ms(held0.prepare.p(50)), ms(heldN.prepare.p(50)), "ms", "~1x", false)
	small, err := drivertest.CheckpointWriteCost(filepath.Join(tmp, "ck10"), 10, c.iterations)
	if err != nil {
		return err
	}
	large, err := drivertest.CheckpointWriteCost(filepath.Join(tmp, "ckN"), c.checkpointHeld, c.iterations)
	if err != nil {
		return err
	}
	add(fmt.Sprintf("checkpoint write: 10 vs %d held", c.checkpointHeld), ms(small), ms(large), "ms", "<= 1.2x", false)

	if c.rssCalls > 0 && c.socket == "" {
		before, err := rssBytes()
		if err != nil {
			return err
		}
		if err := target.calls(ctx, c.callers, c.rssCalls); err != nil {
			return err
		}
		after, err := rssBytes()
		if err != nil {
			return err
		}
		add(fmt.Sprintf("process RSS: before vs after %d cycles", c.rssCalls), float64(before)/(1<<20), float64(after)/(1<<20), "MiB", "~1x", false)
	}

	fmt.Fprintf(stdout, "drakit bench prepare: %s (socket %s) against the floor: a no-op driver on the same kubeletplugin helper and API server that writes, fsyncs and renames one 1 KiB file per prepare call (alone: p50 %.3f ms, p99 %.3f ms)\n\n",
		target.name, target.socket, ms(fsyncP50), ms(fsyncP99))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tfloor / first\tdriver / second\tratio\ttarget\t")
	for _, r := range rows {
		ratio := r.target / r.floor
		fmt.Fprintf(tw, "%s\t%.3f %s\t%.3f %s\t%.2fx\t%s\t\n", r.name, r.floor, r.unit, r.target, r.unit, ratio, r.goal)
	}
	return tw.Flush()
}

type benchRow struct {
	name          string
	floor, target float64
	unit, goal    string
	higherBetter  bool
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type durations []time.Duration

func (d durations) p(pct int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*pct + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

type latencies struct{ prepare, unprepare durations }

type benchTarget struct {
	name, socket, pool, prefix string
	client                     kubernetes.Interface
	ns                         string
	k                          *drivertest.Kubelet
	seq                        atomic.Int64
}

// claims creates n allocated claims of this driver, each with its own
// device.
func (t *benchTarget) claims(ctx context.Context, n int) ([]*resourceapi.ResourceClaim, error) {
	out := make([]*resourceapi.ResourceClaim, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id := t.seq.Add(1)
			out[i], errs[i] = drivertest.CreateAllocatedClaim(ctx, t.client, drivertest.ClaimSpec{Namespace: t.ns, Name: fmt.Sprintf("%s-%d", t.name, id), Driver: t.name,
				Devices: []drivertest.Device{{Pool: t.pool, Device: fmt.Sprintf("%s%d", t.prefix, id)}}})
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// cycles prepares and unprepares batch claims per call, n times, with held
// other claims prepared meanwhile.
func (t *benchTarget) cycles(ctx context.Context, batch, n, held int) (latencies, error) {
	var l latencies
	heldClaims, err := t.claims(ctx, held)
	if err != nil {
		return l, err
	}
	for i := 0; i < len(heldClaims); i += 32 {
		if _, err := t.k.Prepare(ctx, heldClaims[i:min(i+32, len(heldClaims))]...); err != nil {
			return l, err
		}
	}
	claims, err := t.claims(ctx, batch)
	if err != nil {
		return l, err
	}
	for range 3 { // warm up
		if _, err := t.k.Prepare(ctx, claims...); err != nil {
			return l, err
		}
		if err := t.k.Unprepare(ctx, claims...); err != nil {
			return l, err
		}
	}
	for range n {
		t0 := time.Now()
		if _, err := t.k.Prepare(ctx, claims...); err != nil {
			return l, err
		}
		t1 := time.Now()
		if err := t.k.Unprepare(ctx, claims...); err != nil {
			return l, err
		}
		l.prepare = append(l.prepare, t1.Sub(t0))
		l.unprepare = append(l.unprepare, time.Since(t1))
	}
	for i := 0; i < len(heldClaims); i += 32 {
		if err := t.k.Unprepare(ctx, heldClaims[i:min(i+32, len(heldClaims))]...); err != nil {
			return l, err
		}
	}
	return l, nil
}

// throughput runs callers loops of prepare+unprepare for d and returns
// cycles per second.
func (t *benchTarget) throughput(ctx context.Context, callers int, d time.Duration) (float64, error) {
	claims, err := t.claims(ctx, callers)
	if err != nil {
		return 0, err
	}
	var count atomic.Int64
	errs := make([]error, callers)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i, cl := range claims {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := t.k.Prepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
				if err := t.k.Unprepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(count.Load()) / time.Since(start).Seconds(), errors.Join(errs...)
}

// calls runs n prepare+unprepare cycles spread over callers claims.
func (t *benchTarget) calls(ctx context.Context, callers, n int) error {
	claims, err := t.claims(ctx, callers)
	if err != nil {
		return err
	}
	var next atomic.Int64
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i, cl := range claims {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := t.k.Prepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
				if err := t.k.Unprepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rssBytes reads this process's resident set size after a GC.
func rssBytes() (int64, error) {
	runtime.GC()
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(data), &size, &resident); err != nil {
		return 0, fmt.Errorf("parse /proc/self/statm: %w", err)
	}
	return resident * int64(os.Getpagesize()), nil
}

// measureFsync times a 1 KiB write+fsync+rename in dir.
func measureFsync(dir string, n int) (p50, p99 time.Duration, err error) {
	var d durations
	for i := range n {
		t0 := time.Now()
		if err := fsyncOnce(dir, int64(i)); err != nil {
			return 0, 0, err
		}
		d = append(d, time.Since(t0))
	}
	return d.p(50), d.p(99), nil
}

// fsyncOnce writes 1 KiB to a temporary file, fsyncs it and renames it.
func fsyncOnce(dir string, i int64) error {
	tmp := filepath.Join(dir, fmt.Sprintf("fsync-%d.tmp", i))
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, 1024))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("fsync-%d", i%16)))
	}
	return err
}

// noopPlugin is the floor: it answers every claim with its allocated
// devices and does nothing else.
// Each prepare call also writes, fsyncs and renames one 1 KiB file: the
// least a crash-safe driver must do.
type noopPlugin struct {
	dir string
	seq *atomic.Int64
}

func (p noopPlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if err := fsyncOnce(p.dir, p.seq.Add(1)); err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		for _, d := range c.Status.Allocation.Devices.Results {
			r.Devices = append(r.Devices, kubeletplugin.Device{Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device})
		}
		out[c.UID] = r
	}
	return out, nil
}

func (noopPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (noopPlugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).V(2).Info(msg, "err", err)
}

func (noopPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// envPreparer is the in-process driver's vendor part: one env var.
type envPreparer struct{}

func (envPreparer) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	return driver.PreparedDevice{Edits: (&cdi.Edits{}).Env("BENCH_DEVICE", dev.Device)}, nil
}

func (envPreparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil
}
