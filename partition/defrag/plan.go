package defrag

import (
	"context"
	"encoding/json"
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
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
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

// Eviction is one pod an operation evicts, the partition it holds and
// where its replacement lands: the plan checked that the pod's claim and
// node selection accept the destination, the operation reserves it (a
// taint) and allocates the replacement's claim to it.
type Eviction struct {
	Pod   ObjectRef `json:"pod"`
	Claim ObjectRef `json:"claim"`
	// Move is the partition: its card and placement now, and the room
	// the plan found for it.
	Move pplan.Move `json:"move"`
	// ToPool and ToDevice are the driver's device at the destination
	// (Move.ToNode, Move.ToCard, Move.ToStart). Empty in operations
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
	// Node, Card, Profile and Start are the freed placement; Pool and
	// Device the driver's device for it.
	Node    string `json:"node"`
	Card    int    `json:"card"`
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

// MarshalJSON writes an operation with its fields' keys and, for one
// release, the cards also under the keys package mig/defrag recorded
// them with before the controller was vendor-neutral ("gpu", "toGPU"),
// so that a controller of that release carries on an operation this one
// started (a rolling update hands the lease either way).
func (op Operation) MarshalJSON() ([]byte, error) {
	type plain Operation
	type move struct {
		pplan.Move
		GPU   int `json:"gpu"`
		ToGPU int `json:"toGPU"`
	}
	type eviction struct {
		Eviction
		Move move `json:"move"`
	}
	out := struct {
		plain
		GPU       int        `json:"gpu"`
		Evictions []eviction `json:"evictions"`
	}{plain: plain(op), GPU: op.Card, Evictions: make([]eviction, len(op.Evictions))}
	for i, e := range op.Evictions {
		m := move{Move: e.Move, GPU: e.Move.Card, ToGPU: e.Move.ToCard}
		out.Evictions[i] = eviction{Eviction: e, Move: m}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads an operation as MarshalJSON writes it, and as
// package mig/defrag recorded one before the controller was
// vendor-neutral ("gpu" and "toGPU" for "card" and "toCard"), so that a
// controller updated during an operation carries it on.
func (op *Operation) UnmarshalJSON(b []byte) error {
	type plain Operation
	var legacy struct {
		GPU       *int `json:"gpu"`
		Evictions []struct {
			Move struct {
				GPU   *int `json:"gpu"`
				ToGPU *int `json:"toGPU"`
			} `json:"move"`
		} `json:"evictions"`
	}
	if err := json.Unmarshal(b, (*plain)(op)); err != nil {
		return err
	}
	if err := json.Unmarshal(b, &legacy); err != nil {
		return err
	}
	if legacy.GPU != nil {
		op.Card = *legacy.GPU
	}
	for i, e := range legacy.Evictions {
		if i < len(op.Evictions) && e.Move.GPU != nil {
			op.Evictions[i].Move.Card = *e.Move.GPU
		}
		if i < len(op.Evictions) && e.Move.ToGPU != nil {
			op.Evictions[i].Move.ToCard = *e.Move.ToGPU
		}
	}
	return nil
}

// placement is how events and logs name an operation's freed region.
func (c *Controller) placement(op *Operation) string {
	return c.where(op.Profile, op.Card, op.Start, op.Node)
}

// where is how events and logs name a placement.
func (c *Controller) where(profile string, card, start int, node string) string {
	return fmt.Sprintf("%s at %s %d placement %d on node %s", profile, c.n.card, card, start, node)
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

func (c *Controller) print(w io.Writer, p *plan) {
	op := &p.op
	fmt.Fprintf(w, "pod %s waits for %s: would evict %s to free %s (device %s/%s)\n",
		op.Pod, op.Profile, op.evicted(), c.placement(op), op.Pool, op.Device)
	for _, e := range op.Evictions {
		m := e.Move
		fmt.Fprintf(w, "  evict %s (claim %s): %s@%d on %s %d; "+
			"its replacement lands on %s %s %d placement %d (device %s/%s)\n",
			e.Pod, e.Claim.Name, m.Profile, m.Start, c.n.card, m.Card,
			m.ToNode, c.n.card, m.ToCard, m.ToStart, e.ToPool, e.ToDevice)
	}
	fmt.Fprintf(w, "  taint %d devices of the region and %d of the destinations (NoSchedule %s), then allocate claim %s to %s and each replacement's claim to its destination\n",
		len(p.region)-p.reserved, p.reserved, c.n.taint, op.Claim, op.Device)
}

// devKey names a device of the driver.
type devKey struct{ pool, device string }

// devLoc is where a device of the counter model sits.
type devLoc struct {
	node    string
	card    int
	profile string // "" for the whole card
	start   int
	// mem and comp are the placed memory and compute units it takes:
	// [first, end); empty where the scheme does not place them.
	mem, comp [2]int
}

// locOf is where device ref of a card of scheme s on node sits.
func locOf(node string, s *partition.Scheme, ref partition.DeviceRef) (devLoc, bool) {
	loc := devLoc{node: node, card: ref.Card, start: ref.Start}
	if ref.Profile == "" {
		if s.Memory.Placed {
			loc.mem = [2]int{0, s.Memory.Count}
		}
		if s.Compute.Placed {
			loc.comp = [2]int{0, s.Compute.Count}
		}
		return loc, true
	}
	pr, err := s.Profile(ref.Profile)
	if err != nil {
		return loc, false
	}
	i := slices.IndexFunc(pr.Placements,
		func(pl partition.Placement) bool { return pl.Start == ref.Start })
	if i < 0 {
		return loc, false
	}
	pl := pr.Placements[i]
	loc.profile = pr.Name
	if s.Memory.Placed {
		loc.mem = [2]int{pl.Memory, pl.Memory + pr.Memory}
	}
	if s.Compute.Placed {
		loc.comp = [2]int{pl.Compute, pl.Compute + pr.Compute}
	}
	return loc, true
}

// overlaps reports whether two devices share a placed unit of one card.
func (l devLoc) overlaps(o devLoc) bool {
	if l.node != o.node || l.card != o.card {
		return false
	}
	if l.mem == [2]int{} && l.comp == [2]int{} || o.mem == [2]int{} && o.comp == [2]int{} {
		return true // nothing placed: any partition of the card competes
	}
	shares := func(a, b [2]int) bool { return a[0] < b[1] && b[0] < a[1] }
	return shares(l.mem, o.mem) || shares(l.comp, o.comp)
}

type locKey struct {
	node    string
	card    int
	profile string
	start   int
}

type cardKey struct {
	node string
	card int
}

// holder is the claim that holds a partition and its pods.
type holder struct {
	claim *resourceapi.ResourceClaim
	pods  []*corev1.Pod
	why   string // why it may not move; "" when it may
}

// cluster is what one Step reads.
type cluster struct {
	snap    *explain.Snapshot
	fleet   []partition.FleetCard
	devs    map[devKey]devLoc
	byLoc   map[locKey]devKey
	held    map[locKey]*holder
	pods    map[types.UID]*corev1.Pod
	pdbs    []policyv1.PodDisruptionBudget
	cardsOf map[string][]int // node -> partitionable card indexes, sorted
	scheme  map[cardKey]*partition.Scheme
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
// builds the fleet of partitionable cards.
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
		pods: map[types.UID]*corev1.Pod{}, pdbs: pdbs, cardsOf: map[string][]int{},
		scheme: map[cardKey]*partition.Scheme{}, unpublished: map[devKey]bool{}}
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

// readDevices finds the driver's partitionable cards: devices of the
// counter model (they consume counters, their model attribute names a
// scheme of the vendor's, whose ParseDeviceName reads their names) in
// the newest generation of each pool.
func (c *Controller) readDevices(cl *cluster) {
	newest := map[string]int64{}
	for _, s := range cl.snap.Slices {
		if s.Spec.Driver == c.driver && s.Spec.Pool.Generation > newest[s.Spec.Pool.Name] {
			newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
		}
	}
	templates := map[cardKey]devTemplate{}
	models := map[string]*partition.Scheme{}
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
			sch := c.schemeOf(models, d)
			if sch == nil {
				continue
			}
			ref, err := sch.ParseDeviceName(d.Name)
			if err != nil {
				continue
			}
			ck := cardKey{node, ref.Card}
			if cl.scheme[ck] == nil {
				cl.scheme[ck] = sch
				cl.cardsOf[node] = append(cl.cardsOf[node], ref.Card)
			} else if cl.scheme[ck] != sch {
				continue // another model's device under the same index
			}
			loc, ok := locOf(node, sch, ref)
			if !ok {
				continue
			}
			if _, ok := templates[ck]; !ok && ref.Profile != "" {
				templates[ck] = devTemplate{s, d}
			}
			k := devKey{s.Spec.Pool.Name, d.Name}
			cl.devs[k] = loc
			cl.byLoc[locKey{node, ref.Card, loc.profile, loc.start}] = k
		}
	}
	for n := range cl.cardsOf {
		sort.Ints(cl.cardsOf[n])
	}
	c.completeModel(cl, templates)
}

// completeModel adds to the snapshot the devices of the counter model
// that the driver does not publish now. A driver may publish only the
// devices that still fit (counter.WithFitOnly, what the reference NVIDIA
// driver ships): a large device that small partitions overlap is then
// absent, yet it is what a defragmentation frees, and the driver
// publishes it once the region is free. Each missing device of a card is
// the counter model's (its name, counter consumption and the attributes
// and capacities the model gives it) over the other attributes of a
// device the driver publishes on that card, so that class and claim
// selectors see it as they will; the profiles are Vendor.Profiles of the scheme plus those
// published on the node. Only the controller's own reasoning sees
// them: a claim is allocated one only once the driver publishes it.
func (c *Controller) completeModel(cl *cluster, templates map[cardKey]devTemplate) {
	published := map[string]map[string]bool{} // node -> profiles seen
	for _, loc := range cl.devs {
		if published[loc.node] == nil {
			published[loc.node] = map[string]bool{}
		}
		published[loc.node][loc.profile] = true
	}
	keys := make([]cardKey, 0, len(templates))
	for ck := range templates {
		keys = append(keys, ck)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.node < b.node || a.node == b.node && a.card < b.card
	})
	copied := map[*resourceapi.ResourceSlice]*resourceapi.ResourceSlice{}
	for _, ck := range keys {
		tp := templates[ck]
		sch := cl.scheme[ck]
		profiles := slices.Clone(c.n.profiles(sch))
		for _, name := range sch.ProfileNames() {
			if published[ck.node][name] && !slices.Contains(profiles, name) {
				profiles = append(profiles, name)
			}
		}
		card := counter.Card{Index: ck.card, Scheme: sch, Profiles: profiles}
		m, err := counter.NewModel([]counter.Card{card})
		if err != nil {
			continue
		}
		for _, md := range m.Devices {
			ref, err := sch.ParseDeviceName(md.Name)
			if err != nil || ref.Profile == "" {
				continue // the whole card: a partitioned driver need not offer it
			}
			k := devKey{tp.slice.Spec.Pool.Name, md.Name}
			if _, ok := cl.devs[k]; ok {
				continue
			}
			loc, ok := locOf(ck.node, sch, ref)
			if !ok {
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
			for name, v := range md.Attributes {
				setQualified(d.Attributes, name, v)
			}
			for name, v := range md.Capacity {
				setQualified(d.Capacity, name, v)
			}
			s.Spec.Devices = append(s.Spec.Devices, *d)
			cl.devs[k] = loc
			cl.byLoc[locKey{ck.node, ck.card, loc.profile, ref.Start}] = k
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

// setQualified sets an attribute or a capacity that a device already has
// (under its plain or its qualified name) to the counter model's.
func setQualified[V any](m map[resourceapi.QualifiedName]V, name resourceapi.QualifiedName, v V) {
	for k := range m {
		if k == name || strings.HasSuffix(string(k), "/"+string(name)) {
			m[k] = v
		}
	}
}

// devTemplate is a published partition of a card and its slice.
type devTemplate struct {
	slice *resourceapi.ResourceSlice
	dev   *resourceapi.Device
}

// readInstances puts the allocated claims' partitions into the
// fleet, each restartable or not with the reason.
func (c *Controller) readInstances(cl *cluster) {
	layouts := map[cardKey]partition.Layout{}
	whole := map[cardKey]bool{}
	perPod := map[types.UID]int{} // partitions each pod holds
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
				whole[cardKey{loc.node, loc.card}] = true
				continue
			}
			if len(mine) > 1 && h.why == "" {
				h.why = "its claim holds more than one partition"
			}
			insts = append(insts, inst{loc, h})
		}
	}
	for _, in := range insts {
		if in.h.why == "" {
			in.h.why = c.mayMove(cl, in.h, perPod)
		}
		k := locKey{in.loc.node, in.loc.card, in.loc.profile, in.loc.start}
		cl.held[k] = in.h
		ck := cardKey{in.loc.node, in.loc.card}
		layouts[ck] = append(layouts[ck], partition.Instance{Profile: in.loc.profile,
			Start: in.loc.start, InUse: true, Restartable: in.h.why == ""})
	}
	nodes := make([]string, 0, len(cl.cardsOf))
	for n := range cl.cardsOf {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for _, g := range cl.cardsOf[n] {
			ck := cardKey{n, g}
			if whole[ck] {
				continue // the whole card is allocated: nothing fits, nothing moves
			}
			cl.fleet = append(cl.fleet,
				partition.FleetCard{Node: n, Index: g, Scheme: cl.scheme[ck], Layout: layouts[ck]})
		}
	}
}

// mayMove says why the holder's pods may not be evicted, "" when they
// may: each opted in, has a controller that starts it again without
// counting a failure (restartable), holds only this partition, is not
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
		case p.Annotations[c.n.optIn] != AllowValue:
			return "pod " + name + " did not opt in (annotation " + c.n.optIn + ": " + AllowValue + ")"
		case restartable(p, cl.jobs) != "":
			return restartable(p, cl.jobs)
		case p.DeletionTimestamp != nil:
			return "pod " + name + " is terminating"
		case perPod[p.UID] > 1:
			return "pod " + name + " holds more than one partition"
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
func (cl *cluster) forPod(pod *corev1.Pod) []partition.FleetCard {
	fleet := make([]partition.FleetCard, len(cl.fleet))
	for i, g := range cl.fleet {
		fleet[i] = g
		fleet[i].Layout = append(partition.Layout(nil), g.Layout...)
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
// a large partition with the fewest evictions; nil and why not.
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
		if counterExhausted(n) && len(cl.cardsOf[n.Node]) > 0 && !busy[n.Node] {
			nodes = append(nodes, n.Node)
		}
	}
	if len(nodes) == 0 {
		if len(busy) > 0 {
			return nil, "a pod holding the driver's devices is terminating on each node that refuses it; waiting until it is gone"
		}
		return nil, "no node with partitionable cards refuses it for exhausted counters"
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
			for _, g := range cl.cardsOf[node] {
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

// profiles are the node's cards' profiles large enough to trigger a
// move, smallest first.
func (c *Controller) profiles(cl *cluster, node string) []partition.Profile {
	seen := map[string]bool{}
	var out []partition.Profile
	for _, g := range cl.cardsOf[node] {
		for _, pr := range cl.scheme[cardKey{node, g}].Profiles {
			if pr.Compute >= c.o.minCompute && !seen[pr.Name] {
				seen[pr.Name] = true
				out = append(out, pr)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Compute < out[j].Compute })
	return out
}

// devicesOf are the node's published devices of profile prof.
func (c *Controller) devicesOf(cl *cluster, node string, prof partition.Profile) map[devKey]bool {
	out := map[devKey]bool{}
	for k, loc := range cl.devs {
		if loc.node == node && loc.profile == prof.Name {
			out[k] = true
		}
	}
	return out
}

// planOn is the operation that frees a placement of profile prof on card
// g of node for claim, nil when none. When the plan is refused because
// an evicted pod's replacement could not land at its destination (see
// land), the string says which and why.
func (c *Controller) planOn(ctx context.Context, cl *cluster, pod *corev1.Pod,
	claim *resourceapi.ResourceClaim, node string, g int, prof partition.Profile,
) (*plan, string) {
	req := pplan.Request{Profile: prof.Name, Node: node, Card: &g}
	d, err := pplan.Defragment(cl.fleet, req, pplan.WithMaxMoves(c.o.maxMoves))
	if err != nil || !d.Found || len(d.Moves) == 0 {
		return nil, "" // no plan, or none needed: the card has room the claim does not take
	}
	target, ok := cl.byLoc[locKey{node, g, prof.Name, d.Target.Start}]
	if !ok {
		return nil, "" // the driver does not publish that placement
	}
	p := &plan{moves: len(d.Moves), score: d.Score, op: Operation{
		ID: string(claim.UID), Pod: refOf(&pod.ObjectMeta), Claim: refOf(&claim.ObjectMeta),
		Node: node, Card: g, Profile: prof.Name, Start: d.Target.Start,
		Pool: target.pool, Device: target.device,
	}}
	freed := map[string]bool{}
	budget := map[*policyv1.PodDisruptionBudget]int32{}
	for _, m := range d.Moves {
		h := cl.held[locKey{m.Node, m.Card, m.Profile, m.Start}]
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
				d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: c.n.taint + "-excluded", Effect: resourceapi.DeviceTaintEffectNoSchedule})
				continue
			}
			for _, r := range cl.snap.TaintRules {
				if r.Labels[c.n.operation] == "" && ruleSelects(r, s.Spec.Driver, s.Spec.Pool.Name, d.Name) {
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
