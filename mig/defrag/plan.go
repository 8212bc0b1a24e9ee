package defrag

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/internal/allocstate"
	"github.com/drakit/drakit/mig"
	pplan "github.com/drakit/drakit/partition/plan"
)

// ObjectRef names an object of an operation.
type ObjectRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// String is "namespace/name".
func (r ObjectRef) String() string { return r.Namespace + "/" + r.Name }

// Eviction is one pod an operation evicts, the MIG device it holds and
// where its replacement lands: the plan checked that the pod's claim and
// node selection accept the destination, the operation reserves it (a
// taint) and allocates the replacement's claim to it.
type Eviction struct {
	Pod   ObjectRef `json:"pod"`
	Claim ObjectRef `json:"claim"`
	// Move is the instance: its GPU and placement now, and the room the
	// plan found for it.
	Move mig.Move `json:"move"`
	// ToPool and ToDevice are the driver's device at the destination
	// (Move.ToNode, Move.ToGPU, Move.ToStart). Empty in operations
	// recorded before destinations were reserved: then nothing lands.
	ToPool   string `json:"toPool,omitempty"`
	ToDevice string `json:"toDevice,omitempty"`
	// Owner is the UID of the pod's controller (its ReplicaSet, ...),
	// which makes the replacement, and PodClaim the entry of the pod's
	// spec.resourceClaims that made Claim: the replacement's claim comes
	// from the same entry.
	Owner    types.UID `json:"owner,omitempty"`
	PodClaim string    `json:"podClaim,omitempty"`
}

// Operation is one defragmentation: the pods it evicts and the device it
// frees for a waiting pod.
type Operation struct {
	// ID is the waiting claim's UID.
	ID string `json:"id"`
	// Pod is the waiting pod, Claim its claim that gets the device.
	Pod   ObjectRef `json:"pod"`
	Claim ObjectRef `json:"claim"`
	// Node, GPU, Profile and Start are the freed placement; Pool and
	// Device the driver's device for it.
	Node    string `json:"node"`
	GPU     int    `json:"gpu"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// Evictions are the pods evicted to free it.
	Evictions []Eviction `json:"evictions"`
	// Started is when the operation began (its taints were made).
	Started metav1.Time `json:"started"`
	// Grace is the longest termination grace period, in seconds, of the
	// pods it evicts: the operation's timeout counts from Started plus
	// Grace, so that a pod slow to terminate does not abandon it.
	Grace int64 `json:"grace,omitempty"`
	// Rules is the number of DeviceTaintRules the operation makes, so
	// that a restarted controller tells a region tainted in part (the
	// previous one stopped while tainting: nothing was evicted yet, and
	// the operation is rolled back) from one tainted whole. Zero in
	// operations recorded before it was kept.
	Rules int `json:"rules,omitempty"`

	// present is the number of its rules found in the cluster.
	present int
}

// placement is how events and logs name the freed region.
func (op *Operation) placement() string {
	return fmt.Sprintf("%s at GPU %d placement %d on node %s", op.Profile, op.GPU, op.Start, op.Node)
}

func (op *Operation) evicted() string {
	names := make([]string, len(op.Evictions))
	for i, e := range op.Evictions {
		names[i] = e.Pod.String()
	}
	return strings.Join(names, ", ")
}

// plan is an operation found, not yet started.
type plan struct {
	op     Operation
	moves  int
	score  int
	region []devKey // devices overlapping the freed placement, to taint
	// reserved are the devices overlapping the evictions' destinations,
	// not in region; start taints them with region (they are appended
	// to it), so that only the replacements get them.
	reserved int
}

func (p *plan) print(w io.Writer) {
	op := &p.op
	fmt.Fprintf(w, "pod %s waits for %s: would evict %s to free %s (device %s/%s)\n", op.Pod, op.Profile, op.evicted(), op.placement(), op.Pool, op.Device)
	for _, e := range op.Evictions {
		fmt.Fprintf(w, "  evict %s (claim %s): %s@%d on GPU %d; its replacement lands on %s GPU %d placement %d (device %s/%s)\n",
			e.Pod, e.Claim.Name, e.Move.Profile, e.Move.Start, e.Move.GPU, e.Move.ToNode, e.Move.ToGPU, e.Move.ToStart, e.ToPool, e.ToDevice)
	}
	fmt.Fprintf(w, "  taint %d devices of the region and %d of the destinations (NoSchedule %s), then allocate claim %s to %s and each replacement's claim to its destination\n",
		len(p.region)-p.reserved, p.reserved, TaintKey, op.Claim, op.Device)
}

// devKey names a device of the driver.
type devKey struct{ pool, device string }

// devLoc is where a dynamic MIG device of the counter model sits.
type devLoc struct {
	node    string
	gpu     int
	profile string // "" for the full GPU
	start   int
	size    int // memory slices
}

func (l devLoc) overlaps(o devLoc) bool {
	return l.node == o.node && l.gpu == o.gpu && l.start < o.start+o.size && o.start < l.start+l.size
}

type locKey struct {
	node    string
	gpu     int
	profile string
	start   int
}

type gpuKey struct {
	node string
	gpu  int
}

// holder is the claim that holds a dynamic MIG instance and its pods.
type holder struct {
	claim *resourceapi.ResourceClaim
	pods  []*corev1.Pod
	why   string // why it may not move; "" when it may
}

// cluster is what one Step reads.
type cluster struct {
	snap    *explain.Snapshot
	fleet   []mig.FleetGPU
	devs    map[devKey]devLoc
	byLoc   map[locKey]devKey
	held    map[locKey]*holder
	pods    map[types.UID]*corev1.Pod
	pdbs    []policyv1.PodDisruptionBudget
	gpusOf  map[string][]int // node -> dynamic GPU indexes, sorted
	product map[gpuKey]*mig.Product
	// unpublished are devices of the counter model the driver does not
	// publish now (see completeModel).
	unpublished map[devKey]bool
	// jobs are the Jobs of opted-in pods (restartable).
	jobs map[types.UID]*batchv1.Job
}

// waitingPods lists the pods that the scheduler found unschedulable,
// oldest first.
func (c *Controller) waitingPods(ctx context.Context) ([]*corev1.Pod, error) {
	var l []*corev1.Pod
	if c.cache != nil {
		all, err := c.listPods(ctx, "")
		if err != nil {
			return nil, err
		}
		l = all
	} else {
		unbound, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
		if err != nil {
			return nil, fmt.Errorf("list pending pods: %w", err)
		}
		for i := range unbound.Items {
			l = append(l, &unbound.Items[i])
		}
	}
	var out []*corev1.Pod
	for _, p := range l {
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || len(p.Spec.ResourceClaims) == 0 {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				out = append(out, p)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp)
	})
	return out, nil
}

// readCluster reads the snapshot, the pods, the PodDisruptionBudgets, and
// builds the dynamic MIG fleet.
func (c *Controller) readCluster(ctx context.Context) (*cluster, error) {
	snap, err := c.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the cluster: %w", err)
	}
	pods, err := c.listPods(ctx, "")
	if err != nil {
		return nil, err
	}
	pdbs, err := c.listPDBs(ctx)
	if err != nil {
		return nil, err
	}
	cl := &cluster{snap: snap, devs: map[devKey]devLoc{}, byLoc: map[locKey]devKey{}, held: map[locKey]*holder{},
		pods: map[types.UID]*corev1.Pod{}, pdbs: pdbs, gpusOf: map[string][]int{}, product: map[gpuKey]*mig.Product{}, unpublished: map[devKey]bool{}}
	for _, p := range pods {
		cl.pods[p.UID] = p
	}
	if cl.jobs, err = c.readJobs(ctx, cl.pods); err != nil {
		return nil, err
	}
	c.readDevices(cl)
	c.readInstances(cl)
	return cl, nil
}

// readDevices finds the driver's dynamic MIG GPUs: devices of the
// counter model (they consume counters and mig.ParseDeviceName reads
// their names) in the newest generation of each pool.
func (c *Controller) readDevices(cl *cluster) {
	newest := map[string]int64{}
	for _, s := range cl.snap.Slices {
		if s.Spec.Driver == c.driver && s.Spec.Pool.Generation > newest[s.Spec.Pool.Name] {
			newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
		}
	}
	templates := map[gpuKey]devTemplate{}
	for _, s := range cl.snap.Slices {
		node := ptr.Deref(s.Spec.NodeName, "")
		if s.Spec.Driver != c.driver || node == "" || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if len(d.ConsumesCounters) == 0 {
				continue
			}
			ref, err := mig.ParseDeviceName(d.Name)
			if err != nil {
				continue
			}
			gk := gpuKey{node, ref.GPU}
			p := cl.product[gk]
			if p == nil {
				if p = c.productOf(d); p == nil {
					continue
				}
				cl.product[gk] = p
				cl.gpusOf[node] = append(cl.gpusOf[node], ref.GPU)
			}
			loc := devLoc{node: node, gpu: ref.GPU, profile: ref.Profile, start: ref.Start, size: p.MemorySlices}
			if ref.Profile != "" {
				pr, err := p.Profile(ref.Profile)
				if err != nil {
					continue
				}
				loc.profile, loc.size = pr.Name, pr.MemorySlices
				if _, ok := templates[gk]; !ok {
					templates[gk] = devTemplate{s, d}
				}
			}
			k := devKey{s.Spec.Pool.Name, d.Name}
			cl.devs[k] = loc
			cl.byLoc[locKey{node, ref.GPU, loc.profile, loc.start}] = k
		}
	}
	for n := range cl.gpusOf {
		sort.Ints(cl.gpusOf[n])
	}
	c.completeModel(cl, templates)
}

// completeModel adds to the snapshot the devices of the counter model
// that the driver does not publish now. A dynamic-MIG driver may publish
// only the devices that still fit (mig.WithFitOnly, what the reference
// driver ships): a 4g device that four 1g instances overlap is then
// absent, yet it is what a defragmentation frees, and the driver
// publishes it once the region is free. Each missing device of a GPU is
// the counter model's (its name and counter consumption) with the
// attributes of a device the driver publishes on that GPU (its profile
// and placement changed), so that class and claim selectors see it as
// they will; the profiles are mig.DefaultProfiles of the product plus
// those published on the node. Only the controller's own reasoning sees
// them: a claim is allocated one only once the driver publishes it.
func (c *Controller) completeModel(cl *cluster, templates map[gpuKey]devTemplate) {
	published := map[string]map[string]bool{} // node -> profiles seen
	for _, loc := range cl.devs {
		if published[loc.node] == nil {
			published[loc.node] = map[string]bool{}
		}
		published[loc.node][loc.profile] = true
	}
	keys := make([]gpuKey, 0, len(templates))
	for gk := range templates {
		keys = append(keys, gk)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].node < keys[j].node || keys[i].node == keys[j].node && keys[i].gpu < keys[j].gpu
	})
	copied := map[*resourceapi.ResourceSlice]*resourceapi.ResourceSlice{}
	for _, gk := range keys {
		tp := templates[gk]
		p := cl.product[gk]
		profiles := mig.DefaultProfiles(p)
		for _, pr := range p.Profiles {
			if published[gk.node][pr.Name] && !slices.Contains(profiles, pr.Name) {
				profiles = append(profiles, pr.Name)
			}
		}
		m, err := mig.NewCounterModel([]mig.GPU{{Index: gk.gpu, Product: p, Profiles: profiles}})
		if err != nil {
			continue
		}
		for _, md := range m.Devices {
			ref, err := mig.ParseDeviceName(md.Name)
			if err != nil || ref.Profile == "" {
				continue // the full GPU: a driver in MIG mode need not offer it
			}
			k := devKey{tp.slice.Spec.Pool.Name, md.Name}
			if _, ok := cl.devs[k]; ok {
				continue
			}
			pr, err := p.Profile(ref.Profile)
			if err != nil {
				continue
			}
			s := copied[tp.slice]
			if s == nil {
				s = tp.slice.DeepCopy()
				copied[tp.slice] = s
			}
			d := tp.dev.DeepCopy()
			d.Name = md.Name
			d.ConsumesCounters = md.ConsumesCounters
			d.Taints = nil
			setAttr(d, mig.AttrProfile, resourceapi.DeviceAttribute{StringValue: ptr.To(pr.Name)})
			setAttr(d, mig.AttrPlacementStart, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(ref.Start))})
			setAttr(d, mig.AttrProfileID, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(pr.ID))})
			setAttr(d, mig.AttrPlacementSize, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(pr.MemorySlices))})
			s.Spec.Devices = append(s.Spec.Devices, *d)
			loc := devLoc{node: gk.node, gpu: gk.gpu, profile: pr.Name, start: ref.Start, size: pr.MemorySlices}
			cl.devs[k] = loc
			cl.byLoc[locKey{gk.node, gk.gpu, pr.Name, ref.Start}] = k
			cl.unpublished[k] = true
		}
	}
	if len(copied) == 0 {
		return
	}
	snap := *cl.snap
	snap.Slices = make([]*resourceapi.ResourceSlice, len(cl.snap.Slices))
	for i, s := range cl.snap.Slices {
		if cp := copied[s]; cp != nil {
			s = cp
		}
		snap.Slices[i] = s
	}
	cl.snap = &snap
}

// setAttr sets a device attribute that the device already has (under its
// plain or its qualified name).
func setAttr(d *resourceapi.Device, name string, v resourceapi.DeviceAttribute) {
	for k := range d.Attributes {
		if string(k) == name || strings.HasSuffix(string(k), "/"+name) {
			d.Attributes[k] = v
		}
	}
}

// devTemplate is a published MIG device of a GPU and its slice.
type devTemplate struct {
	slice *resourceapi.ResourceSlice
	dev   *resourceapi.Device
}

// productOf reads a device's product name attribute (the driver's domain)
// and looks it up in mig's catalog.
func (c *Controller) productOf(d *resourceapi.Device) *mig.Product {
	for _, k := range []resourceapi.QualifiedName{mig.AttrProduct, resourceapi.QualifiedName(c.driver + "/" + mig.AttrProduct)} {
		if a, ok := d.Attributes[k]; ok && a.StringValue != nil {
			if p, err := mig.Lookup(*a.StringValue); err == nil {
				return p
			}
		}
	}
	return nil
}

// readInstances puts the allocated claims' dynamic MIG devices into the
// fleet, each restartable or not with the reason.
func (c *Controller) readInstances(cl *cluster) {
	layouts := map[gpuKey]mig.Layout{}
	whole := map[gpuKey]bool{}
	perPod := map[types.UID]int{} // dynamic MIG devices each pod holds
	type inst struct {
		loc devLoc
		h   *holder
	}
	var insts []inst
	for _, claim := range cl.snap.Claims {
		if claim.Status.Allocation == nil {
			continue
		}
		var mine []devLoc
		for _, r := range claim.Status.Allocation.Devices.Results {
			if loc, ok := cl.devs[devKey{r.Pool, r.Device}]; ok && r.Driver == c.driver && !ptr.Deref(r.AdminAccess, false) {
				mine = append(mine, loc)
			}
		}
		if len(mine) == 0 {
			continue
		}
		h := &holder{claim: claim}
		for _, ref := range claim.Status.ReservedFor {
			if ref.Resource != "pods" {
				h.why = "the claim is reserved for a " + ref.Resource
				continue
			}
			if p := cl.pods[ref.UID]; p != nil {
				h.pods = append(h.pods, p)
				perPod[p.UID] += len(mine)
			} else {
				h.why = "pod " + claim.Namespace + "/" + ref.Name + " of the claim is not found"
			}
		}
		for _, loc := range mine {
			if loc.profile == "" {
				whole[gpuKey{loc.node, loc.gpu}] = true
				continue
			}
			if len(mine) > 1 && h.why == "" {
				h.why = "its claim holds more than one MIG device"
			}
			insts = append(insts, inst{loc, h})
		}
	}
	for _, in := range insts {
		if in.h.why == "" {
			in.h.why = c.mayMove(cl, in.h, perPod)
		}
		k := locKey{in.loc.node, in.loc.gpu, in.loc.profile, in.loc.start}
		cl.held[k] = in.h
		gk := gpuKey{in.loc.node, in.loc.gpu}
		layouts[gk] = append(layouts[gk], mig.Instance{Profile: in.loc.profile, Start: in.loc.start, InUse: true, Restartable: in.h.why == ""})
	}
	nodes := make([]string, 0, len(cl.gpusOf))
	for n := range cl.gpusOf {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for _, g := range cl.gpusOf[n] {
			gk := gpuKey{n, g}
			if whole[gk] {
				continue // the full GPU is allocated: nothing fits, nothing moves
			}
			cl.fleet = append(cl.fleet, mig.FleetGPU{Node: n, Index: g, Product: cl.product[gk], Layout: layouts[gk]})
		}
	}
}

// mayMove says why the holder's pods may not be evicted, "" when they
// may: each opted in, has a controller that starts it again without
// counting a failure (restartable), holds only this MIG device, is not
// terminating, and its PodDisruptionBudgets allow a disruption now.
func (c *Controller) mayMove(cl *cluster, h *holder, perPod map[types.UID]int) string {
	if len(h.pods) == 0 {
		return "no pod holds the claim"
	}
	owned := false
	for _, o := range h.claim.OwnerReferences {
		owned = owned || ptr.Deref(o.Controller, false) && o.Kind == "Pod"
	}
	if !owned {
		return "claim " + h.claim.Name + " is not a pod's own claim (made from a template): evicting the pod would not free it"
	}
	for _, p := range h.pods {
		name := p.Namespace + "/" + p.Name
		switch {
		case p.Annotations[AnnotationDefrag] != AllowValue:
			return "pod " + name + " did not opt in (annotation " + AnnotationDefrag + ": " + AllowValue + ")"
		case restartable(p, cl.jobs) != "":
			return restartable(p, cl.jobs)
		case p.DeletionTimestamp != nil:
			return "pod " + name + " is terminating"
		case perPod[p.UID] > 1:
			return "pod " + name + " holds more than one MIG device"
		}
		if why := c.namespaceRefuses(p); why != "" {
			return why
		}
		if why := priorityRefuses(p, nil); why != "" {
			return why
		}
		for _, pdb := range cl.pdbsOf(p) {
			if pdb.Status.DisruptionsAllowed < 1 {
				return "PodDisruptionBudget " + pdb.Namespace + "/" + pdb.Name + " of pod " + name + " allows no disruption now"
			}
		}
	}
	return ""
}

// pdbsOf are the PodDisruptionBudgets that select pod.
func (cl *cluster) pdbsOf(pod *corev1.Pod) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for i := range cl.pdbs {
		pdb := &cl.pdbs[i]
		if pdb.Namespace != pod.Namespace || pdb.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		if sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, pdb)
		}
	}
	return out
}

// findPlan looks for a waiting pod that a move can help, oldest first,
// and returns the first plan.
func (c *Controller) findPlan(ctx context.Context) (*plan, error) {
	logger := klog.FromContext(ctx)
	waiting, err := c.waitingPods(ctx)
	if err != nil || len(waiting) == 0 {
		return nil, err
	}
	if err := c.seed(ctx); err != nil {
		return nil, err
	}
	cl, err := c.readCluster(ctx)
	if err != nil {
		return nil, err
	}
	for _, pod := range waiting {
		// Its claim is allocated by the controller, which (with its
		// admission policy) writes claims in its namespaces only.
		if why := c.namespaceRefuses(pod); why != "" {
			c.logOnce(ctx, pod, why)
			continue
		}
		if why := c.backingOff(pod); why != "" {
			c.logOnce(ctx, pod, why)
			continue
		}
		p, why := c.planFor(ctx, cl, pod)
		if p != nil {
			if why = c.budgetRefuses(p.op.Node, len(p.op.Evictions)); why == "" {
				for _, e := range p.op.Evictions {
					if vp := cl.pods[e.Pod.UID]; vp != nil && ptr.Deref(vp.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds) > p.op.Grace {
						p.op.Grace = ptr.Deref(vp.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)
					}
				}
				return p, nil
			}
		}
		c.logOnce(ctx, pod, why)
	}
	logger.V(5).Info("No defragmentation this step", "waiting", len(waiting))
	return nil, nil
}

// forPod is the fleet as pod sees it: an instance whose pods have a
// higher priority than pod's may not move for it.
func (cl *cluster) forPod(pod *corev1.Pod) []mig.FleetGPU {
	fleet := make([]mig.FleetGPU, len(cl.fleet))
	for i, g := range cl.fleet {
		fleet[i] = g
		fleet[i].Layout = append(mig.Layout(nil), g.Layout...)
		for j := range fleet[i].Layout {
			in := &fleet[i].Layout[j]
			h := cl.held[locKey{g.Node, g.Index, in.Profile, in.Start}]
			if !in.Restartable || h == nil {
				continue
			}
			for _, vp := range h.pods {
				if priorityRefuses(vp, pod) != "" {
					in.Restartable = false
				}
			}
		}
	}
	return fleet
}

// terminating are the nodes where a pod that holds the driver's devices
// is terminating: their devices are in flux (the pod may take its whole
// grace period to let go), so no operation is planned there until it is
// gone.
func (c *Controller) terminating(cl *cluster) map[string]bool {
	out := map[string]bool{}
	for _, claim := range cl.snap.Claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, ref := range claim.Status.ReservedFor {
			p := cl.pods[ref.UID]
			if p == nil || p.DeletionTimestamp == nil {
				continue
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				if loc, ok := cl.devs[devKey{r.Pool, r.Device}]; ok && r.Driver == c.driver {
					out[loc.node] = true
				}
			}
		}
	}
	return out
}

// planFor finds the operation that lets pod's one unallocated claim have
// a large MIG device with the fewest evictions; nil and why not.
func (c *Controller) planFor(ctx context.Context, cl *cluster, pod *corev1.Pod) (*plan, string) {
	rep, err := explain.Pod(ctx, cl.snap, pod, explain.WithFeatures(c.o.features))
	if err != nil {
		return nil, err.Error()
	}
	if rep.Fits {
		return nil, "its claims fit: the scheduler will place it"
	}
	var nodes []string
	busy := c.terminating(cl)
	for _, n := range rep.Nodes {
		if counterExhausted(n) && len(cl.gpusOf[n.Node]) > 0 && !busy[n.Node] {
			nodes = append(nodes, n.Node)
		}
	}
	if len(nodes) == 0 {
		if len(busy) > 0 {
			return nil, "a pod holding the driver's devices is terminating on each node that refuses it; waiting until it is gone"
		}
		return nil, "no node with dynamic MIG GPUs refuses it for exhausted MIG counters"
	}
	all := cl.fleet
	cl.fleet = cl.forPod(pod)
	defer func() { cl.fleet = all }()
	claim, why := pendingClaim(cl.snap, pod)
	if claim == nil {
		return nil, why
	}
	sort.Strings(nodes)
	var best *plan
	refused := ""
	for _, node := range nodes {
		for _, prof := range c.profiles(cl, node) {
			if _, err := c.allocate(ctx, cl, claim, node, c.devicesOf(cl, node, prof), nil, true); err != nil {
				continue // the claim does not take this profile
			}
			for _, g := range cl.gpusOf[node] {
				p, why := c.planOn(ctx, cl, pod, claim, node, g, prof)
				if why != "" && refused == "" {
					refused = why
				}
				if p != nil && (best == nil || p.moves < best.moves || p.moves == best.moves && p.score > best.score) {
					best = p
				}
			}
			if best != nil {
				return best, ""
			}
		}
	}
	if refused != "" {
		return nil, fmt.Sprintf("no set of at most %d pods that may be evicted frees a device its claim takes and lets them land: %s", c.o.maxMoves, refused)
	}
	return nil, fmt.Sprintf("no set of at most %d pods that may be evicted frees a device its claim takes", c.o.maxMoves)
}

// counterExhausted reports whether some request is refused on the node
// because a shared counter is used up.
func counterExhausted(n explain.NodeReport) bool {
	var walk func([]explain.RequestReport) bool
	walk = func(rs []explain.RequestReport) bool {
		for _, r := range rs {
			for _, reason := range r.Reasons {
				if reason.Kind == explain.CounterExhausted {
					return true
				}
			}
			if walk(r.Alternatives) {
				return true
			}
		}
		return false
	}
	return walk(n.Requests)
}

// pendingClaim is the pod's one claim that needs an allocation, which must
// ask for exactly one device (one request, or firstAvailable
// alternatives, each for one device).
func pendingClaim(snap *explain.Snapshot, pod *corev1.Pod) (*resourceapi.ResourceClaim, string) {
	var pending []*resourceapi.ResourceClaim
	for _, pc := range pod.Spec.ResourceClaims {
		name := ptr.Deref(pc.ResourceClaimName, "")
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				name = *st.ResourceClaimName
			}
		}
		if name == "" {
			return nil, "claim " + pc.Name + " of the pod is not made yet"
		}
		var claim *resourceapi.ResourceClaim
		for _, c := range snap.Claims {
			if c.Namespace == pod.Namespace && c.Name == name {
				claim = c
			}
		}
		if claim == nil {
			return nil, "claim " + pod.Namespace + "/" + name + " is not found"
		}
		if claim.Status.Allocation == nil {
			pending = append(pending, claim)
		}
	}
	if pod.Status.ExtendedResourceClaimStatus != nil || hasExtended(pod) {
		return nil, "extended-resource requests are not handled"
	}
	if len(pending) != 1 {
		return nil, fmt.Sprintf("the pod has %d claims to allocate; only one is handled", len(pending))
	}
	c := pending[0]
	if len(c.Spec.Devices.Requests) != 1 {
		return nil, fmt.Sprintf("claim %s has %d requests; only one is handled", c.Name, len(c.Spec.Devices.Requests))
	}
	r := c.Spec.Devices.Requests[0]
	one := func(mode resourceapi.DeviceAllocationMode, count int64) bool {
		return (mode == "" || mode == resourceapi.DeviceAllocationModeExactCount) && count <= 1
	}
	switch {
	case r.Exactly != nil && !one(r.Exactly.AllocationMode, r.Exactly.Count):
		return nil, "claim " + c.Name + " asks for more than one device"
	case r.Exactly != nil && ptr.Deref(r.Exactly.AdminAccess, false):
		return nil, "claim " + c.Name + " asks for admin access"
	}
	for _, s := range r.FirstAvailable {
		if !one(s.AllocationMode, s.Count) {
			return nil, "claim " + c.Name + " asks for more than one device"
		}
	}
	return c, ""
}

func hasExtended(pod *corev1.Pod) bool {
	for _, ctr := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for name := range ctr.Resources.Limits {
			if !strings.Contains(string(name), "/") || strings.HasPrefix(string(name), "kubernetes.io/") {
				continue
			}
			return true
		}
	}
	return false
}

// profiles are the node's dynamic GPUs' profiles large enough to trigger
// a move, smallest first.
func (c *Controller) profiles(cl *cluster, node string) []mig.Profile {
	seen := map[string]bool{}
	var out []mig.Profile
	for _, g := range cl.gpusOf[node] {
		for _, pr := range cl.product[gpuKey{node, g}].Profiles {
			if pr.ComputeSlices >= c.o.minCompute && !seen[pr.Name] {
				seen[pr.Name] = true
				out = append(out, pr)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ComputeSlices < out[j].ComputeSlices })
	return out
}

// devicesOf are the node's published devices of profile prof.
func (c *Controller) devicesOf(cl *cluster, node string, prof mig.Profile) map[devKey]bool {
	out := map[devKey]bool{}
	for k, loc := range cl.devs {
		if loc.node == node && loc.profile == prof.Name {
			out[k] = true
		}
	}
	return out
}

// planOn is the operation that frees a placement of profile prof on GPU
// g of node for claim, nil when none. When the plan is refused because
// an evicted pod's replacement could not land at its destination (see
// land), the string says which and why.
func (c *Controller) planOn(ctx context.Context, cl *cluster, pod *corev1.Pod, claim *resourceapi.ResourceClaim, node string, g int, prof mig.Profile) (*plan, string) {
	req := mig.Request{Profile: prof.Name, Node: node, GPU: &g}
	d, err := mig.Defragment(cl.fleet, req, pplan.WithMaxMoves(c.o.maxMoves))
	if err != nil || !d.Found || len(d.Moves) == 0 {
		return nil, "" // no plan, or none needed: the GPU has room the claim does not take
	}
	target, ok := cl.byLoc[locKey{node, g, prof.Name, d.Target.Start}]
	if !ok {
		return nil, "" // the driver does not publish that placement
	}
	p := &plan{moves: len(d.Moves), score: d.Score, op: Operation{
		ID: string(claim.UID), Pod: refOf(&pod.ObjectMeta), Claim: refOf(&claim.ObjectMeta),
		Node: node, GPU: g, Profile: prof.Name, Start: d.Target.Start, Pool: target.pool, Device: target.device,
	}}
	freed := map[string]bool{}
	budget := map[*policyv1.PodDisruptionBudget]int32{}
	for _, m := range d.Moves {
		h := cl.held[locKey{m.Node, m.GPU, m.Profile, m.Start}]
		if h == nil || h.why != "" || len(h.pods) == 0 {
			return nil, ""
		}
		freed[h.claim.Namespace+"/"+h.claim.Name] = true
		for _, vp := range h.pods {
			for _, pdb := range cl.pdbsOf(vp) {
				if budget[pdb]++; budget[pdb] > pdb.Status.DisruptionsAllowed {
					return nil, "" // the budget allows fewer disruptions than the plan needs
				}
			}
			p.op.Evictions = append(p.op.Evictions, Eviction{Pod: refOf(&vp.ObjectMeta), Claim: refOf(&h.claim.ObjectMeta), Move: m})
		}
	}
	alloc, err := c.allocate(ctx, cl, claim, node, map[devKey]bool{target: true}, freed, false)
	if err != nil {
		return nil, ""
	}
	if why := classConfig(claim, alloc); why != "" {
		return nil, why
	}
	tloc := cl.devs[target]
	for k, loc := range cl.devs {
		if loc.overlaps(tloc) {
			p.region = append(p.region, k)
		}
	}
	sort.Slice(p.region, func(i, j int) bool { return p.region[i].device < p.region[j].device })
	if why := c.land(ctx, cl, p, freed, alloc.Devices.Results); why != "" {
		c.refuse(ctx, p, why)
		return nil, why
	}
	return p, ""
}

func refOf(m *metav1.ObjectMeta) ObjectRef {
	return ObjectRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID}
}

// allocate runs the scheduler's allocator for claim on node, allowing
// only the devices in allowed: the others get a NoSchedule taint the
// claim does not tolerate. Claims named in freed ("ns/name") count as
// gone; with empty, no claim holds anything. The held results count as
// allocated too (devices that claims will hold once an operation is
// done), unless empty. DeviceTaintRules other than the controller's own
// apply as in the scheduler.
func (c *Controller) allocate(ctx context.Context, cl *cluster, claim *resourceapi.ResourceClaim, node string,
	allowed map[devKey]bool, freed map[string]bool, empty bool, held ...resourceapi.DeviceRequestAllocationResult) (*resourceapi.AllocationResult, error) {
	state := allocstate.New()
	if !empty {
		for _, h := range cl.snap.Claims {
			if h.Status.Allocation == nil || h.UID == claim.UID || freed[h.Namespace+"/"+h.Name] {
				continue
			}
			allocstate.Add(state, h.Status.Allocation.Devices.Results, nil)
		}
		allocstate.Add(state, held, nil)
	}
	var slices []*resourceapi.ResourceSlice
	for _, s := range cl.snap.Slices {
		if ptr.Deref(s.Spec.NodeName, "") != node {
			continue
		}
		s = s.DeepCopy()
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			k := devKey{s.Spec.Pool.Name, d.Name}
			if s.Spec.Driver != c.driver || !allowed[k] {
				d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: TaintKey + "-excluded", Effect: resourceapi.DeviceTaintEffectNoSchedule})
				continue
			}
			for _, r := range cl.snap.TaintRules {
				if r.Labels[LabelOperation] == "" && ruleSelects(r, s.Spec.Driver, s.Spec.Pool.Name, d.Name) {
					d.Taints = append(d.Taints, r.Spec.Taint)
				}
			}
		}
		slices = append(slices, s)
	}
	nodeObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, n := range cl.snap.Nodes {
		if n.Name == node {
			nodeObj = n
		}
	}
	a, err := structured.NewAllocator(ctx, c.o.features, state, classLister(cl.snap.Classes), slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: c.o.features.ConsumableCapacity}))
	if err != nil {
		return nil, fmt.Errorf("allocate claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	res, err := a.Allocate(ctx, nodeObj, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, fmt.Errorf("allocate claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if len(res) != 1 {
		return nil, fmt.Errorf("allocate claim %s/%s on node %s: the device does not fit it", claim.Namespace, claim.Name, node)
	}
	return &res[0], nil
}

// ruleSelects reports whether a DeviceTaintRule's selector selects the
// device.
func ruleSelects(r *resourceapi.DeviceTaintRule, driver, pool, device string) bool {
	sel := r.Spec.DeviceSelector
	if sel == nil {
		return true
	}
	return ptr.Deref(sel.Driver, driver) == driver && ptr.Deref(sel.Pool, pool) == pool && ptr.Deref(sel.Device, device) == device
}

type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }
func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

// classConfig says why the controller may not write alloc into claim's
// status, "" when it may: the allocation carries configuration of a
// DeviceClass, and the controller writes only a claim's own (its
// admission policy refuses the rest).
func classConfig(claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) string {
	for _, cfg := range alloc.Devices.Config {
		if cfg.Source != resourceapi.AllocationConfigSourceClaim {
			return "the allocation of claim " + claim.Namespace + "/" + claim.Name +
				" carries its DeviceClass's configuration, which the controller does not " +
				"write (only a claim's own)"
		}
	}
	return ""
}
