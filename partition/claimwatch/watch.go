// Package claimwatch tells a node's layout publication
// (engine.LayoutPublisher, docs/dynamic-mig-publication.md) what the
// scheduler holds and what it waits for, from the API server:
//
//   - Allocated: the devices of a pool of the driver that claims hold,
//     allocated whether or not the kubelet has asked to prepare them yet.
//     The publisher must never drop such a device, and must not lay
//     anything over it: a node's driver that only counted the devices it
//     prepared would re-lay a device out from under an allocation on its
//     way to the kubelet.
//   - Demand: what pending claims (not allocated yet) ask of the
//     driver's partition classes, and, when extended resources are
//     mapped (WithExtendedResource), what unscheduled pods ask as
//     extended resources ("nvidia.com/mig-1g.18gb: 1"), which have no
//     claim before the scheduler picks a node.
//
// A Watcher runs a ResourceClaim informer (every claim of the cluster:
// allocations cannot be selected by node on the server) and, with
// extended resources mapped, a Pod informer of unscheduled pods only
// (field selector spec.nodeName=""). Its RBAC: get, list and watch on
// resourceclaims (resource.k8s.io) and, with extended resources, on pods.
//
// Deprecated: a node agent that runs it holds every claim of the cluster
// (about 21 MB per node at 1,000 nodes with 10 claims each) and gets
// every claim change. The layout publication's node agent watches only
// its own node's ledger (package partition/ledger); the fleet planner
// (package partition/fleet) watches claims and pods once for the fleet.
package claimwatch

import (
	"context"
	"errors"
	"fmt"
	"github.com/drakit/drakit/partition/plan"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Option configures a Watcher.
type Option func(*options) error

type options struct {
	node         string
	maxPerClaim  func(profile string) int
	classes      map[string]string
	classFuncs   []func(string) (string, bool)
	extended     map[corev1.ResourceName]string
	extendedFunc []func(corev1.ResourceName) (string, bool)
}

// WithClassFunc maps DeviceClasses to what they ask for as WithClass
// does, for the classes WithClass does not name: profile returns the
// profile (partition.WholeCard: a whole card) a request of class asks
// for, and false for a class that asks nothing of the layout. Several
// functions are asked in order.
func WithClassFunc(profile func(class string) (string, bool)) Option {
	return func(o *options) error {
		if profile == nil {
			return errors.New("class function is nil")
		}
		o.classFuncs = append(o.classFuncs, profile)
		return nil
	}
}

// WithExtendedResourceFunc maps extended resources to what they ask for
// as WithExtendedResource does, for the names WithExtendedResource does
// not give. It makes the Watcher run a Pod informer of unscheduled pods.
func WithExtendedResourceFunc(profile func(name corev1.ResourceName) (string, bool)) Option {
	return func(o *options) error {
		if profile == nil {
			return errors.New("extended resource function is nil")
		}
		o.extendedFunc = append(o.extendedFunc, profile)
		return nil
	}
}

// WithMaxPerClaim says how many devices of a profile (WholeCard: whole
// cards) one claim can get on the Watcher's node at most: a pending
// claim that asks for more of a profile than max(profile) adds nothing of
// that profile to Demand, since it cannot be allocated there (a claim's
// devices come from one node). A node's layout would otherwise keep
// serving a claim that never lands: nine whole GPUs asked of an 8-GPU
// node would keep every idle GPU whole forever. max is called from the
// informers' goroutine; it applies to extended resources too. Default:
// no limit.
func WithMaxPerClaim(max func(profile string) int) Option {
	return func(o *options) error {
		if max == nil {
			return errors.New("max per claim: function is nil")
		}
		o.maxPerClaim = max
		return nil
	}
}

// WithPublished makes Start also read, once, the devices the driver had
// published on node (its ResourceSlices there) before this process
// started: Published returns them, for engine.LayoutPublisher.Restore.
// It needs list on resourceslices.
func WithPublished(node string) Option {
	return func(o *options) error {
		if node == "" {
			return errors.New("published: node name is empty")
		}
		o.node = node
		return nil
	}
}

// classProfile is what a request of class asks for.
func (o *options) classProfile(class string) (string, bool) {
	if p, ok := o.classes[class]; ok {
		return p, true
	}
	for _, f := range o.classFuncs {
		if p, ok := f(class); ok {
			return p, true
		}
	}
	return "", false
}

// extendedProfile is what a request of extended resource name asks for.
func (o *options) extendedProfile(name corev1.ResourceName) (string, bool) {
	if p, ok := o.extended[name]; ok {
		return p, true
	}
	for _, f := range o.extendedFunc {
		if p, ok := f(name); ok {
			return p, true
		}
	}
	return "", false
}

// WithClass says that a request of DeviceClass class asks for one
// partition of profile per device it asks for (its count; a request for
// all devices of a class counts one), or for a whole card when profile is
// partition.WholeCard. A claim's request through a class not mapped adds
// nothing to the demand. For a request with subrequests
// (firstAvailable) the first subrequest whose class is mapped counts:
// the scheduler tries them in order.
func WithClass(class, profile string) Option {
	return func(o *options) error {
		if class == "" {
			return errors.New("class: name is empty")
		}
		if o.classes == nil {
			o.classes = map[string]string{}
		}
		o.classes[class] = profile
		return nil
	}
}

// WithExtendedResource says that an unscheduled pod's request of the
// extended resource name (the sum over its containers and init
// containers, as the scheduler counts it: the larger of the sum of the
// containers and the largest init container) asks for that many
// partitions of profile, or whole cards with partition.WholeCard. It makes
// the Watcher run a Pod informer of unscheduled pods.
func WithExtendedResource(name corev1.ResourceName, profile string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("extended resource: name is empty")
		}
		if o.extended == nil {
			o.extended = map[corev1.ResourceName]string{}
		}
		o.extended[name] = profile
		return nil
	}
}

// Watcher keeps what claims hold of a driver's devices and what pending
// claims and pods ask for. Create it with New, start it with Start. It is
// safe for concurrent use.
type Watcher struct {
	client kubernetes.Interface
	driver string
	o      options

	mu        sync.Mutex
	claims    map[types.UID]claimPart // what each claim adds
	pods      map[types.UID]plan.Demand
	allocated map[string]map[string]int // pool -> device -> claims
	demand    plan.Demand
	notify    []func()
	started   bool
	published map[string][]string // pool -> devices, at Start (WithPublished)
}

// claimPart is one claim's share: the devices of the driver it holds, or
// what it asks for while it holds nothing.
type claimPart struct {
	held   []deviceID
	demand plan.Demand
}

type deviceID struct{ pool, device string }

// New returns a Watcher of the claims of driver (its name as in
// allocation results). Options: WithClass, WithExtendedResource.
func New(client kubernetes.Interface, driver string, opts ...Option) (*Watcher, error) {
	if client == nil {
		return nil, errors.New("new claim watcher: client is nil")
	}
	if driver == "" {
		return nil, errors.New("new claim watcher: driver name is empty")
	}
	w := &Watcher{client: client, driver: driver, claims: map[types.UID]claimPart{},
		pods: map[types.UID]plan.Demand{}, allocated: map[string]map[string]int{}, demand: plan.Demand{}}
	for _, opt := range opts {
		if err := opt(&w.o); err != nil {
			return nil, fmt.Errorf("new claim watcher: %w", err)
		}
	}
	return w, nil
}

// OnChange registers f, called (without the Watcher's lock, from the
// informers' goroutine) after every change of Allocated or Demand. Call
// it before Start.
func (w *Watcher) OnChange(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = append(w.notify, f)
}

// Start starts the informers and returns once they have synced (Allocated
// and Demand are complete from then on), or with ctx's error. They stop
// when ctx is done. Start may be called once.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("claim watcher: started twice")
	}
	w.started = true
	w.mu.Unlock()
	if w.o.node != "" {
		l, err := w.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", w.o.node), fields.OneTermEqualSelector("spec.driver", w.driver)).String()})
		if err != nil {
			return fmt.Errorf("claim watcher: read what was published on node %s: %w", w.o.node, err)
		}
		pub := map[string][]string{}
		gen := map[string]int64{}
		for _, sl := range l.Items {
			pool := sl.Spec.Pool.Name
			switch {
			case sl.Spec.Pool.Generation > gen[pool]:
				gen[pool], pub[pool] = sl.Spec.Pool.Generation, nil
			case sl.Spec.Pool.Generation < gen[pool]:
				continue // an older generation's slice, being replaced
			}
			for _, d := range sl.Spec.Devices {
				pub[pool] = append(pub[pool], d.Name)
			}
		}
		w.mu.Lock()
		w.published = pub
		w.mu.Unlock()
	}
	f := informers.NewSharedInformerFactory(w.client, 0)
	ci := f.Resource().V1().ResourceClaims().Informer()
	if err := ci.SetTransform(cache.TransformFunc(stripManagedFields)); err != nil {
		return fmt.Errorf("claim watcher: %w", err)
	}
	if _, err := ci.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.claim(obj, false) },
		UpdateFunc: func(_, obj any) { w.claim(obj, false) },
		DeleteFunc: func(obj any) { w.claim(obj, true) },
	}); err != nil {
		return fmt.Errorf("claim watcher: %w", err)
	}
	syncs := []cache.InformerSynced{ci.HasSynced}
	var pf informers.SharedInformerFactory
	if len(w.o.extended) > 0 || len(w.o.extendedFunc) > 0 {
		pf = informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
		}))
		pi := pf.Core().V1().Pods().Informer()
		if err := pi.SetTransform(cache.TransformFunc(stripManagedFields)); err != nil {
			return fmt.Errorf("claim watcher: %w", err)
		}
		if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.pod(obj, false) },
			UpdateFunc: func(_, obj any) { w.pod(obj, false) },
			DeleteFunc: func(obj any) { w.pod(obj, true) },
		}); err != nil {
			return fmt.Errorf("claim watcher: %w", err)
		}
		syncs = append(syncs, pi.HasSynced)
		pf.Start(ctx.Done())
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return fmt.Errorf("claim watcher: informers did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// Allocated returns the names of the devices of pool (of the Watcher's
// driver) that at least one claim holds, sorted.
func (w *Watcher) Allocated(pool string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.allocated[pool]))
}

// Published returns the devices pool had in the API server when Start
// read it (WithPublished), sorted; nil without WithPublished or when the
// pool had no slice.
func (w *Watcher) Published(pool string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(slices.Values(w.published[pool]))
}

// Demand returns what the pending claims and unscheduled pods ask for,
// per profile (partition.WholeCard for whole cards); a copy.
func (w *Watcher) Demand() plan.Demand {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.demand)
}

func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// claim records what one claim adds now; gone when it was deleted.
func (w *Watcher) claim(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, gone = t.Obj, true
	}
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	var part claimPart
	if !gone {
		part = w.partOf(c)
	}
	w.mu.Lock()
	old := w.claims[c.UID]
	if slices.Equal(old.held, part.held) && maps.Equal(old.demand, part.demand) {
		w.mu.Unlock()
		return
	}
	for _, id := range old.held {
		if w.allocated[id.pool][id.device]--; w.allocated[id.pool][id.device] <= 0 {
			delete(w.allocated[id.pool], id.device)
			if len(w.allocated[id.pool]) == 0 {
				delete(w.allocated, id.pool)
			}
		}
	}
	for _, id := range part.held {
		if w.allocated[id.pool] == nil {
			w.allocated[id.pool] = map[string]int{}
		}
		w.allocated[id.pool][id.device]++
	}
	w.addDemand(old.demand, -1)
	w.addDemand(part.demand, 1)
	if len(part.held) == 0 && len(part.demand) == 0 {
		delete(w.claims, c.UID)
	} else {
		w.claims[c.UID] = part
	}
	notify := slices.Clone(w.notify)
	w.mu.Unlock()
	for _, f := range notify {
		f()
	}
}

// partOf is what claim c adds: the devices of the driver it holds when it
// is allocated, else what its requests ask of the mapped classes (nothing
// while it is being deleted).
func (w *Watcher) partOf(c *resourceapi.ResourceClaim) claimPart {
	var p claimPart
	if a := c.Status.Allocation; a != nil {
		for _, r := range a.Devices.Results {
			if r.Driver == w.driver {
				p.held = append(p.held, deviceID{pool: r.Pool, device: r.Device})
			}
		}
		slices.SortFunc(p.held, func(a, b deviceID) int {
			if a.pool != b.pool {
				return strings.Compare(a.pool, b.pool)
			}
			return strings.Compare(a.device, b.device)
		})
		p.held = slices.Compact(p.held)
		return p
	}
	if c.DeletionTimestamp != nil || len(w.o.classes) == 0 && len(w.o.classFuncs) == 0 {
		return p
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			w.ask(&p.demand, r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count)
			continue
		}
		for _, s := range r.FirstAvailable {
			if w.ask(&p.demand, s.DeviceClassName, s.AllocationMode, s.Count) {
				break
			}
		}
	}
	p.demand = w.capped(p.demand)
	return p
}

// capped drops from one claim's or pod's demand what exceeds
// WithMaxPerClaim.
func (w *Watcher) capped(d plan.Demand) plan.Demand {
	if w.o.maxPerClaim == nil {
		return d
	}
	for profile, n := range d {
		if n > w.o.maxPerClaim(profile) {
			delete(d, profile)
		}
	}
	if len(d) == 0 {
		return nil
	}
	return d
}

// ask adds one request's demand; false when its class is not mapped.
func (w *Watcher) ask(d *plan.Demand, class string, mode resourceapi.DeviceAllocationMode, count int64) bool {
	profile, ok := w.o.classProfile(class)
	if !ok {
		return false
	}
	n := 1
	if mode != resourceapi.DeviceAllocationModeAll && count > 1 {
		n = int(min(count, 1<<16))
	}
	if *d == nil {
		*d = plan.Demand{}
	}
	(*d)[profile] += n
	return true
}

// pod records what one unscheduled pod asks as extended resources.
func (w *Watcher) pod(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, gone = t.Obj, true
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	var d plan.Demand
	if !gone && p.Spec.NodeName == "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		d = w.capped(w.extendedDemand(p))
	}
	w.mu.Lock()
	old := w.pods[p.UID]
	if maps.Equal(old, d) {
		w.mu.Unlock()
		return
	}
	w.addDemand(old, -1)
	w.addDemand(d, 1)
	if len(d) == 0 {
		delete(w.pods, p.UID)
	} else {
		w.pods[p.UID] = d
	}
	notify := slices.Clone(w.notify)
	w.mu.Unlock()
	for _, f := range notify {
		f()
	}
}

// extendedDemand is what p's containers ask of the mapped extended
// resources: per resource the larger of the containers' sum and the
// largest init container's request (limits stand for requests, as for
// extended resources they must be equal).
func (w *Watcher) extendedDemand(p *corev1.Pod) plan.Demand {
	names := map[corev1.ResourceName]string{}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name := range l {
					if _, seen := names[name]; seen {
						continue
					}
					if profile, ok := w.o.extendedProfile(name); ok {
						names[name] = profile
					}
				}
			}
		}
	}
	var d plan.Demand
	for name, profile := range names {
		sum, initMax := int64(0), int64(0)
		for _, c := range p.Spec.Containers {
			sum += quantity(c.Resources, name)
		}
		for _, c := range p.Spec.InitContainers {
			initMax = max(initMax, quantity(c.Resources, name))
		}
		if n := max(sum, initMax); n > 0 {
			if d == nil {
				d = plan.Demand{}
			}
			d[profile] += int(min(n, 1<<16))
		}
	}
	return d
}

func quantity(r corev1.ResourceRequirements, name corev1.ResourceName) int64 {
	if q, ok := r.Requests[name]; ok {
		return q.Value()
	}
	if q, ok := r.Limits[name]; ok {
		return q.Value()
	}
	return 0
}

// addDemand adds sign times d to the total. w.mu must be held.
func (w *Watcher) addDemand(d plan.Demand, sign int) {
	for k, v := range d {
		w.demand[k] += sign * v
		if w.demand[k] <= 0 {
			delete(w.demand, k)
		}
	}
}
