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
}

var schedShapes = []schedShape{
	{name: "upstream simple (10 devices, 1 attribute)", simple: true, devices: 10},
	{name: "nvidia 1g MIG (as shipped)", mig: true},
	{name: "nvidia whole GPU (as shipped)"},
	{name: "nvidia whole GPU, gangs of 4 in one rack", gang: 4},
	// The ceiling of any shape that lists a dynamic-MIG node's
	// placements: upstream's devices, as many as a simulated DGX H200
	// with dynamic MIG on every GPU publishes (8 GPUs x 14 placements).
	{name: "upstream simple, 112 devices (a MIG node's count)", simple: true, devices: 112},
	// The administrator's lever: advertise only the profile claims ask
	// for (-mig-profiles 1g.18gb: 7 devices per GPU instead of 14).
	{name: "nvidia 1g MIG, -mig-profiles 1g.18gb", mig: true, profiles: []string{"1g.18gb"}},
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
on its own nodes and pods:

  1  upstream's simple-device shape (10 devices per node, one attribute),
     the base of the ratios
  2  the reference driver's own slices for a simulated DGX H200 with
     dynamic MIG on every GPU, one 1g MIG device per pod
  3  its slices for 8 whole GPUs, one GPU per pod
  4  shape 3's pods in gangs (PodGroups of 4 within one rack of 10 nodes)
  5  the simple shape with 112 devices per node, as many as shape 2: the
     ceiling of any shape that lists every placement
  6  shape 2 with only the 1g profile advertised (the driver's
     -mig-profiles 1g.18gb: 56 devices per node instead of 112)

Every shape runs -runs times, interleaved (run 1 of every shape, then run
2, ...), so that a change of the machine's load hits each run's shapes
alike. It prints pods/s and the scheduler's CPU time per pod (from /proc),
and their ratios to the simple shape of the same run: the median and
[min-max] over the runs. With -cpuprofile it keeps a CPU profile of
kube-scheduler for each shape's first run (go tool pprof -top FILE).

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
	shapesFlag := fs.String("shapes", "", "comma-separated shape numbers to run (1: simple, 2: 1g MIG, 3: whole GPU, 4: gang, 5: simple with 112 devices, 6: 1g MIG with only 1g advertised); default all")
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
		if err != nil || n < 10 {
			return fmt.Errorf("%w: -nodes: %q is not a number of at least 10", errUsage, f)
		}
		sizes = append(sizes, n)
	}
	shapes := schedShapes
	var ids []int
	if *shapesFlag != "" {
		shapes = nil
		for _, f := range strings.Split(*shapesFlag, ",") {
			i, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || i < 1 || i > len(schedShapes) {
				return fmt.Errorf("%w: -shapes: %q is not 1..%d", errUsage, f, len(schedShapes))
			}
			shapes = append(shapes, schedShapes[i-1])
			ids = append(ids, i)
		}
	} else {
		for i := range schedShapes {
			ids = append(ids, i+1)
		}
	}
	if *podsPerNode <= 0 || *qps < 1 || *runs < 1 || *profSec < 1 {
		return fmt.Errorf("%w: -pods-per-node, -qps, -runs and -profile-seconds must be positive", errUsage)
	}
	if *profDir != "" {
		if err := os.MkdirAll(*profDir, 0o755); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	tw := tabwriter.NewWriter(stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "nodes\tshape\tpods\tpods/s\tvs simple\tscheduler CPU ms/pod\tvs simple\t\n")
	for _, n := range sizes {
		// res[run][shape]: the shapes of one run follow each other, so a
		// change of the machine's load hits every shape of that run.
		res := make([][]schedResult, *runs)
		for run := range *runs {
			for si, sh := range shapes {
				prof := ""
				if *profDir != "" && run == 0 {
					prof = filepath.Join(*profDir, fmt.Sprintf("sched-%d-%d.pprof", n, ids[si]))
				}
				fmt.Fprintf(stderr, "bench sched: %d nodes, %s, run %d of %d\n", n, sh.name, run+1, *runs)
				r, err := benchSchedOne(ctx, *dir, n, int(float64(n)**podsPerNode), *qps, sh, prof, time.Duration(*profSec)*time.Second, stderr)
				if err != nil {
					return fmt.Errorf("%d nodes, %s, run %d: %w", n, sh.name, run+1, err)
				}
				fmt.Fprintf(stderr, "bench sched: %d nodes, %s, run %d: %.1f pods/s, %.1f ms scheduler CPU per pod\n", n, sh.name, run+1, r.podsPerSec, r.cpuPerPod*1000)
				res[run] = append(res[run], r)
			}
		}
		base := slices.IndexFunc(shapes, func(s schedShape) bool { return s.simple && s.devices == 10 })
		for si, sh := range shapes {
			var rate, cpu, vs, vsCPU []float64
			for run := range *runs {
				r := res[run][si]
				rate = append(rate, r.podsPerSec)
				cpu = append(cpu, r.cpuPerPod*1000)
				if base >= 0 {
					b := res[run][base]
					vs = append(vs, r.podsPerSec/b.podsPerSec)
					vsCPU = append(vsCPU, r.cpuPerPod/b.cpuPerPod)
				}
			}
			v, vc := "-", "-"
			if base >= 0 {
				v, vc = spread(vs, "x"), spread(vsCPU, "x")
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", n, sh.name, res[0][si].pods, spread(rate, ""), v, spread(cpu, ""), vc)
		}
		// Each fleet size's rows as soon as they are measured.
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

type schedResult struct {
	pods       int
	podsPerSec float64
	cpuPerPod  float64 // seconds
}

// benchSchedOne runs one shape on n fresh nodes of a fresh control plane.
// With prof set, it writes a CPU profile of kube-scheduler to that file,
// sampled for profDur from the uncordon.
func benchSchedOne(ctx context.Context, dir string, n, pods, qps int, sh schedShape, prof string, profDur time.Duration, progress io.Writer) (res schedResult, err error) {
	opts := []cluster.Option{cluster.WithSchedulerClient(float32(qps), qps), cluster.WithDieWithParent(), cluster.WithLogWriter(io.Discard)}
	if dir != "" {
		opts = append(opts, cluster.WithDir(dir))
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
	if !sh.simple {
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
		var inv *device.Inventory
		if sh.simple {
			p := device.Pool{Name: name}
			for d := range sh.devices {
				p.Devices = append(p.Devices, device.New(fmt.Sprintf("dev-%d", d)).StringAttribute("dra.example.com/slice", "big"))
			}
			inv = &device.Inventory{Driver: simpleDriver, Pools: []device.Pool{p}}
		} else {
			inv = proto.Clone()
			for pi := range inv.Pools {
				inv.Pools[pi].Name = strings.Replace(inv.Pools[pi].Name, "proto", name, 1)
			}
		}
		for _, s := range inv.ResourceSlices(name) {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("publish slice %s: %w", s.Name, err)
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "simple"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", simpleDriver)}}}}}
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	for _, cl := range nvdriver.DeviceClasses(profiles) {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, cl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return res, err
		}
	}
	className := "simple"
	switch {
	case sh.mig:
		className = nvdriver.ProfileClass(profiles[0])
	case !sh.simple:
		className = nvdriver.ClassGPU
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "d", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: className}}}}}}}
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
