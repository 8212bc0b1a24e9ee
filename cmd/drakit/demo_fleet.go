package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/topology"
)

// fleetConfig sizes "drakit demo -fleet".
type fleetConfig struct {
	dir string
	// racks of rackSize fake nodes each; the first half of the racks
	// (rounded up) have whole GPUs, the others dynamic MIG.
	racks, rackSize int
	// server is the simulated server of every node (nvmlsim.Servers).
	server string
	// migPods is the number of one-1g pods spread over the MIG racks.
	migPods int
	// schedQPS is kube-scheduler's client QPS and burst.
	schedQPS int
	// realNode adds the real node (kubelet, containerd) with the
	// reference driver as a process on a simulated server (fleetRealSim):
	// the pods pinned to it run; runFleet needs a cluster started with
	// cluster.WithNode.
	realNode bool
}

// fleetFakeLabel marks the fleet's fake nodes; the pods that are only
// scheduled (gangs, MIG pods over the fleet) select it, so none of them
// lands on the real node, where it would be started.
const fleetFakeLabel = "fleet.drakit.dev/fake-node"

// fleetDriverCmd is "drakit demo fleet-driver ...": the reference driver
// (examples/nvidia/drivercmd) in a process of its own, for the fleet's
// real node. Not for people.
const fleetDriverCmd = "fleet-driver"

// fleetRealMIGGPUs are the simulated server's GPUs with dynamic MIG on
// the real node; the others are whole GPUs.
const fleetRealMIGGPUs = "4-7"

// fleetRealDynamicGPUs names them dynamic (-dynamic-mig-gpus).
const fleetRealDynamicGPUs = "4,5,6,7"

// fleetNS is the fleet demo's namespace.
const fleetNS = "fleet"

// fleetNode is one fake node of the fleet.
type fleetNode struct {
	name, rack string
	mig        bool // dynamic MIG on every GPU; else whole GPUs
	devices    int
	slices     int
}

// fleetResult is what the fleet demo checked, for its test.
type fleetResult struct {
	nodes      []fleetNode
	rackOf     map[string]string
	gangFits   []string // pods of the gang that fits a rack
	gangTooBig []string // pods of the gang that fits the fleet but no rack
	migPods    []string
	podsPerSec float64
	// realPod ran on the real node; realEnv is what its container saw,
	// realDevice the device its claim got.
	realPod, realEnv, realDevice string
}

// demoFleet runs the fleet demo on a control plane of its own.
func demoFleet(ctx context.Context, cfg fleetConfig, out, progress io.Writer) (err error) {
	fmt.Fprintf(out, "drakit demo -fleet: the reference NVIDIA driver's slices on %d fake nodes in %d racks, gang scheduling, MIG at fleet scale (Kubernetes %s)\n",
		cfg.racks*cfg.rackSize, cfg.racks, cluster.Version)
	if cfg.realNode {
		fmt.Fprintln(out, "One node is real (kubelet, containerd, the reference driver as a process on a simulated DGX H200): the pod pinned to it runs. Every other node is a fake node (a Node object, no kubelet): there the real kube-scheduler allocates and binds, and no pod runs.")
	} else {
		fmt.Fprintln(out, "Every node here is a fake node (a Node object, no kubelet): the real kube-scheduler allocates and binds, no pod runs.")
	}
	t0 := time.Now()
	opts := []cluster.Option{cluster.WithDir(cfg.dir), cluster.WithLogWriter(progress), cluster.WithDieWithParent(),
		cluster.WithGangScheduling(), cluster.WithSchedulerClient(float32(cfg.schedQPS), cfg.schedQPS)}
	if cfg.realNode {
		opts = append(opts, cluster.WithNode())
	}
	c, err := cluster.Start(ctx, opts...)
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	defer func() {
		fmt.Fprintln(out, "stopping the control plane")
		err = errors.Join(err, c.Stop())
		fmt.Fprintf(out, "logs are kept in %s/logs\n", c.Dir)
	}()
	fmt.Fprintf(out, "control plane up in %s: gang and topology-aware scheduling on, kube-scheduler client QPS %d\n", since(t0), cfg.schedQPS)
	if cfg.realNode {
		fmt.Fprintf(out, "real node %s up (kubelet, containerd)\n", c.NodeName)
	}
	_, err = runFleet(ctx, c, cfg, out)
	return err
}

// runFleet builds the fleet on c and runs the demo's steps, checking each
// through the API.
func runFleet(ctx context.Context, c *cluster.Cluster, cfg fleetConfig, out io.Writer) (*fleetResult, error) {
	cs := c.Client
	res := &fleetResult{rackOf: map[string]string{}}
	step := func(format string, args ...any) { fmt.Fprintf(out, "- "+format+"\n", args...) }

	if cfg.realNode {
		if c.NodeName == "" {
			return nil, fmt.Errorf("the fleet's real node: the cluster has none (start it with cluster.WithNode)")
		}
		drv, err := startFleetDriver(c)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := drv.stop(); err != nil {
				fmt.Fprintf(out, "- stopping the real node's driver: %v\n", err)
			}
		}()
	}

	t0 := time.Now()
	var profiles []string
	for r := range cfg.racks {
		rack := fmt.Sprintf("rack-%c", 'a'+r)
		isMIG := r >= (cfg.racks+1)/2
		for i := range cfg.rackSize {
			n := fleetNode{name: fmt.Sprintf("%s-%d", rack, i), rack: rack, mig: isMIG}
			labels := map[string]string{topology.RackLabel: rack, topology.InterconnectDomainLabel: "nvl-" + rack[len(rack)-1:], fleetFakeLabel: "true"}
			if err := c.AddFakeNode(ctx, n.name, labels, nil); err != nil {
				return nil, err
			}
			inv, profs, err := fleetInventory(cfg.server, n.name, isMIG)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", n.name, err)
			}
			profiles = profs
			for _, s := range inv.ResourceSlices(n.name) {
				if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
					return nil, fmt.Errorf("node %s: publish slice %s: %w", n.name, s.Name, err)
				}
				n.slices++
				n.devices += len(s.Spec.Devices)
			}
			res.nodes = append(res.nodes, n)
			res.rackOf[n.name] = rack
		}
	}
	for _, class := range nvdriver.DeviceClasses(profiles) {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create DeviceClass %s: %w", class.Name, err)
		}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(fleetNS).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("wait for the default ServiceAccount of %s: %w", fleetNS, err)
	}
	whole, migN := fleetCount(res.nodes)
	step("%d fake nodes labelled %s and %s (racks of %d), each with the reference driver's own slices for a simulated %s (its Inventory, run per node, published through the API server) in %s:",
		len(res.nodes), topology.RackLabel, topology.InterconnectDomainLabel, cfg.rackSize, cfg.server, since(t0))
	for _, rack := range fleetRacks(res.nodes) {
		n := rack[0]
		kind := "8 whole GPUs"
		if n.mig {
			kind = "8 dynamic-MIG GPUs"
		}
		step("  %s: %d nodes of %s, %d devices in %d slices per node", n.rack, len(rack), kind, n.devices, n.slices)
	}
	if cfg.realNode {
		if err := fleetRealPod(ctx, c, profiles, res, step); err != nil {
			return nil, err
		}
	}

	// A gang of whole-GPU pods that fits one rack: all land in one.
	gpusPerNode := 8
	fitSize := int32(cfg.rackSize - 1)
	if fitSize < 2 {
		fitSize = 2
	}
	perPod := gpusPerNode
	t0 = time.Now()
	pods, err := fleetGang(ctx, cs, "train-a", fitSize, perPod)
	if err != nil {
		return nil, err
	}
	res.gangFits = pods
	nodes := map[string]string{}
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			pod, err := cs.CoreV1().Pods(fleetNS).Get(ctx, p, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if pod.Spec.NodeName == "" {
				return false, nil
			}
			nodes[p] = pod.Spec.NodeName
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("wait for gang train-a to be bound: %w", err)
	}
	racks := map[string]bool{}
	var where []string
	for _, p := range pods {
		racks[res.rackOf[nodes[p]]] = true
		where = append(where, p+"->"+nodes[p])
	}
	if len(racks) != 1 {
		return nil, fmt.Errorf("gang train-a spread over racks %v: %s", racks, strings.Join(where, " "))
	}
	step("gang train-a (PodGroup, minCount %d, topology %s; each pod a claim for %d whole GPUs) bound all-or-none in one rack in %s: %s",
		fitSize, topology.RackLabel, perPod, since(t0), strings.Join(where, " "))

	// A gang that fits the fleet's free whole GPUs but no rack: none bound.
	free := (whole - int(fitSize)) // free whole-GPU nodes in the fleet
	tooBig := int32(cfg.rackSize + 1)
	if int(tooBig) > free {
		return nil, fmt.Errorf("fleet too small for the second gang: %d free whole-GPU nodes, need %d (more racks)", free, tooBig)
	}
	t0 = time.Now()
	pods, err = fleetGang(ctx, cs, "train-b", tooBig, perPod)
	if err != nil {
		return nil, err
	}
	res.gangTooBig = pods
	var reason string
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pg, err := cs.SchedulingV1beta1().PodGroups(fleetNS).Get(ctx, "train-b", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range pg.Status.Conditions {
			if cond.Type == schedulingv1beta1.PodGroupInitiallyScheduled && cond.Status == metav1.ConditionFalse && cond.Reason == schedulingv1beta1.PodGroupReasonUnschedulable {
				reason = cond.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return nil, fmt.Errorf("wait for gang train-b to be reported unschedulable: %w", err)
	}
	var bound []string
	for _, p := range pods {
		pod, err := cs.CoreV1().Pods(fleetNS).Get(ctx, p, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if pod.Spec.NodeName != "" {
			bound = append(bound, p+"->"+pod.Spec.NodeName)
		}
	}
	if len(bound) > 0 {
		return nil, fmt.Errorf("gang train-b fits no rack but has bound pods: %s", strings.Join(bound, " "))
	}
	step("gang train-b (%d pods x %d GPUs: the fleet has %d free whole-GPU nodes, no rack has %d) stays Pending as a whole, none of its pods bound (%s): %s",
		tooBig, perPod, free, tooBig, since(t0), firstLine(reason))

	// MIG pods spread over the fleet: pods/s and the packing per GPU.
	if cfg.migPods > 0 && migN > 0 {
		tmpl := &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "one-1g", Namespace: fleetNS},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ProfileClass(profiles[0])}}},
			}}},
		}
		if _, err := cs.ResourceV1().ResourceClaimTemplates(fleetNS).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create ResourceClaimTemplate: %w", err)
		}
		t0 = time.Now()
		for i := range cfg.migPods {
			p := fleetPod(fmt.Sprintf("mig-%03d", i))
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: ptr.To("one-1g")}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "mig"}}
			if _, err := cs.CoreV1().Pods(fleetNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("create pod %s: %w", p.Name, err)
			}
			res.migPods = append(res.migPods, p.Name)
		}
		var last time.Time
		if err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
			n, err := countBound(ctx, cs, fleetNS, metav1.ListOptions{LabelSelector: "fleet-demo=mig"})
			last = time.Now()
			return n == cfg.migPods, err
		}); err != nil {
			return nil, fmt.Errorf("wait for the MIG pods to be bound: %w", err)
		}
		took := last.Sub(t0)
		res.podsPerSec = float64(cfg.migPods) / took.Seconds()
		layout, err := fleetLayouts(ctx, cs)
		if err != nil {
			return nil, err
		}
		step("%d pods, each a claim for one %s, bound in %s: %.1f pods/s (the scheduler's allocator and binding, measured to the last bound pod, 200 ms polling)",
			cfg.migPods, profiles[0], took.Round(10*time.Millisecond), res.podsPerSec)
		step("where they went (per node, each GPU's 1g placements in use; the driver publishes each GPU as a pool of its own in the planner's order, so the scheduler fills a node's GPUs one by one, packing each):")
		for _, n := range res.nodes {
			if l, ok := layout[n.name]; ok {
				step("  %s: %s", n.name, l)
			}
		}
	}
	return res, nil
}

// fleetInventory is the reference driver's inventory for node on a fresh
// simulated server, every GPU dynamic MIG or every GPU whole, and the
// advertised profiles of its MIG GPUs: the driver's default
// (mig.DefaultProfiles), or profiles when given (its -mig-profiles).
func fleetInventory(server, node string, isMIG bool, profiles ...string) (*device.Inventory, []string, error) {
	return fleetInventoryWith(server, node, isMIG, nil, profiles...)
}

// fleetInventoryWith is fleetInventory with more driver options.
func fleetInventoryWith(server, node string, isMIG bool, more []nvdriver.Option, profiles ...string) (*device.Inventory, []string, error) {
	dir, err := os.MkdirTemp("", "drakit-fleet-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer(server), nvmlsim.WithMIGEnabled(isMIG))
	if err != nil {
		return nil, nil, err
	}
	defer sim.Close()
	opts := []nvdriver.Option{nvdriver.WithStateDir(filepath.Join(dir, "state"))}
	if isMIG {
		dynamic, err := allGPUs(sim)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, nvdriver.WithDynamicGPUs(dynamic...))
	}
	if len(profiles) > 0 {
		opts = append(opts, nvdriver.WithProfiles(profiles))
	} else {
		profiles = mig.DefaultProfiles(sim.Product())
	}
	d, err := nvdriver.New(sim, node, append(opts, more...)...)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	inv, err := d.Inventory(context.Background())
	if err != nil {
		return nil, nil, err
	}
	return inv, profiles, nil
}

// fleetGang creates a PodGroup of size pods constrained to one rack and
// its pods, each with a claim for perPod whole GPUs.
func fleetGang(ctx context.Context, cs kubernetes.Interface, name string, size int32, perPod int) ([]string, error) {
	pg, err := topology.PodGroup(fleetNS, name, size, topology.LevelRack)
	if err != nil {
		return nil, err
	}
	created, err := cs.SchedulingV1beta1().PodGroups(fleetNS).Create(ctx, pg, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create PodGroup %s: %w", name, err)
	}
	if created.Spec.SchedulingConstraints == nil || len(created.Spec.SchedulingConstraints.Topology) != 1 {
		return nil, fmt.Errorf("PodGroup %s lost its topology constraint (is TopologyAwareWorkloadScheduling on?)", name)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus", Namespace: fleetNS},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ClassGPU, Count: int64(perPod)}}},
		}}},
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(fleetNS).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create ResourceClaimTemplate %s: %w", tmpl.Name, err)
	}
	var pods []string
	for i := range size {
		p := fleetPod(fmt.Sprintf("%s-%d", name, i))
		p.Labels = map[string]string{"fleet-demo": "gang"}
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(tmpl.Name)}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		if _, err := cs.CoreV1().Pods(fleetNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		pods = append(pods, p.Name)
	}
	return pods, nil
}

// fleetPod is a pod for a fake node (it selects fleetFakeLabel): it is
// scheduled, never run.
func fleetPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fleetNS, Labels: map[string]string{"fleet-demo": "mig"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector:                  map[string]string{fleetFakeLabel: "true"},
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// fleetLayouts says, per node, which 1g placements of which GPU the MIG
// pods' claims got: "gpu-0 [0 1 2 3 4 5 6] gpu-1 [6]".
func fleetLayouts(ctx context.Context, cs kubernetes.Interface) (map[string]string, error) {
	claims, err := cs.ResourceV1().ResourceClaims(fleetNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(fleetNS).List(ctx, metav1.ListOptions{LabelSelector: "fleet-demo=mig"})
	if err != nil {
		return nil, err
	}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				nodeOf[*s.ResourceClaimName] = p.Spec.NodeName
			}
		}
	}
	per := map[string]map[int][]int{}
	for _, c := range claims.Items {
		node, ok := nodeOf[c.Name]
		if !ok || c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			ref, err := mig.ParseDeviceName(r.Device)
			if err != nil || ref.Profile == "" {
				continue
			}
			if per[node] == nil {
				per[node] = map[int][]int{}
			}
			per[node][ref.GPU] = append(per[node][ref.GPU], ref.Start)
		}
	}
	out := map[string]string{}
	for node, gpus := range per {
		var idx []int
		for g := range gpus {
			idx = append(idx, g)
		}
		sort.Ints(idx)
		var parts []string
		for _, g := range idx {
			sort.Ints(gpus[g])
			parts = append(parts, fmt.Sprintf("gpu-%d %v", g, gpus[g]))
		}
		out[node] = strings.Join(parts, "  ")
	}
	return out, nil
}

func fleetCount(nodes []fleetNode) (whole, migN int) {
	for _, n := range nodes {
		if n.mig {
			migN++
		} else {
			whole++
		}
	}
	return whole, migN
}

func fleetRacks(nodes []fleetNode) [][]fleetNode {
	var out [][]fleetNode
	for _, n := range nodes {
		if len(out) == 0 || out[len(out)-1][0].rack != n.rack {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], n)
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// startFleetDriver starts the reference driver for the real node as a
// child process ("drakit demo fleet-driver", its log in Dir/logs): a
// simulated DGX H200 with whole GPUs and dynamic MIG on fleetRealMIGGPUs,
// registered with the real kubelet, its CDI specs where containerd reads
// them.
func startFleetDriver(c *cluster.Cluster) (*demoDriverProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the fleet's real node: %w", err)
	}
	logPath := filepath.Join(c.Dir, "logs", "nvidia-driver.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("the fleet's real node: driver log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(self, "demo", fleetDriverCmd,
		"-kubeconfig", c.Kubeconfig,
		"-node-name", c.NodeName,
		"-registrar-dir", c.PluginRegistryDir,
		"-plugin-data-dir", filepath.Join(c.PluginsDir, nvdriver.DriverName),
		"-cdi-dir", c.CDIDir,
		"-nvml-sim", "dgx-h200",
		"-nvml-sim-state", filepath.Join(c.Dir, "real-node-gpus.json"),
		"-nvml-sim-mig-gpus", fleetRealMIGGPUs,
		"-dynamic-mig-gpus", fleetRealDynamicGPUs,
		// Dynamic MIG is alpha and off by default; the demo shows it.
		"--feature-gates", "DynamicMIG=true,DynamicMIGWholeGPU=true",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("the fleet's real node: start the driver: %w", err)
	}
	p := &demoDriverProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// fleetRealPod runs one pod with a 1g MIG claim on the real node and
// records what its container saw, then deletes it (the driver destroys
// the MIG device it made).
func fleetRealPod(ctx context.Context, c *cluster.Cluster, profiles []string, res *fleetResult, step func(string, ...any)) error {
	cs := c.Client
	class := nvdriver.ProfileClass(profiles[0])
	t0 := time.Now()
	// The driver publishes its slices once it has registered.
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.NodeName})
		if err != nil {
			return false, err
		}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				if ref, err := mig.ParseDeviceName(d.Name); err == nil && ref.Profile == profiles[0] {
					return true, nil
				}
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("the real node's driver published no %s device: %w", profiles[0], err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "real-1g", Namespace: fleetNS},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
		}}},
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(fleetNS).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceClaimTemplate: %w", err)
	}
	// The device's UUID, in the variable the driver names after it.
	const env = nvdriver.EnvDevicePrefix
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "real-mig", Namespace: fleetNS},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": c.NodeName},
			HostNetwork:                   true, // no CNI on the local node
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
			Containers: []corev1.Container{{
				Name: "c", Image: c.Images.Busybox, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", "env | grep ^" + env + "; sleep 3600"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "mig"}}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(fleetNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	var got *corev1.Pod
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(fleetNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s", pod.Name, p.Status.Message)
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		logs, err := cs.CoreV1().Pods(fleetNS).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil // the container may not have written yet
		}
		for l := range strings.Lines(string(logs)) {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, env) {
				res.realEnv = l
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		phase := "unknown"
		if got != nil {
			phase = string(got.Status.Phase)
		}
		return fmt.Errorf("pod %s not running with a %s* variable on the real node (phase %s): %w", pod.Name, env, phase, err)
	}
	res.realPod = pod.Name
	for _, st := range got.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		claim, err := cs.ResourceV1().ResourceClaims(fleetNS).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get claim of pod %s: %w", pod.Name, err)
		}
		if a := claim.Status.Allocation; a != nil && len(a.Devices.Results) > 0 {
			res.realDevice = a.Devices.Results[0].Device
		}
	}
	step("pod %s (a claim for one %s) RUNS on the real node %s: the driver made the MIG device %s at prepare, the container saw %s (%s)",
		pod.Name, profiles[0], c.NodeName, res.realDevice, res.realEnv, since(t0))
	if err := cs.CoreV1().Pods(fleetNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(fleetNS).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("wait for pod %s to go: %w", pod.Name, err)
	}
	return nil
}
