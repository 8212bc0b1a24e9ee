package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/topology"
)

// schedShape is one workload of "drakit bench sched": what every node
// publishes and what every pod claims.
type schedShape struct {
	name string
	// mig: the nodes are dynamic-MIG (else whole GPUs; simple: the
	// upstream shape).
	simple, mig bool
	// gang: pods come in PodGroups of gang pods, one rack each.
	gang int
	// devices per node of a simple shape (upstream: 10).
	devices int
	// profiles the MIG nodes advertise (the driver's -mig-profiles);
	// empty: its default, mig.DefaultProfiles.
	profiles []string
	// synth, when set, builds the shape in the bench (another driver's
	// published shape, or a candidate publication), in place of the
	// reference driver's slices.
	synth func() (*synthFleet, error)
	// standard: run when -shapes is not given.
	standard bool
}

var schedShapes = []schedShape{
	{name: "upstream simple (10 devices, 1 attribute)", simple: true, devices: 10, standard: true},
	// The reference driver's own slices with -mig-publication=placements
	// (the chart's default before the layout; "as shipped" in tables
	// measured then).
	{name: "nvidia 1g MIG, -mig-publication=placements", mig: true, standard: true},
	{name: "nvidia whole GPU (as shipped)"},
	{name: "nvidia whole GPU, gangs of 4 in one rack", gang: 4},
	// The ceiling of any shape that lists a dynamic-MIG node's
	// placements: upstream's devices, as many as a simulated DGX H200
	// with dynamic MIG on every GPU publishes (8 GPUs x 14 placements).
	{name: "upstream simple, 112 devices (a MIG node's count)", simple: true, devices: 112},
	// The administrator's lever: advertise only the profile claims ask
	// for (-mig-profiles 1g.18gb: 7 devices per GPU instead of 14).
	{name: "nvidia 1g MIG, -mig-profiles 1g.18gb", mig: true, profiles: []string{"1g.18gb"}},
	// The peer: NVIDIA's own driver with DynamicMIG, from its published
	// shape (bench_sched_shapes.go).
	{name: "NVIDIA DynamicMIG (its shape: 208 devices, 15 counters/GPU)", synth: nvidiaDynamicMIG, standard: true},
	// Candidate publications (issue 38), on the reference driver's
	// devices: (a) the planner's layout without counters, ...
	{name: "layout, no counters (56 devices, 1 pool)", synth: drakitFleet(layoutSlices(true))},
	{name: "layout, no counters, a pool per GPU", synth: drakitFleet(layoutSlices(false))},
	{name: "layout, no counters, 4 attributes, 2 capacities", synth: drakitFleet(edits(layoutSlices(true),
		keepAttributes(mig.AttrType, mig.AttrProfile, nvdriver.AttrParentUUID, topology.PCIeRootAttribute),
		keepCapacities("memory", "computeSlices")))},
	// ... (b) the next placement per profile, (c) with fewer counters,
	// (d) with fewer attributes.
	{name: "next placement per profile (48 devices, counters)", synth: drakitFleet(nextPlacementSlices)},
	{name: "next placement, memory-slice counters only", synth: drakitFleet(edits(nextPlacementSlices, memorySliceCountersOnly))},
	{name: "next placement, memory-slice counters, 2 attributes", synth: drakitFleet(edits(nextPlacementSlices, memorySliceCountersOnly,
		keepAttributes(mig.AttrType, mig.AttrProfile)))},
	// The reference driver's layout publication itself (the chart's
	// default), for 1g demand.
	{name: "nvidia 1g MIG, -mig-publication=layout", synth: drakitLayoutFleet, standard: true},
	// The reference driver's MPS shares: every GPU shared, a pool per
	// GPU (its counter set, the GPU whole and shared); pods ask for a
	// share of the default size (consumable capacity).
	{name: "nvidia MPS shares, -shared-gpus=all (8 pools, consumable capacity)",
		synth: drakitSharedFleet},
	// The same on the chart's allocation path (issue 46): the nodes'
	// layout ledgers and the layout webhook on every allocation write.
	{name: "nvidia 1g MIG, layout, ledgers and webhook (the chart's path)", synth: drakitLedgerFleet, standard: true},
}

// simpleDriver is upstream's scheduler_perf DRA driver name.
const simpleDriver = "test-driver.cdi.k8s.io"

const schedUsage = `Usage: drakit bench sched [flags]

Measures kube-scheduler 1.37's throughput on fake nodes of a local control
plane, as upstream's scheduler_perf does for DRA
(test/integration/scheduler_perf/dra): for each fleet size and shape, a
fresh control plane (kube-scheduler client QPS -qps), nodes created
cordoned, the pods and their claims created, then the nodes uncordoned;
the clock runs from the uncordon to the last pod bound. The shapes, each
on its own nodes and pods (* the standard ones, run when -shapes is not
given):

  1* upstream's simple-device shape (10 devices per node, one attribute),
     the base of the ratios
  2* the reference driver's own slices for a simulated DGX H200 with
     dynamic MIG on every GPU, one 1g MIG device per pod
  3  its slices for 8 whole GPUs, one GPU per pod
  4  shape 3's pods in gangs (PodGroups of 4 within one rack of 10 nodes)
  5  the simple shape with 112 devices per node, as many as shape 2 lists
     MIG placements: the ceiling of any shape that lists every placement
  6  shape 2 with only the 1g profile advertised (the driver's
     -mig-profiles 1g.18gb: 56 MIG devices per node instead of 112)
  7* NVIDIA's DRA driver with DynamicMIG, built from its published shape:
     one pool per node, 26 devices per H200 (208 per node), 15 counters
     per GPU, 13 attributes and 7 capacities per MIG device; its class
     mig.nvidia.com with the profile selected in the request
  Candidate publications of a dynamic-MIG node (issue 38), built from
  shape 2's devices:
  8  each GPU's free space laid out by the planner (seven 1g devices for
     1g demand) and published without counters: 56 devices, one pool of
     one slice per node
  9  shape 8 with a pool (of one slice) per GPU
  10 shape 8 with 4 attributes (type, profile, parentUUID, pcieRoot) and
     2 capacities (memory, computeSlices)
  11 the full GPU and the next placement of each profile, with the
     shipped counters: 48 devices, a pool per GPU
  12 shape 11 consuming only memory-slice counters
  13 shape 12 with 2 attributes (type, profile)
  14* the reference driver's own layout publication (-mig-publication=layout)
     while claims ask for 1g devices: seven 1g devices per GPU, 56 per
     node, one pool of one slice, no counters (shape 8, made by the driver)
  15 the reference driver's MPS shares (-shared-gpus=all): a pool per GPU
     with its counter set, the GPU whole and shared (consumable memory and
     compute); every pod asks for a share of the default size
  16* shape 14 on the chart's allocation path: every node's layout ledger
     (seeded, its devices open) and the layout webhook (by URL, failure
     policy Fail) admitting each allocation write through the ledger

Every shape runs -runs times, interleaved (run 1 of every shape, then run
2, ...), so that a change of the machine's load hits each run's shapes
alike. It prints pods/s and the scheduler's CPU time per pod (from /proc),
and their ratios to the simple shape of the same run: the median and
[min-max] over the runs. With -pool-cache every shape also runs, right
after itself, on kube-scheduler-poolcache (kube-scheduler with a cache of
the pools GatherPools converts and validates; "drakit setup
-scheduler-pool-cache" builds it), with its ratio to the same shape on the
stock scheduler. With -cpuprofile it keeps a CPU profile of kube-scheduler
for each shape's first run (go tool pprof -top FILE).

Flags:
`

func runBenchSched(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench sched", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, schedUsage)
		fs.PrintDefaults()
	}
	nodesFlag := fs.String("nodes", "100,500", "comma-separated fleet sizes")
	podsPerNode := fs.Float64("pods-per-node", 2, "pods per node of each shape (upstream: 10 on 500 nodes)")
	qps := fs.Int("qps", 5000, "kube-scheduler's client QPS and burst")
	shapesFlag := fs.String("shapes", "", "comma-separated shape numbers to run (see above), or \"all\"; default the standard ones (1,2,7,14,16)")
	poolCache := fs.Bool("pool-cache", false, "also run every shape on "+poolCacheScheduler+" (built by drakit setup -scheduler-pool-cache), right after the stock scheduler")
	runs := fs.Int("runs", 3, "runs of every shape, interleaved (run 1 of every shape, then run 2, ...); the table gives the median and [min-max]")
	profDir := fs.String("cpuprofile", "", "folder to write kube-scheduler CPU profiles to (sched-<nodes>-<shape>.pprof, first run only; read with go tool pprof -top)")
	profSec := fs.Int("profile-seconds", 20, "seconds of each CPU profile, from the uncordon")
	dir := fs.String("dir", "", "folder of the clusters' state (default: a temporary folder, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sizes []int
	for _, f := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: -nodes: %q is not a positive number", errUsage, f)
		}
		sizes = append(sizes, n)
	}
	var shapes []schedShape
	var ids []int
	switch *shapesFlag {
	case "", "all":
		for i, sh := range schedShapes {
			if sh.standard || *shapesFlag == "all" {
				shapes = append(shapes, sh)
				ids = append(ids, i+1)
			}
		}
	default:
		for _, f := range strings.Split(*shapesFlag, ",") {
			i, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || i < 1 || i > len(schedShapes) {
				return fmt.Errorf("%w: -shapes: %q is not 1..%d", errUsage, f, len(schedShapes))
			}
			shapes = append(shapes, schedShapes[i-1])
			ids = append(ids, i)
		}
	}
	if *podsPerNode <= 0 || *qps < 1 || *runs < 1 || *profSec < 1 {
		return fmt.Errorf("%w: -pods-per-node, -qps, -runs and -profile-seconds must be positive", errUsage)
	}
	for _, sh := range shapes {
		if sh.simple && *podsPerNode > float64(sh.devices) {
			return fmt.Errorf("%w: -pods-per-node %g exceeds the %d devices of a node of shape %q", errUsage, *podsPerNode, sh.devices, sh.name)
		}
	}
	if *profDir != "" {
		if err := os.MkdirAll(*profDir, 0o755); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	// rows: every shape, and with -pool-cache each shape again on the
	// patched scheduler right after it.
	type row struct {
		shape     schedShape
		id        int
		poolCache bool
	}
	var rows []row
	binDir := ""
	if *poolCache {
		var cleanup func()
		var err error
		if binDir, cleanup, err = poolCacheBinDir(); err != nil {
			return err
		}
		defer cleanup()
	}
	for i, sh := range shapes {
		rows = append(rows, row{sh, ids[i], false})
		if *poolCache {
			rows = append(rows, row{sh, ids[i], true})
		}
	}
	tw := tabwriter.NewWriter(stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	header := "nodes\tshape\tpods\tpods/s\tvs simple\tscheduler CPU ms/pod\tvs simple\t"
	if *poolCache {
		header += "pods/s vs stock\tCPU/pod vs stock\t"
	}
	fmt.Fprintln(tw, header)
	for _, n := range sizes {
		// res[run][row]: the rows of one run follow each other, so a
		// change of the machine's load hits every row of that run.
		res := make([][]schedResult, *runs)
		for run := range *runs {
			for _, r := range rows {
				prof, bins, name := "", "", r.shape.name
				if r.poolCache {
					bins, name = binDir, name+" [pool cache]"
				}
				if *profDir != "" && run == 0 {
					suffix := ""
					if r.poolCache {
						suffix = "-poolcache"
					}
					prof = filepath.Join(*profDir, fmt.Sprintf("sched-%d-%d%s.pprof", n, r.id, suffix))
				}
				fmt.Fprintf(stderr, "bench sched: %d nodes, %s, run %d of %d\n", n, name, run+1, *runs)
				out, err := benchSchedOne(ctx, *dir, bins, n, int(float64(n)**podsPerNode), *qps, r.shape, prof, time.Duration(*profSec)*time.Second, stderr)
				if err != nil {
					return fmt.Errorf("%d nodes, %s, run %d: %w", n, name, run+1, err)
				}
				fmt.Fprintf(stderr, "bench sched: %d nodes, %s, run %d: %.1f pods/s, %.1f ms scheduler CPU per pod\n", n, name, run+1, out.podsPerSec, out.cpuPerPod*1000)
				res[run] = append(res[run], out)
			}
		}
		base := slices.IndexFunc(rows, func(r row) bool { return r.shape.simple && r.shape.devices == 10 && !r.poolCache })
		for ri, r := range rows {
			var rate, cpu, vs, vsCPU, vsStock, vsStockCPU []float64
			for run := range *runs {
				o := res[run][ri]
				rate = append(rate, o.podsPerSec)
				cpu = append(cpu, o.cpuPerPod*1000)
				if base >= 0 {
					b := res[run][base]
					vs = append(vs, o.podsPerSec/b.podsPerSec)
					vsCPU = append(vsCPU, o.cpuPerPod/b.cpuPerPod)
				}
				if r.poolCache {
					stock := res[run][ri-1]
					vsStock = append(vsStock, o.podsPerSec/stock.podsPerSec)
					vsStockCPU = append(vsStockCPU, o.cpuPerPod/stock.cpuPerPod)
				}
			}
			v, vc := "-", "-"
			if base >= 0 {
				v, vc = spread(vs, "x"), spread(vsCPU, "x")
			}
			name := r.shape.name
			if r.poolCache {
				name += " [pool cache]"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t", n, name, res[0][ri].pods, spread(rate, ""), v, spread(cpu, ""), vc)
			switch {
			case r.poolCache:
				fmt.Fprintf(tw, "%s\t%s\t", spread(vsStock, "x"), spread(vsStockCPU, "x"))
			case *poolCache:
				fmt.Fprint(tw, "-\t-\t")
			}
			fmt.Fprintln(tw)
		}
		// Each fleet size's rows as soon as they are measured.
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// poolCacheBinDir makes a folder with the cluster's binaries in which
// kube-scheduler is kube-scheduler-poolcache, for cluster.WithBinDir; the
// function it returns removes it.
func poolCacheBinDir() (string, func(), error) {
	src := cluster.BinDir()
	patched := filepath.Join(src, poolCacheScheduler)
	if _, err := os.Stat(patched); err != nil {
		return "", nil, fmt.Errorf("-pool-cache needs %s: run drakit setup -scheduler-pool-cache first: %w", patched, err)
	}
	dir, err := os.MkdirTemp("", "drakit-poolcache-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	entries, err := os.ReadDir(src)
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("read %s: %w", src, err)
	}
	for _, e := range entries {
		target := filepath.Join(src, e.Name())
		if e.Name() == "kube-scheduler" {
			target = patched
		}
		if err := os.Symlink(target, filepath.Join(dir, e.Name())); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("link %s: %w", e.Name(), err)
		}
	}
	return dir, cleanup, nil
}

type schedResult struct {
	pods       int
	podsPerSec float64
	cpuPerPod  float64 // seconds
}

// benchSchedOne runs one shape on n fresh nodes of a fresh control plane,
// with the binaries of binDir (empty: cluster.BinDir()). With prof set,
// it writes a CPU profile of kube-scheduler to that file, sampled for
// profDur from the uncordon.
func benchSchedOne(ctx context.Context, dir, binDir string, n, pods, qps int, sh schedShape, prof string, profDur time.Duration, progress io.Writer) (res schedResult, err error) {
	opts := []cluster.Option{cluster.WithSchedulerClient(float32(qps), qps), cluster.WithDieWithParent(), cluster.WithLogWriter(io.Discard)}
	if dir != "" {
		opts = append(opts, cluster.WithDir(dir))
	}
	if binDir != "" {
		opts = append(opts, cluster.WithBinDir(binDir))
	}
	if sh.gang > 0 {
		opts = append(opts, cluster.WithGangScheduling())
	}
	c, err := cluster.Start(ctx, opts...)
	if err != nil {
		return res, fmt.Errorf("start control plane: %w", err)
	}
	defer func() { err = errors.Join(err, c.Stop()) }()
	cs := c.Client
	fmt.Fprintf(progress, "bench sched: %d nodes, %s: publishing\n", n, sh.name)

	// Slices: the simple shape's, or the reference driver's for one node,
	// renamed for each node (the driver's Inventory is the same for every
	// node of a model but for the pool and node names).
	var profiles []string
	var proto *device.Inventory
	var synth *synthFleet
	switch {
	case sh.synth != nil:
		if synth, err = sh.synth(); err != nil {
			return res, err
		}
	case !sh.simple:
		if proto, profiles, err = fleetInventory("dgx-h200", "proto", sh.mig, sh.profiles...); err != nil {
			return res, err
		}
	}
	if err := parallel(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("node-%04d", i)
		labels := map[string]string{topology.RackLabel: fmt.Sprintf("rack-%03d", i/10)}
		if err := c.AddFakeNode(ctx, name, labels, nil); err != nil {
			return err
		}
		if err := setUnschedulable(ctx, cs, name, true); err != nil {
			return err
		}
		var ss []*resourceapi.ResourceSlice
		switch {
		case synth != nil:
			ss = synth.slices(name)
		case sh.simple:
			p := device.Pool{Name: name}
			for d := range sh.devices {
				p.Devices = append(p.Devices, device.New(fmt.Sprintf("dev-%d", d)).StringAttribute("dra.example.com/slice", "big"))
			}
			ss = (&device.Inventory{Driver: simpleDriver, Pools: []device.Pool{p}}).ResourceSlices(name)
		default:
			ss = driverSlices(proto, nil)(name)
		}
		for _, s := range ss {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("publish slice %s: %w", s.Name, err)
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	if synth != nil && synth.setup != nil {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("node-%04d", i)
		}
		stop, err := synth.setup(ctx, cs, names, synth.slices)
		if err != nil {
			return res, err
		}
		defer stop()
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "simple"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", simpleDriver)}}}}}
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	classes := nvdriver.DeviceClasses(profiles)
	request := resourceapi.ExactDeviceRequest{DeviceClassName: "simple"}
	switch {
	case synth != nil:
		classes, request = synth.classes, synth.request
	case sh.mig:
		request.DeviceClassName = nvdriver.ProfileClass(profiles[0])
	case !sh.simple:
		request.DeviceClassName = nvdriver.ClassGPU
	}
	for _, cl := range classes {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, cl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return res, err
		}
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "d", Exactly: &request}}}}}}
	if _, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "bench sched: %d nodes, %s: creating %d pods\n", n, sh.name, pods)
	for g := 0; sh.gang > 0 && g*sh.gang < pods; g++ {
		pg, err := topology.PodGroup("default", fmt.Sprintf("gang-%04d", g), int32(sh.gang), topology.LevelRack)
		if err != nil {
			return res, err
		}
		if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("create PodGroup %s: %w", pg.Name, err)
		}
	}
	if err := parallel(ctx, pods, func(ctx context.Context, i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: "default"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "d"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "d", ResourceClaimTemplateName: ptr.To("one")}},
			},
		}
		if sh.gang > 0 {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(fmt.Sprintf("gang-%04d", i/sh.gang))}
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		return nil
	}); err != nil {
		return res, err
	}
	// The clock runs for the scheduler only: every pod's claim is made
	// (by the controller manager, from the template) before the uncordon.
	if err := poll(ctx, 10*time.Minute, func(ctx context.Context) (bool, error) {
		claims, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && len(claims.Items) == pods, err
	}); err != nil {
		return res, fmt.Errorf("wait for the pods' %d claims: %w", pods, err)
	}
	st, err := cluster.ReadStatus(c.Dir)
	if err != nil {
		return res, err
	}
	pid := 0
	for _, comp := range st.Components {
		if comp.Name == "kube-scheduler" {
			pid = comp.PID
		}
	}
	cpu0, err := procCPU(pid)
	if err != nil {
		return res, err
	}
	profDone := make(chan error, 1)
	if prof != "" {
		go func() {
			data, err := c.SchedulerCPUProfile(ctx, profDur)
			if err == nil {
				err = os.WriteFile(prof, data, 0o644)
			}
			profDone <- err
		}()
	} else {
		profDone <- nil
	}
	t0 := time.Now()
	if err := parallel(ctx, n, func(ctx context.Context, i int) error {
		return setUnschedulable(ctx, cs, fmt.Sprintf("node-%04d", i), false)
	}); err != nil {
		return res, err
	}
	var done time.Time
	if err := poll(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
		bound, err := countBound(ctx, cs, "default", metav1.ListOptions{ResourceVersion: "0"})
		done = time.Now()
		return bound == pods, err
	}); err != nil {
		return res, fmt.Errorf("wait for %d pods to be bound: %w", pods, err)
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return res, err
	}
	took := done.Sub(t0)
	if err := <-profDone; err != nil {
		return res, err
	}
	return schedResult{pods: pods, podsPerSec: float64(pods) / took.Seconds(), cpuPerPod: (cpu1 - cpu0).Seconds() / float64(pods)}, nil
}

func setUnschedulable(ctx context.Context, cs kubernetes.Interface, node string, v bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v)
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("cordon node %s: %w", node, err)
	}
	return nil
}

// countBound counts the pods of namespace ns (filtered by opts) that the
// scheduler has bound to a node.
func countBound(ctx context.Context, cs kubernetes.Interface, ns string, opts metav1.ListOptions) (int, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return 0, err
	}
	bound := 0
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	return bound, nil
}

// parallel runs f(ctx, 0) to f(ctx, n-1) on 8 goroutines and returns the
// first error; after an error, f is called for no further index.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	if err == nil {
		err = ctx.Err() // only the caller's ctx can have ended it
	}
	return err
}
