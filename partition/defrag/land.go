package defrag

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ReasonReplacementAllocated, on an evicted pod's replacement: its claim
// got the device the operation reserved for it.
const ReasonReplacementAllocated = "DefragReplacementAllocated"

// RefusedPlans is how many plans the controller has refused since New
// because an evicted pod's replacement could not land where the plan
// moves it (its claim's selectors, class or constraints do not accept
// the destination device, or one of the scheduler's filters refuses it
// the destination node: node selection, affinity or tolerations,
// resources, host ports, volume topology, topology spread, pod
// affinity). Each refusal is logged at
// V(2) with the reason. It is safe to call while Run runs.
func (c *Controller) RefusedPlans() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// refuse counts a plan refused because a replacement would not land, and
// logs it when its reason is new for that waiting pod and placement
// (each Step plans again).
func (c *Controller) refuse(ctx context.Context, p *plan, why string) {
	key := "refused " + string(p.op.Pod.UID) + " " + c.placement(&p.op)
	c.mu.Lock()
	c.refused++
	changed := c.told[key] != why
	c.told[key] = why
	c.mu.Unlock()
	if changed {
		klog.FromContext(ctx).V(2).Info("Defragmentation plan refused", "pod", p.op.Pod.String(), "placement", c.placement(&p.op), "reason", why)
	}
}

// land checks that every pod p evicts can run again where the plan moves
// its instance, and makes the plan reserve those places. For each
// eviction, in order, the destination (Move.ToNode, ToCard, the same
// profile, ToStart) must be a device of the driver; the pod's node
// selector, required node affinity and tolerations must admit the
// destination node; the scheduler's other filters must pass its
// replacement there (landing.fits: resources and pod count, host ports,
// volume topology, topology spread, pod affinity), with the evicted pods
// gone and the earlier replacements landed; and the real allocator must
// give the pod's claim spec (the replacement's claim is made from the
// same template) that device and no other, with the cluster as it will
// be: the claims in freed gone, the waiting claim holding held (its
// target), the earlier evictions' replacements holding their
// destinations. It fills in each
// eviction's destination device, owner and pod claim entry and appends
// the devices overlapping the destinations to p.region (counted in
// p.reserved). It returns "" when every replacement lands, otherwise
// which pod does not and why; p is then not to be used.
//
// Without the check, plan.Defragment's plan (which only knows profiles)
// would evict pods whose claims, node selection, resources, volumes or
// spread only accept where they run: their replacements, whose claims
// are pinned to the destination, would stay Pending, and the waiting pod
// would have cost a running one.
func (c *Controller) land(ctx context.Context, cl *cluster, p *plan, freed map[string]bool, held []resourceapi.DeviceRequestAllocationResult) string {
	held = slices.Clone(held)
	inRegion := map[devKey]bool{}
	for _, k := range p.region {
		inRegion[k] = true
	}
	var reserved []devKey
	checked := map[types.UID]bool{} // claims already given their destination
	lg := c.newLanding(cl, p)
	for i := range p.op.Evictions {
		e := &p.op.Evictions[i]
		m := e.Move
		where := c.where(m.Profile, m.ToCard, m.ToStart, m.ToNode)
		dest, ok := cl.byLoc[locKey{m.ToNode, m.ToCard, m.Profile, m.ToStart}]
		if !ok {
			return fmt.Sprintf("pod %s cannot land at %s: the driver has no such device", e.Pod, where)
		}
		vp := cl.pods[e.Pod.UID]
		h := cl.held[locKey{m.Node, m.Card, m.Profile, m.Start}]
		if vp == nil || h == nil {
			return fmt.Sprintf("pod %s cannot land at %s: the pod or its claim is not found", e.Pod, where)
		}
		node := nodeOf(cl, m.ToNode)
		if err := nodeAdmits(vp, node); err != nil {
			return fmt.Sprintf("pod %s cannot land at %s: %v", e.Pod, where, err)
		}
		r := replacementOf(vp, m.ToNode)
		if why := lg.fits(ctx, r, node); why != "" {
			return fmt.Sprintf("pod %s cannot land at %s: %s", e.Pod, where, why)
		}
		lg.land(r)
		if owner := metav1.GetControllerOf(vp); owner != nil {
			e.Owner = owner.UID
		}
		e.PodClaim = podClaimOf(vp, h.claim.Name)
		e.ToPool, e.ToDevice = dest.pool, dest.device
		if !checked[h.claim.UID] {
			checked[h.claim.UID] = true
			spec := &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: h.claim.Namespace, Name: h.claim.Name},
				Spec:       *h.claim.Spec.DeepCopy(),
			}
			alloc, err := c.allocate(ctx, cl, spec, m.ToNode, map[devKey]bool{dest: true}, freed, false, held...)
			if err != nil {
				return fmt.Sprintf("pod %s cannot land at %s (device %s): its claim %s does not take it: %v", e.Pod, where, dest.device, h.claim.Name, err)
			}
			if why := classConfig(spec, alloc); why != "" {
				return fmt.Sprintf("pod %s cannot land at %s: %s", e.Pod, where, why)
			}
			held = append(held, alloc.Devices.Results...)
		}
		dloc := cl.devs[dest]
		for k, loc := range cl.devs {
			if loc.overlaps(dloc) && !inRegion[k] {
				inRegion[k] = true
				reserved = append(reserved, k)
			}
		}
	}
	sort.Slice(reserved, func(i, j int) bool {
		return reserved[i].pool < reserved[j].pool || reserved[i].pool == reserved[j].pool && reserved[i].device < reserved[j].device
	})
	p.region = append(p.region, reserved...)
	p.reserved = len(reserved)
	return ""
}

// nodeOf is the snapshot's node name, or a node with only that name.
func nodeOf(cl *cluster, name string) *corev1.Node {
	for _, n := range cl.snap.Nodes {
		if n.Name == name {
			return n
		}
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// nodeAdmits says why the scheduler would not place pod's replacement
// (the same pod spec) on node, nil when it would as far as node
// selection goes: spec.nodeSelector and the required node affinity
// match the node's labels, the node is not cordoned and has no
// NoSchedule or NoExecute taint the pod does not tolerate.
func nodeAdmits(pod *corev1.Pod, node *corev1.Node) error {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	switch {
	case err != nil:
		return fmt.Errorf("its node affinity cannot be evaluated: %w", err)
	case !ok:
		return fmt.Errorf("its node selector or required node affinity excludes node %s", node.Name)
	}
	logger := klog.Background()
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(logger, pod.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
		return fmt.Errorf("node %s is cordoned", node.Name)
	}
	if t, bad := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false); bad {
		return fmt.Errorf("it does not tolerate node %s's taint %s", node.Name, t.ToString())
	}
	return nil
}

// podClaimOf is the entry of pod's spec.resourceClaims whose claim is
// named claim, "" when none is.
func podClaimOf(pod *corev1.Pod, claim string) string {
	for _, pc := range pod.Spec.ResourceClaims {
		if ptr.Deref(pc.ResourceClaimName, "") == claim {
			return pc.Name
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if ptr.Deref(st.ResourceClaimName, "") == claim {
			return st.Name
		}
	}
	return ""
}

// replacement is an evicted pod's replacement and its claim (nil while
// the claim is not made).
type replacement struct {
	pod   *corev1.Pod
	claim *resourceapi.ResourceClaim
}

// landReplacements lands the evictions' replacements at the destinations
// the operation reserved. A replacement of an eviction is a pod other
// than the evicted one, not terminating, with the same controller (the
// eviction's Owner), made at or after the operation started; each is
// matched to one eviction of its owner, first those whose claim already
// has the eviction's destination. A matched replacement whose claim
// (from the eviction's PodClaim entry) exists and is not allocated gets
// it allocated to the destination device, as the waiting claim is (see
// advance); the scheduler then binds it. It returns "" when every
// eviction with a recorded destination has a bound replacement (or none
// has a destination: operations recorded before destinations were
// reserved), otherwise what the operation still waits for.
func (c *Controller) landReplacements(ctx context.Context, op *Operation) (string, error) {
	logger := klog.FromContext(ctx)
	byNS := map[string][]replacement{} // candidates, oldest first
	taken := map[types.UID]bool{}
	matched := make([]*replacement, len(op.Evictions))
	started := op.Started.Time.Truncate(time.Second)
	candidates := func(e *Eviction) ([]replacement, error) {
		if rs, ok := byNS[e.Pod.Namespace]; ok {
			return rs, nil
		}
		l, err := c.listPods(ctx, e.Pod.Namespace)
		if err != nil {
			return nil, fmt.Errorf("list the replacements of %s: %w", e.Pod, err)
		}
		var rs []replacement
		for _, p := range l {
			if p.DeletionTimestamp != nil || metav1.GetControllerOf(p) == nil || p.CreationTimestamp.Time.Before(started) {
				continue
			}
			rs = append(rs, replacement{pod: p})
		}
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].pod.CreationTimestamp.Before(&rs[j].pod.CreationTimestamp) })
		byNS[e.Pod.Namespace] = rs
		return rs, nil
	}
	claimOf := func(r *replacement, entry string) error {
		if r.claim != nil {
			return nil
		}
		name := ""
		for _, st := range r.pod.Status.ResourceClaimStatuses {
			if st.Name == entry && st.ResourceClaimName != nil {
				name = *st.ResourceClaimName
			}
		}
		if name == "" {
			return nil
		}
		claim, err := c.client.ResourceV1().ResourceClaims(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read claim %s/%s: %w", r.pod.Namespace, name, err)
		}
		r.claim = claim
		return nil
	}
	// Two passes: replacements that hold their destination already, then
	// the oldest unmatched one of the owner.
	for pass := range 2 {
		for i := range op.Evictions {
			e := &op.Evictions[i]
			if e.ToDevice == "" || e.Owner == "" || matched[i] != nil {
				continue
			}
			rs, err := candidates(e)
			if err != nil {
				return "", err
			}
			for j := range rs {
				r := &rs[j]
				if taken[r.pod.UID] || r.pod.UID == e.Pod.UID || metav1.GetControllerOf(r.pod).UID != e.Owner {
					continue
				}
				if err := claimOf(r, e.PodClaim); err != nil {
					return "", err
				}
				if pass == 0 && !holds(r.claim, c.driver, e.ToPool, e.ToDevice) {
					continue
				}
				taken[r.pod.UID] = true
				matched[i] = r
				break
			}
		}
	}
	var waits []string
	var cl *cluster
	for i := range op.Evictions {
		e := &op.Evictions[i]
		r := matched[i]
		switch {
		case e.ToDevice == "" || e.Owner == "":
			continue
		case r == nil:
			waits = append(waits, "the replacement of "+e.Pod.String()+" is not made yet")
			continue
		case r.pod.Spec.NodeName != "":
			continue // bound, on its destination or wherever the scheduler found room first
		case r.claim == nil:
			waits = append(waits, "the claim of replacement "+r.pod.Namespace+"/"+r.pod.Name+" is not made yet")
			continue
		case r.claim.Status.Allocation != nil:
			waits = append(waits, "replacement "+r.pod.Namespace+"/"+r.pod.Name+" is not bound yet")
			continue
		}
		if cl == nil {
			var err error
			if cl, err = c.readCluster(ctx); err != nil {
				return "", err
			}
		}
		dest := devKey{e.ToPool, e.ToDevice}
		rname := r.pod.Namespace + "/" + r.pod.Name
		if _, ok := cl.devs[dest]; !ok || cl.unpublished[dest] {
			logger.V(2).Info("Waiting for the driver to publish a replacement's destination", "replacement", rname, "device", e.ToDevice)
			waits = append(waits, "the destination "+e.ToDevice+" of replacement "+rname+" is not published")
			continue
		}
		alloc, err := c.allocate(ctx, cl, r.claim, e.Move.ToNode, map[devKey]bool{dest: true}, nil, false)
		if err != nil {
			// Held still (by an evicted claim being let go), or taken: the
			// timeout ends the wait.
			logger.V(2).Info("Waiting for a replacement's destination", "replacement", rname, "device", e.ToDevice, "reason", err.Error())
			waits = append(waits, "the destination "+e.ToDevice+" of replacement "+rname+" is not free")
			continue
		}
		if alloc.AllocationTimestamp == nil {
			alloc.AllocationTimestamp = ptr.To(metav1.NewTime(c.o.now())) // see advance
		}
		claim := r.claim.DeepCopy()
		claim.Status.Allocation = alloc
		if _, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				waits = append(waits, "replacement "+rname+" is not bound yet")
				continue // changed meanwhile (the scheduler allocated it?): look again next step
			}
			return "", fmt.Errorf("allocate claim %s/%s of replacement %s: %w", claim.Namespace, claim.Name, rname, err)
		}
		logger.Info("Allocated a replacement's destination", "replacement", rname, "evicted", e.Pod.String(), "claim", claim.Namespace+"/"+claim.Name, "device", e.ToDevice)
		c.event(ctx, refOf(&r.pod.ObjectMeta), corev1.EventTypeNormal, ReasonReplacementAllocated,
			fmt.Sprintf("replaces %s, evicted for %s: claim %s allocated to %s (%s), reserved for it",
				e.Pod, op.Pod, claim.Name, e.ToDevice,
				c.where(e.Move.Profile, e.Move.ToCard, e.Move.ToStart, e.Move.ToNode)))
		waits = append(waits, "replacement "+rname+" is not bound yet")
	}
	return strings.Join(waits, "; "), nil
}

// holds reports whether claim is allocated the driver's device.
func holds(claim *resourceapi.ResourceClaim, driver, pool, device string) bool {
	if claim == nil || claim.Status.Allocation == nil {
		return false
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driver && r.Pool == pool && r.Device == device {
			return true
		}
	}
	return false
}

// lateWhy is why an operation that ran past its timeout is abandoned:
// the waiting pod is not bound, or (landing, from landReplacements) a
// replacement has not landed.
func (c *Controller) lateWhy(op *Operation, pod *corev1.Pod, landing string) string {
	after := c.deadline(op).Sub(op.Started.Time)
	if pod.Spec.NodeName != "" && landing != "" {
		return fmt.Sprintf("the replacements did not land %s after the operation started: %s", after, landing)
	}
	return fmt.Sprintf("the pod is not scheduled %s after the operation started", after)
}
