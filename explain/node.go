package explain

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// nodeCtx is the explanation of one node in progress. One goroutine owns
// it.
type nodeCtx struct {
	*engine
	ctx     context.Context
	node    *corev1.Node
	base    structured.Allocator         // the node's problem, reduced to the candidate devices
	slices  []*resourceapi.ResourceSlice // the node's, shared, and their pools'
	devices []devInfo                    // devices the node can use
	onNode  sets.Set[structured.DeviceID]
	ids     map[*resourceapi.ResourceSlice][]structured.DeviceID // of every device of the node's slices
	match   map[string][]bool                                    // CEL result of an expression per device
	errs    map[string][]string
}

// devInfo is a device the node can use.
type devInfo struct {
	id    structured.DeviceID
	slice *resourceapi.ResourceSlice
	dev   *resourceapi.Device
	key   string // what CEL sees of the device (celKeyOf), computed when needed
}

func (d devInfo) String() string { return d.slice.Spec.Pool.Name + "/" + d.dev.Name }

// explainNode explains the subject on one node: node-level exclusions
// first, then the allocator on the whole (candidate-reduced) problem, then,
// when that fails, each request and each claim on its own.
func (e *engine) explainNode(ctx context.Context, node *corev1.Node) NodeReport {
	rep := NodeReport{Node: node.Name}
	if reasons := e.nodeReasons(node); len(reasons) > 0 {
		rep.Reasons = reasons
		return rep
	}
	if len(e.sub.pending) == 0 {
		rep.Fits = true
		return rep
	}
	n := &nodeCtx{engine: e, ctx: ctx, node: node, match: map[string][]bool{}, errs: map[string][]string{}}
	n.gather()
	base, err := structured.NewAllocator(ctx, e.o.features, e.state, e.classes, n.reduced(n.candidates(), true, false, false), e.cel)
	if err != nil {
		rep.Reasons = []Reason{{Kind: AllocatorError, Message: "the allocator fails: " + err.Error()}}
		return rep
	}
	n.base = base
	ok, results, err := n.run(base, e.sub.pending)
	if err != nil {
		rep.Reasons = []Reason{{Kind: AllocatorError, Message: "the allocator fails: " + err.Error()}}
		return rep
	}
	if ok {
		rep.Fits = true
		rep.Allocation = n.picked(e.sub.pending, results)
		return rep
	}
	claimFits := make([]bool, len(e.sub.pending))
	for ci, claim := range e.sub.pending {
		label := e.sub.labels[ci]
		allFit := true
		for ri := range claim.Spec.Devices.Requests {
			rr := n.explainRequest(claim, ri)
			allFit = allFit && rr.Fits
			rep.Requests = append(rep.Requests, rr)
		}
		if !allFit {
			continue
		}
		reasons, fits := n.explainClaim(claim, label)
		rep.Reasons = append(rep.Reasons, reasons...)
		claimFits[ci] = fits
	}
	if len(rep.Reasons) == 0 && !hasFailing(rep.Requests) {
		names := make([]string, 0, len(e.sub.labels))
		for ci, l := range e.sub.labels {
			if claimFits[ci] {
				names = append(names, l)
			}
		}
		pending := e.sub.pending
		pairs := conflicts(len(pending), func(i, j int) bool {
			ok, _, _ := n.run(n.base, []*resourceapi.ResourceClaim{pending[i], pending[j]})
			return ok
		}, func(i int) string { return e.sub.labels[i] })
		rep.Reasons = append(rep.Reasons, Reason{Kind: Together,
			Message: fmt.Sprintf("claims %s each fit on their own, but not all together: they compete for the same devices or counters%s", strings.Join(names, ", "), pairs)})
	}
	return rep
}

func hasFailing(rs []RequestReport) bool {
	for _, r := range rs {
		if !r.Fits {
			return true
		}
	}
	return false
}

// nodeReasons are the reasons the scheduler would not even try the node:
// the pod's node affinity, node taints, claims allocated elsewhere.
func (e *engine) nodeReasons(node *corev1.Node) []Reason {
	pod := e.sub.pod
	var out []Reason
	if pod != nil {
		if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
			msg := "excluded by the pod's " + describeAffinity(pod) + "; node labels: " + describeLabels(node.Labels)
			if err != nil {
				msg = "the pod's node affinity cannot be evaluated: " + err.Error()
			}
			out = append(out, Reason{Kind: NodeAffinity, Message: msg})
		}
		if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations,
			&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
			out = append(out, Reason{Kind: NodeTaint, Message: "the node is cordoned (spec.unschedulable)"})
		}
		if t, found := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false); found {
			out = append(out, Reason{Kind: NodeTaint, Message: fmt.Sprintf("the pod does not tolerate the node taint %s", t.ToString()),
				Taints: []TaintReport{{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}}})
		}
	}
	for _, c := range e.sub.allocated {
		sel := c.Status.Allocation.NodeSelector
		if sel == nil {
			continue
		}
		ns, err := nodeaffinity.NewNodeSelector(sel)
		if err != nil || !ns.Match(node) {
			out = append(out, Reason{Kind: ClaimElsewhere, Message: fmt.Sprintf("claim %s/%s is already allocated to devices this node cannot reach (%s)", c.Namespace, c.Name, describeAllocation(c))})
		}
	}
	return out
}

func describeAllocation(c *resourceapi.ResourceClaim) string {
	var devs []string
	for _, r := range c.Status.Allocation.Devices.Results {
		devs = append(devs, r.Pool+"/"+r.Device)
	}
	return strings.Join(devs, ", ")
}

func describeAffinity(pod *corev1.Pod) string {
	var parts []string
	if len(pod.Spec.NodeSelector) > 0 {
		parts = append(parts, "nodeSelector "+describeLabels(pod.Spec.NodeSelector))
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var terms []string
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var reqs []string
			for _, r := range t.MatchExpressions {
				reqs = append(reqs, fmt.Sprintf("%s %s %s", r.Key, r.Operator, strings.Join(r.Values, ",")))
			}
			for _, r := range t.MatchFields {
				reqs = append(reqs, fmt.Sprintf("field %s %s %s", r.Key, r.Operator, strings.Join(r.Values, ",")))
			}
			terms = append(terms, "("+strings.Join(reqs, " and ")+")")
		}
		parts = append(parts, "required node affinity "+strings.Join(terms, " or "))
	}
	return strings.Join(parts, " and ")
}

func describeLabels(l map[string]string) string {
	if len(l) == 0 {
		return "{}"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// run allocates claims with allocator a on the node. ok is false when the
// allocator finds no allocation.
func (n *nodeCtx) run(a structured.Allocator, claims []*resourceapi.ResourceClaim) (bool, []resourceapi.AllocationResult, error) {
	results, err := a.Allocate(n.ctx, n.node, claims)
	if err != nil {
		return false, nil, err
	}
	return len(results) == len(claims), results, nil
}

func (n *nodeCtx) picked(claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult) []PickedDevice {
	var out []PickedDevice
	for ci, r := range results {
		for _, d := range r.Devices.Results {
			out = append(out, PickedDevice{Claim: claims[ci].Namespace + "/" + claims[ci].Name, Request: d.Request, Driver: d.Driver, Pool: d.Pool, Device: d.Device})
		}
	}
	return out
}

// gather collects the slices and the devices the node can use: those of
// the newest generation of each pool whose node selection matches the
// node.
func (n *nodeCtx) gather() {
	n.slices = append(append([]*resourceapi.ResourceSlice(nil), n.slicesOf[n.node.Name]...), n.shared...)
	n.onNode = sets.New[structured.DeviceID]()
	n.ids = map[*resourceapi.ResourceSlice][]structured.DeviceID{}
	seen := sets.New[*resourceapi.ResourceSlice]()
	for _, s := range n.slices {
		if seen.Has(s) {
			continue
		}
		seen.Insert(s)
		ids := make([]structured.DeviceID, len(s.Spec.Devices))
		for i := range s.Spec.Devices {
			ids[i] = structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Devices[i].Name)
		}
		n.ids[s] = ids
		if s.Spec.Pool.Generation < n.poolGen[poolKey{s.Spec.Driver, s.Spec.Pool.Name}] {
			continue
		}
		whole, err := structured.NodeMatches(n.o.features, n.node, ptr.Deref(s.Spec.NodeName, ""), ptr.Deref(s.Spec.AllNodes, false), s.Spec.NodeSelector)
		if err != nil {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			ok := whole
			if ptr.Deref(s.Spec.PerDeviceNodeSelection, false) {
				ok, err = structured.NodeMatches(n.o.features, n.node, ptr.Deref(d.NodeName, ""), ptr.Deref(d.AllNodes, false), d.NodeSelector)
				ok = ok && err == nil
			}
			if ok {
				id := n.ids[s][i]
				n.devices = append(n.devices, devInfo{id: id, slice: s, dev: d})
				n.onNode.Insert(id)
			}
		}
	}
}

// candidates returns the devices of the node that some request (or
// alternative) of the pending claims can select: those for which its
// class's and its own selectors are true, or fail (so that the allocator
// meets the same error), and devices with binding conditions (which move
// their pool to the end of the allocator's order). Allocating from only
// these is the same problem for the allocator, in the same order: it
// skips every other device. It is what makes explaining fast on large
// fleets, since identical devices share CEL evaluations (see eval).
func (n *nodeCtx) candidates() sets.Set[structured.DeviceID] {
	keep := sets.New[structured.DeviceID]()
	all := n.everyDevice()
	for _, c := range n.sub.pending {
		for _, r := range c.Spec.Devices.Requests {
			for _, rs := range specsOf(&r) {
				class, err := n.classes.Get(rs.class)
				if err != nil {
					continue // the allocator reports it
				}
				for _, i := range n.filterOrFail(n.filterOrFail(all, class.Spec.Selectors), rs.selectors) {
					keep.Insert(n.devices[i].id)
				}
			}
		}
	}
	for _, d := range n.devices {
		if len(d.dev.BindingConditions) > 0 {
			keep.Insert(d.id)
		}
	}
	return keep
}

// reduced returns the node's slices with only the devices keep selects
// (plus, withAllocated, every allocated device, whose counter consumption
// the allocator reads from the slices), without taints and counter
// consumption when asked.
func (n *nodeCtx) reduced(keep sets.Set[structured.DeviceID], withAllocated, noTaints, noCounters bool) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, len(n.slices))
	seen := sets.New[*resourceapi.ResourceSlice]()
	for _, s := range n.slices {
		if seen.Has(s) {
			continue
		}
		seen.Insert(s)
		c := *s
		c.Spec.Devices = nil
		for i, d := range s.Spec.Devices {
			id := n.ids[s][i]
			if !keep.Has(id) && !(withAllocated && n.state.AllocatedDevices.Has(id)) {
				continue
			}
			if noTaints {
				d.Taints = nil
			}
			if noCounters {
				d.ConsumesCounters = nil
			}
			c.Spec.Devices = append(c.Spec.Devices, d)
		}
		out = append(out, &c)
	}
	return out
}

// try runs the allocator on a reduced problem: claims against the
// devices in keep, with or without the allocated devices, taints and
// counter consumption.
func (n *nodeCtx) try(claims []*resourceapi.ResourceClaim, keep sets.Set[structured.DeviceID], noState, noTaints, noCounters bool) bool {
	state := n.state
	if noState {
		state = structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		}
	}
	a, err := structured.NewAllocator(n.ctx, n.o.features, state, n.classes, n.reduced(keep, !noState, noTaints, noCounters), n.cel)
	if err != nil {
		return false
	}
	ok, _, err := n.run(a, claims)
	return ok && err == nil
}

// untolerated returns the taints of d that prevent allocation for a
// request with the given tolerations (as the allocator decides it).
func untolerated(d *resourceapi.Device, tolerations []resourceapi.DeviceToleration) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, t := range d.Taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		tolerated := false
		for _, tol := range tolerations {
			if resourceclaim.ToleratesTaint(tol, t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			out = append(out, t)
		}
	}
	return out
}

// holderList groups devices by the claims that hold them.
func (n *nodeCtx) holderList(ids []structured.DeviceID) []Holder {
	byClaim := map[string]*Holder{}
	var order []string
	for _, id := range ids {
		c := n.holders[id]
		if c == nil {
			continue
		}
		key := c.Namespace + "/" + c.Name
		h := byClaim[key]
		if h == nil {
			h = &Holder{Claim: key}
			for _, r := range c.Status.ReservedFor {
				if r.Resource == "pods" && r.APIGroup == "" {
					h.Pods = append(h.Pods, c.Namespace+"/"+r.Name)
				} else {
					h.Pods = append(h.Pods, fmt.Sprintf("%s.%s %s/%s", r.Resource, r.APIGroup, c.Namespace, r.Name))
				}
			}
			byClaim[key] = h
			order = append(order, key)
		}
		h.Devices = append(h.Devices, id.Pool.String()+"/"+id.Device.String())
	}
	sort.Strings(order)
	out := make([]Holder, len(order))
	for i, k := range order {
		out[i] = *byClaim[k]
	}
	return out
}
