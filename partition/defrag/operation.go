package defrag

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// current reads the operation under way from its DeviceTaintRules, nil
// when there is none. Rules of several operations (which one controller
// never makes) are all advanced in turn, the oldest first.
func (c *Controller) current(ctx context.Context) (*Operation, error) {
	rules, err := c.client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: c.n.operation})
	if err != nil {
		return nil, fmt.Errorf("list defrag taint rules: %w", err)
	}
	var ops []*Operation
	seen := map[string]*Operation{}
	for _, r := range rules.Items {
		id := r.Labels[c.n.operation]
		if op, ok := seen[id]; ok {
			if op != nil {
				op.present++
			}
			continue
		}
		seen[id] = nil
		op := &Operation{}
		if err := json.Unmarshal([]byte(r.Annotations[c.n.operation]), op); err != nil || op.ID != id {
			// Not ours to read: remove the operation's rules so that the
			// devices do not stay tainted.
			klog.FromContext(ctx).Error(err, "Unreadable defrag taint rule, removing its operation's rules", "rule", r.Name)
			if err := c.untaint(ctx, id); err != nil {
				return nil, err
			}
			continue
		}
		op.present = 1
		seen[id] = op
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Started.Before(&ops[j].Started) })
	return ops[0], nil
}

// start begins an operation: taints the region, evicts the pods, tells
// the pods involved.
func (c *Controller) start(ctx context.Context, p *plan) error {
	logger := klog.FromContext(ctx)
	op := &p.op
	op.Started = metav1.NewTime(c.o.now())
	op.Rules = len(p.region)
	owners, err := c.owners(ctx)
	if err != nil {
		return fmt.Errorf("start defrag operation for %s: %w", op.Pod, err)
	}
	data, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("start defrag operation: %w", err)
	}
	for i, k := range p.region {
		rule := &resourceapi.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{
				Name:            c.n.rulePrefix + op.ID + "-" + strconv.Itoa(i),
				Labels:          map[string]string{c.n.operation: op.ID},
				Annotations:     map[string]string{c.n.operation: string(data)},
				OwnerReferences: owners,
			},
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(c.driver), Pool: ptr.To(k.pool), Device: ptr.To(k.device)},
				Taint:          resourceapi.DeviceTaint{Key: c.n.taint, Value: op.ID, Effect: resourceapi.DeviceTaintEffectNoSchedule},
			},
		}
		if _, err := c.client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			_ = c.untaint(ctx, op.ID)
			return fmt.Errorf("taint device %s/%s: %w", k.pool, k.device, err)
		}
		if c.crashed(fmt.Sprintf("tainted-%d", i+1)) {
			return errCrashed
		}
	}
	if c.crashed("tainted") {
		return errCrashed
	}
	logger.Info("Defragmenting", "pod", op.Pod.String(), "evict", op.evicted(), "placement", c.placement(op), "device", op.Device)
	c.event(ctx, op.Pod, corev1.EventTypeNormal, ReasonDefragmenting,
		fmt.Sprintf("evicting %s to free %s (device %s)", op.evicted(), c.placement(op), op.Device))
	return c.evict(ctx, op)
}

// evict evicts the operation's pods that still run: all of them when it
// starts, those a stopped controller did not reach when it resumes. A
// pod already terminating, gone or replaced (another UID) is not
// evicted again. A refused eviction abandons the operation.
func (c *Controller) evict(ctx context.Context, op *Operation) error {
	for i, e := range op.Evictions {
		pod, err := c.client.CoreV1().Pods(e.Pod.Namespace).Get(ctx, e.Pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && (pod.UID != e.Pod.UID || pod.DeletionTimestamp != nil):
			continue // evicted before (by us or anyone): its claim goes with it
		case err != nil:
			return fmt.Errorf("defrag for %s: read pod %s: %w", op.Pod, e.Pod, err)
		}
		ev := &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: e.Pod.Name, Namespace: e.Pod.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &op.Evictions[i].Pod.UID}},
		}
		err = c.client.PolicyV1().Evictions(e.Pod.Namespace).Evict(ctx, ev)
		switch {
		case err == nil:
			c.mem.evictions = append(c.mem.evictions, evictionRecord{at: c.o.now(), node: e.Move.Node})
			c.eventRelated(ctx, e.Pod, corev1.EventTypeNormal, ReasonEvicted,
				fmt.Sprintf("evicted to make room for %s: %s", op.Pod, c.placement(op)), &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: e.Move.Node})
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already (or replaced): its claim goes with it.
		default:
			why := fmt.Sprintf("eviction of %s refused: %v", e.Pod, err)
			if apierrors.IsTooManyRequests(err) {
				why = fmt.Sprintf("eviction of %s refused: its PodDisruptionBudget allows no disruption now", e.Pod)
			}
			c.abandon(ctx, op, why)
			return fmt.Errorf("defrag for %s: %s", op.Pod, why)
		}
		if c.crashed(fmt.Sprintf("evicted-%d", i+1)) {
			return errCrashed
		}
	}
	return nil
}

// owners are the owner references of the operation's DeviceTaintRules:
// the ClusterRole of WithOwner, none without it.
func (c *Controller) owners(ctx context.Context) ([]metav1.OwnerReference, error) {
	if c.o.owner == "" {
		return nil, nil
	}
	if c.ownerUID == "" {
		cr, err := c.client.RbacV1().ClusterRoles().Get(ctx, c.o.owner, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("read ClusterRole %s, the owner of the taint rules: %w", c.o.owner, err)
		}
		c.ownerUID = cr.UID
	}
	return []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: c.o.owner, UID: c.ownerUID}}, nil
}

// advance moves an operation on by one step.
func (c *Controller) advance(ctx context.Context, op *Operation) error {
	logger := klog.FromContext(ctx)
	if op.Rules > 0 && op.present < op.Rules {
		// A controller stopped while tainting: no pod was evicted yet
		// (evictions come after the last taint). Roll back at once.
		logger.Info("Rolling back a defragmentation stopped while tainting", "pod", op.Pod.String(), "rules", op.present, "of", op.Rules)
		if err := c.untaint(ctx, op.ID); err != nil {
			return err
		}
		c.event(ctx, op.Pod, corev1.EventTypeNormal, ReasonRolledBack,
			fmt.Sprintf("a defragmentation for this pod stopped while tainting (%d of %d taint rules made, no pod evicted); its taints are removed", op.present, op.Rules))
		return nil
	}
	if op.Rules > 0 {
		// The whole region is tainted: evict what a stopped controller
		// did not (nothing when it did).
		if err := c.evict(ctx, op); err != nil {
			return err
		}
	}
	pod, err := c.client.CoreV1().Pods(op.Pod.Namespace).Get(ctx, op.Pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && pod.UID != op.Pod.UID {
		c.abandon(ctx, op, "the waiting pod is gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("defrag for %s: %w", op.Pod, err)
	}
	claim, err := c.client.ResourceV1().ResourceClaims(op.Claim.Namespace).Get(ctx, op.Claim.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && claim.UID != op.Claim.UID {
		c.abandon(ctx, op, "the waiting claim is gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("defrag for %s: %w", op.Pod, err)
	}
	landing, err := c.landReplacements(ctx, op)
	if err != nil {
		return fmt.Errorf("defrag for %s: %w", op.Pod, err)
	}
	if pod.Spec.NodeName != "" && landing == "" {
		if err := c.untaint(ctx, op.ID); err != nil {
			return err
		}
		logger.Info("Defragmentation done", "pod", op.Pod.String(), "node", pod.Spec.NodeName, "device", op.Device)
		c.event(ctx, op.Pod, corev1.EventTypeNormal, ReasonPlaced, fmt.Sprintf("scheduled with the freed %s; the region's taints are removed", c.placement(op)))
		return nil
	}
	if c.o.now().After(c.deadline(op)) {
		c.abandon(ctx, op, c.lateWhy(op, pod, landing))
		return nil
	}
	if claim.Status.Allocation != nil {
		return nil // allocated: the scheduler reserves it and binds the pod
	}
	cl, err := c.readCluster(ctx)
	if err != nil {
		return err
	}
	target, ok := cl.devs[devKey{op.Pool, op.Device}]
	if !ok {
		c.abandon(ctx, op, "device "+op.Device+" is not in the driver's model any more")
		return nil
	}
	for _, h := range cl.snap.Claims {
		if h.Status.Allocation == nil || h.UID == claim.UID {
			continue
		}
		for _, r := range h.Status.Allocation.Devices.Results {
			if loc, ok := cl.devs[devKey{r.Pool, r.Device}]; ok && r.Driver == c.driver && loc.overlaps(target) {
				logger.V(2).Info("Waiting for the region to be freed", "pod", op.Pod.String(), "holder", h.Namespace+"/"+h.Name)
				return nil
			}
		}
	}
	if cl.unpublished[devKey{op.Pool, op.Device}] {
		logger.V(2).Info("Waiting for the driver to publish the freed device", "pod", op.Pod.String(), "device", op.Device)
		return nil
	}
	alloc, err := c.allocate(ctx, cl, claim, op.Node, map[devKey]bool{{op.Pool, op.Device}: true}, nil, false)
	if err != nil {
		c.abandon(ctx, op, fmt.Sprintf("the freed device does not fit claim %s: %v", op.Claim, err))
		return nil
	}
	if alloc.AllocationTimestamp == nil {
		// kube-scheduler 1.37 (binding conditions and device status on)
		// stamps an allocated claim that has no timestamp when it
		// reserves it, which the API server refuses as a change to the
		// immutable allocation: the pod would never bind.
		alloc.AllocationTimestamp = ptr.To(metav1.NewTime(c.o.now()))
	}
	claim.Status.Allocation = alloc
	if _, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return nil // changed meanwhile: look again next step
		}
		return fmt.Errorf("allocate claim %s: %w", op.Claim, err)
	}
	if c.crashed("allocated") {
		return errCrashed
	}
	logger.Info("Allocated the freed device", "claim", op.Claim.String(), "device", op.Device)
	c.event(ctx, op.Pod, corev1.EventTypeNormal, ReasonAllocated, fmt.Sprintf("claim %s allocated to the freed device %s (%s)", op.Claim.Name, op.Device, c.placement(op)))
	return nil
}

// abandon ends an operation early: removes its taints and tells the pods
// why.
func (c *Controller) abandon(ctx context.Context, op *Operation, why string) {
	klog.FromContext(ctx).Info("Defragmentation abandoned", "pod", op.Pod.String(), "reason", why)
	c.mem.abandoned[op.Pod.UID] = c.o.now()
	if err := c.untaint(ctx, op.ID); err != nil {
		klog.FromContext(ctx).Error(err, "Remove defrag taints", "operation", op.ID)
	}
	c.event(ctx, op.Pod, corev1.EventTypeWarning, ReasonAbandoned, "defragmentation for this pod abandoned: "+why)
}

// untaint deletes an operation's DeviceTaintRules.
func (c *Controller) untaint(ctx context.Context, id string) error {
	err := c.client.ResourceV1().DeviceTaintRules().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: c.n.operation + "=" + id})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the taints of defrag operation %s: %w", id, err)
	}
	return nil
}

// event records an Event on a pod. A failure is logged: an Event is not
// worth failing an operation for.
func (c *Controller) event(ctx context.Context, pod ObjectRef, typ, reason, msg string) {
	c.eventRelated(ctx, pod, typ, reason, msg, nil)
}

// eventRelated is event with a related object (the node a pod is
// evicted from, which the eviction budget reads back after a restart).
func (c *Controller) eventRelated(ctx context.Context, pod ObjectRef, typ, reason, msg string, related *corev1.ObjectReference) {
	now := metav1.NewTime(c.o.now())
	host, _ := os.Hostname()
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()), Namespace: pod.Namespace},
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: c.n.component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: c.n.component,
		ReportingInstance:   host,
		Related:             related,
	}
	if _, err := c.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Record event", "pod", pod.String(), "reason", reason)
	}
}
