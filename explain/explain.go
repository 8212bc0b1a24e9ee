package explain

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/internal/allocstate"
)

// ErrNotFound is returned (wrapped) when a pod refers to a claim or a
// claim template that the snapshot does not have.
var ErrNotFound = errors.New("not found")

// Option configures an explanation.
type Option func(*options) error

type options struct {
	features    structured.Features
	nodes       sets.Set[string]
	parallelism int
	closest     int
}

// WithFeatures sets the allocator features (default DefaultFeatures),
// for a cluster whose scheduler runs with other feature gates.
func WithFeatures(f structured.Features) Option {
	return func(o *options) error { o.features = f; return nil }
}

// WithNodes limits the candidate nodes to the named ones (default: every
// node of the snapshot). An unknown name is an error.
func WithNodes(names ...string) Option {
	return func(o *options) error { o.nodes = sets.New(names...); return nil }
}

// WithParallelism sets how many nodes are explained at once (default
// GOMAXPROCS). The report is the same for any n.
func WithParallelism(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("parallelism %d: must be at least 1", n)
		}
		o.parallelism = n
		return nil
	}
}

// WithClosest sets how many of the closest devices a selector
// explanation shows (default 3).
func WithClosest(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("closest %d: must not be negative", n)
		}
		o.closest = n
		return nil
	}
}

// subject is what to explain: the claims that need an allocation, the
// pod they belong to (nil for a lone claim) and the pod's claims that
// already have one.
type subject struct {
	name      string
	pod       *corev1.Pod
	pending   []*resourceapi.ResourceClaim
	labels    []string // display names of pending, same order
	allocated []*resourceapi.ResourceClaim
	self      string // "NS/NAME" of a claim whose own allocation is ignored
}

// Pod explains why the pod's claims cannot be allocated, node by node.
// Claims the pod refers to by name must be in the snapshot; a claim made
// from a template is taken from the snapshot when the pod's status names
// it, else it is built from the template (what the resource claim
// controller would create). Claims that are already allocated are not
// allocated again: nodes that cannot reach their devices are excluded.
func Pod(ctx context.Context, snap *Snapshot, pod *corev1.Pod, opts ...Option) (*Report, error) {
	if pod == nil {
		return nil, errors.New("explain pod: pod is nil")
	}
	sub := &subject{name: "pod " + pod.Namespace + "/" + pod.Name, pod: pod}
	for _, pc := range pod.Spec.ResourceClaims {
		name, template := "", ""
		switch {
		case pc.ResourceClaimName != nil:
			name = *pc.ResourceClaimName
		case pc.ResourceClaimTemplateName != nil:
			template = *pc.ResourceClaimTemplateName
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
		default:
			return nil, fmt.Errorf("explain pod %s/%s: claim %q names neither a claim nor a template", pod.Namespace, pod.Name, pc.Name)
		}
		if name != "" {
			c := snap.claim(pod.Namespace, name)
			if c == nil {
				return nil, fmt.Errorf("explain pod %s/%s: claim %s/%s: %w", pod.Namespace, pod.Name, pod.Namespace, name, ErrNotFound)
			}
			sub.add(c, pod.Namespace+"/"+name)
			continue
		}
		t := snap.template(pod.Namespace, template)
		if t == nil {
			return nil, fmt.Errorf("explain pod %s/%s: claim template %s/%s: %w", pod.Namespace, pod.Name, pod.Namespace, template, ErrNotFound)
		}
		c := claimFromTemplate(t, pod.Name+"-"+pc.Name)
		sub.add(c, fmt.Sprintf("%s/%s (from template %s)", c.Namespace, c.Name, t.Name))
	}
	if err := sub.addExtended(snap, pod); err != nil {
		return nil, fmt.Errorf("explain pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return explain(ctx, snap, sub, opts)
}

// addExtended adds the claim through which DRA serves the pod's
// extended-resource requests (KEP-5004: a DeviceClass with
// extendedResourceName, or the implicit name
// deviceclass.resource.kubernetes.io/CLASS): the one the scheduler
// created when the pod status names it, else the one it would create,
// with one request per container and resource (container-I-request-J).
func (s *subject) addExtended(snap *Snapshot, pod *corev1.Pod) error {
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		c := snap.claim(pod.Namespace, st.ResourceClaimName)
		if c == nil {
			return fmt.Errorf("extended-resource claim %s/%s: %w", pod.Namespace, st.ResourceClaimName, ErrNotFound)
		}
		s.add(c, pod.Namespace+"/"+st.ResourceClaimName+" (extended resources)")
		return nil
	}
	classOf := map[corev1.ResourceName]string{}
	for _, c := range snap.Classes {
		classOf[corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix+c.Name)] = c.Name
	}
	for _, c := range snap.Classes {
		// An explicit name wins over an implicit one.
		if c.Spec.ExtendedResourceName != nil {
			classOf[corev1.ResourceName(*c.Spec.ExtendedResourceName)] = c.Name
		}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name + "-extended-resources", Namespace: pod.Namespace, UID: types.UID("explain-extended-" + pod.Namespace + "-" + pod.Name),
	}}
	for i, ctr := range pod.Spec.Containers {
		names := make([]string, 0, len(ctr.Resources.Limits)+len(ctr.Resources.Requests))
		amount := map[string]int64{}
		for _, list := range []corev1.ResourceList{ctr.Resources.Requests, ctr.Resources.Limits} {
			for name, q := range list {
				if _, ok := classOf[name]; ok && q.Value() > 0 {
					if _, seen := amount[string(name)]; !seen {
						names = append(names, string(name))
					}
					amount[string(name)] = q.Value()
				}
			}
		}
		sort.Strings(names)
		for j, name := range names {
			claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{
				Name: fmt.Sprintf("container-%d-request-%d", i, j),
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: classOf[corev1.ResourceName(name)],
					AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
					Count:           amount[name],
				},
			})
		}
	}
	if len(claim.Spec.Devices.Requests) > 0 {
		s.add(claim, claim.Namespace+"/"+claim.Name+" (extended resources)")
	}
	return nil
}

// Claim explains why the claim cannot be allocated, node by node. The
// claim need not be in the snapshot (a what-if). An allocated claim is
// explained as if it were not allocated: its own devices count as free.
func Claim(ctx context.Context, snap *Snapshot, claim *resourceapi.ResourceClaim, opts ...Option) (*Report, error) {
	if claim == nil {
		return nil, errors.New("explain claim: claim is nil")
	}
	c := claim.DeepCopy()
	c.Status = resourceapi.ResourceClaimStatus{}
	sub := &subject{name: "claim " + c.Namespace + "/" + c.Name, self: c.Namespace + "/" + c.Name}
	sub.add(c, c.Namespace+"/"+c.Name)
	return explain(ctx, snap, sub, opts)
}

// Template explains why a claim made from the template cannot be
// allocated, node by node.
func Template(ctx context.Context, snap *Snapshot, tmpl *resourceapi.ResourceClaimTemplate, opts ...Option) (*Report, error) {
	if tmpl == nil {
		return nil, errors.New("explain template: template is nil")
	}
	c := claimFromTemplate(tmpl, tmpl.Name)
	sub := &subject{name: "template " + tmpl.Namespace + "/" + tmpl.Name}
	sub.add(c, fmt.Sprintf("%s/%s (from template)", c.Namespace, c.Name))
	return explain(ctx, snap, sub, opts)
}

func (s *subject) add(c *resourceapi.ResourceClaim, label string) {
	if c.Status.Allocation != nil {
		s.allocated = append(s.allocated, c)
		return
	}
	c = c.DeepCopy()
	applyDefaults(&c.Spec)
	s.pending = append(s.pending, c)
	s.labels = append(s.labels, label)
}

func claimFromTemplate(t *resourceapi.ResourceClaimTemplate, name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: t.Namespace, UID: types.UID("explain-" + t.Namespace + "-" + name),
			Labels: t.Spec.Labels, Annotations: t.Spec.Annotations,
		},
		Spec: *t.Spec.Spec.DeepCopy(),
	}
}

// engine holds what every node's explanation shares.
type engine struct {
	o        options
	snap     *Snapshot
	sub      *subject
	classes  classLister
	cel      *cel.Cache
	state    structured.AllocatedState
	holders  map[structured.DeviceID]*resourceapi.ResourceClaim
	celMemo  sync.Map                                // celKey -> celResult
	slices   []*resourceapi.ResourceSlice            // the snapshot's, with DeviceTaintRules applied
	ruleOf   map[ruleTaint]string                    // the DeviceTaintRule of a taint
	slicesOf map[string][]*resourceapi.ResourceSlice // by node name, with shared slices and the rest of their pools
	shared   []*resourceapi.ResourceSlice            // slices without a nodeName
	poolGen  map[poolKey]int64                       // newest generation per pool
	terms    sync.Map                                // expression -> []string
	reads    sync.Map                                // expression -> reads
}

type poolKey struct{ driver, pool string }

type classLister struct{ classes []*resourceapi.DeviceClass }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l.classes, nil }
func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l.classes {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("device class %q: %w", name, ErrNotFound)
}

func explain(ctx context.Context, snap *Snapshot, sub *subject, opts []Option) (*Report, error) {
	o := options{features: DefaultFeatures, parallelism: runtime.GOMAXPROCS(0), closest: 3}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("explain %s: %w", sub.name, err)
		}
	}
	e := &engine{
		o: o, snap: snap, sub: sub,
		classes: classLister{snap.Classes},
		cel:     cel.NewCache(100, cel.Features{EnableConsumableCapacity: o.features.ConsumableCapacity}),
		holders: map[structured.DeviceID]*resourceapi.ResourceClaim{},
		poolGen: map[poolKey]int64{},
	}
	e.state = e.allocatedState()
	e.slices, e.ruleOf = taintedSlices(snap.Slices, snap.TaintRules)
	e.indexSlices()
	nodes, err := e.nodes()
	if err != nil {
		return nil, fmt.Errorf("explain %s: %w", sub.name, err)
	}
	rep := &Report{Subject: sub.name, Claims: sub.labels, Nodes: make([]NodeReport, len(nodes)), Warnings: shapeWarnings(sub.pending, sub.labels)}
	if rep.Claims == nil {
		rep.Claims = []string{}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(o.parallelism, max(len(nodes), 1)) {
		wg.Go(func() {
			for i := range work {
				rep.Nodes[i] = e.explainNode(ctx, nodes[i])
			}
		})
	}
	for i := range nodes {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("explain %s: %w", sub.name, err)
	}
	for _, n := range rep.Nodes {
		if n.Fits {
			rep.NodesFit++
		}
	}
	rep.Fits = rep.NodesFit > 0
	sort.SliceStable(rep.Nodes, func(i, j int) bool { return lessPromising(&rep.Nodes[i], &rep.Nodes[j]) })
	return rep, nil
}

// lessPromising orders nodes: fitting nodes first, then by the hardest
// reason (the one an operator can least easily resolve), then by the
// number of requests that do not fit, then by name.
func lessPromising(a, b *NodeReport) bool {
	if a.Fits != b.Fits {
		return a.Fits
	}
	ra, rb := hardest(a), hardest(b)
	if ra != rb {
		return ra < rb
	}
	fa, fb := failing(a), failing(b)
	if fa != fb {
		return fa < fb
	}
	return a.Node < b.Node
}

func hardest(n *NodeReport) int {
	h := 0
	var walk func(rs []RequestReport)
	walk = func(rs []RequestReport) {
		for _, r := range rs {
			if len(r.Alternatives) > 0 {
				// A firstAvailable request is as hard as its easiest alternative.
				best := -1
				for _, alt := range r.Alternatives {
					sub := NodeReport{Requests: []RequestReport{alt}}
					if v := hardest(&sub); best < 0 || v < best {
						best = v
					}
				}
				h = max(h, best)
				continue
			}
			for _, reason := range r.Reasons {
				h = max(h, rank[reason.Kind])
			}
		}
	}
	for _, reason := range n.Reasons {
		h = max(h, rank[reason.Kind])
	}
	walk(n.Requests)
	return h
}

func failing(n *NodeReport) int {
	c := 0
	for _, r := range n.Requests {
		if !r.Fits {
			c++
		}
	}
	return c
}

// allocatedState is what the scheduler passes to the allocator: every
// device allocated to a claim, shared devices and their consumed capacity.
// It also records which claim holds each device.
func (e *engine) allocatedState() structured.AllocatedState {
	st := allocstate.New()
	for _, c := range e.snap.Claims {
		if c.Status.Allocation == nil || c.Namespace+"/"+c.Name == e.sub.self {
			continue
		}
		allocstate.Add(st, c.Status.Allocation.Devices.Results, func(id structured.DeviceID) { e.holders[id] = c })
	}
	return st
}

// indexSlices groups slices by node: a node's slices, the slices without
// a node name and every other slice of the pools among them, so that an
// allocator built from them sees complete pools.
func (e *engine) indexSlices() {
	byPool := map[poolKey][]*resourceapi.ResourceSlice{}
	for _, s := range e.slices {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		byPool[k] = append(byPool[k], s)
		if g, ok := e.poolGen[k]; !ok || s.Spec.Pool.Generation > g {
			e.poolGen[k] = s.Spec.Pool.Generation
		}
		if ptr.Deref(s.Spec.NodeName, "") == "" {
			e.shared = append(e.shared, s)
		}
	}
	e.slicesOf = map[string][]*resourceapi.ResourceSlice{}
	for _, ss := range byPool {
		nodes := sets.New[string]()
		for _, s := range ss {
			if n := ptr.Deref(s.Spec.NodeName, ""); n != "" {
				nodes.Insert(n)
			}
		}
		if nodes.Len() == 0 {
			continue
		}
		// A pool spread over nodes is kept whole for each of them.
		for n := range nodes {
			e.slicesOf[n] = append(e.slicesOf[n], ss...)
		}
	}
}

// nodes returns the candidate nodes by name: the snapshot's and those
// only named by slices.
func (e *engine) nodes() ([]*corev1.Node, error) {
	byName := map[string]*corev1.Node{}
	for _, n := range e.snap.Nodes {
		byName[n.Name] = n
	}
	for _, s := range e.slices {
		if n := ptr.Deref(s.Spec.NodeName, ""); n != "" && byName[n] == nil {
			byName[n] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		}
	}
	var out []*corev1.Node
	for name, n := range byName {
		if e.o.nodes == nil || e.o.nodes.Has(name) {
			out = append(out, n)
		}
	}
	if e.o.nodes != nil {
		for name := range e.o.nodes {
			if byName[name] == nil {
				return nil, fmt.Errorf("node %s: %w", name, ErrNotFound)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
