package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/internal/podstatus"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
)

// Option configures a Planner.
type Option func(*options) error

type options struct {
	classProfile func(class string) (string, bool)
	extended     func(name corev1.ResourceName) (string, bool)
	schemes      func(name string) (*partition.Scheme, error)
	aging        time.Duration
	interval     time.Duration
	resync       time.Duration
	leaseNS      string
	leaseName    string
	now          func() time.Time
}

// WithClassProfile maps DeviceClasses to what they ask of the layout:
// profile returns the partition profile (partition.WholeCard for a whole
// card) one device of class is, and false for a class the layout does
// not serve. Needed.
func WithClassProfile(profile func(class string) (string, bool)) Option {
	return func(o *options) error {
		if profile == nil {
			return errors.New("class profile: function is nil")
		}
		o.classProfile = profile
		return nil
	}
}

// WithExtendedResource maps extended resources (KEP-5004: a pod asking
// "nvidia.com/mig-1g.10gb: 1", which the scheduler serves through a
// claim it makes at bind) to profiles, as WithClassProfile does for
// classes.
func WithExtendedResource(profile func(name corev1.ResourceName) (string, bool)) Option {
	return func(o *options) error {
		if profile == nil {
			return errors.New("extended resource: function is nil")
		}
		o.extended = profile
		return nil
	}
}

// WithSchemes resolves the scheme names of the ledgers' cards
// (ledger.Card.Scheme). Needed.
func WithSchemes(schemes func(name string) (*partition.Scheme, error)) Option {
	return func(o *options) error {
		if schemes == nil {
			return errors.New("schemes: function is nil")
		}
		o.schemes = schemes
		return nil
	}
}

// WithAging is plan.WithAging's.
func WithAging(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("aging %s: must be positive", d)
		}
		o.aging = d
		return nil
	}
}

// WithInterval sets the least time between two steps (default 200 ms):
// changes coming closer are planned together.
func WithInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("interval %s: must be positive", d)
		}
		o.interval = d
		return nil
	}
}

// WithLeaderElection makes Run plan only while it holds the
// coordination.k8s.io Lease namespace/name, so that one of several
// replicas plans. Safety does not depend on it: every write of a Planner
// is a compare-and-swap of a ledger ([ledger.Store.Update]) that keeps
// the ledger valid, so two planners at once (a lease lost late) may plan
// twice but never admit an overlap.
func WithLeaderElection(namespace, name string) Option {
	return func(o *options) error {
		if namespace == "" || name == "" {
			return errors.New("leader election: the Lease's namespace and name are needed")
		}
		o.leaseNS, o.leaseName = namespace, name
		return nil
	}
}

func (o *options) classProfileOK() bool { return o.classProfile != nil }

// Planner is the fleet's layout planner (docs/dynamic-mig-publication.md):
// one leader-elected component that watches claims, unscheduled pods,
// nodes and the layout ledgers once for the fleet and, at each Step,
//
//   - seeds a new ledger (records every allocation of the driver's
//     devices on its node, closes what overlaps them, marks it seeded),
//   - resolves Held entries from what the API server shows of their
//     claims (ledger.Ledger.Observe; a claim its informer lacks is read
//     by name before it counts as deleted) and records allocations made
//     without the ledger,
//   - assigns the pending requests to nodes (plan.AssignFleet: the
//     pod's node selector, required node affinity and tolerations
//     against the node's taints decide the candidate nodes, the cards'
//     profiles the rest) and writes each node's Demand and Reserved
//     cards where they changed.
//
// Node agents watch only their own ledger. While no Planner runs, nodes
// keep their layouts and new ledgers wait to be seeded. Run, or Step
// called on its own, must not run concurrently with another Run or Step
// of the same Planner; Kick and Last may be called from any goroutine.
type Planner struct {
	client kubernetes.Interface
	store  *ledger.Store
	driver string
	o      options

	claims resourcelisters.ResourceClaimLister
	pods   corelisters.PodLister
	nodes  corelisters.NodeLister
	synced []cache.InformerSynced

	kick chan struct{}
	mu   sync.Mutex
	last StepResult
}

// New returns a Planner of driver's layout ledgers in store.
// WithClassProfile and WithSchemes are needed. Its client needs list and
// watch on resourceclaims, pods and nodes, get on resourceclaims, what
// store needs (get, list, watch, create, update on configmaps in its
// namespace) and, with WithLeaderElection, get, create and update on the
// Lease.
func New(
	client kubernetes.Interface,
	store *ledger.Store,
	driver string,
	opts ...Option,
) (*Planner, error) {
	o := options{
		aging:    plan.DefaultAging,
		interval: 200 * time.Millisecond,
		resync:   10 * time.Second,
		now:      time.Now,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new fleet planner: %w", err)
		}
	}
	switch {
	case client == nil || store == nil || driver == "":
		return nil, errors.New(
			"new fleet planner: a client, a ledger store and a driver name are needed",
		)
	case !o.classProfileOK() || o.schemes == nil:
		return nil, errors.New("new fleet planner: WithClassProfile and WithSchemes are needed")
	}
	return &Planner{
		client: client,
		store:  store,
		driver: driver,
		o:      o,
		kick:   make(chan struct{}, 1),
	}, nil
}

// StepResult is what one Step did.
type StepResult struct {
	// Pending is the number of pending requests planned for.
	Pending int
	// Unplaced is how many of them fit on no candidate node.
	Unplaced int
	// Relaid are the nodes whose layout the assignment changes.
	Relaid []string
	// Seeded, Resolved and Recorded count ledgers seeded, Held entries
	// dropped and allocations recorded without the ledger.
	Seeded, Resolved, Recorded int
	// Writes counts the ledgers written.
	Writes int
}

// Last returns the last Step's result.
func (p *Planner) Last() StepResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// start starts the informers and waits for them.
func (p *Planner) start(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(p.client, 0)
	pf := informers.NewSharedInformerFactoryWithOptions(
		p.client,
		0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
		}),
	)
	ci := f.Resource().V1().ResourceClaims()
	ni := f.Core().V1().Nodes()
	pi := pf.Core().V1().Pods()
	for _, inf := range []cache.SharedIndexInformer{ci.Informer(), ni.Informer(), pi.Informer()} {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.Kick() },
			UpdateFunc: func(_, _ any) { p.Kick() },
			DeleteFunc: func(any) { p.Kick() },
		}); err != nil {
			return err
		}
	}
	p.claims, p.nodes, p.pods = ci.Lister(), ni.Lister(), pi.Lister()
	p.synced = []cache.InformerSynced{
		ci.Informer().HasSynced,
		ni.Informer().HasSynced,
		pi.Informer().HasSynced,
	}
	f.Start(ctx.Done())
	pf.Start(ctx.Done())
	ledgers := make(chan struct{})
	go func() {
		_ = p.store.Watch(ctx, "", func(string, *ledger.Ledger) { p.Kick() }, ledgers)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return fmt.Errorf("fleet planner: informers did not sync: %w", context.Cause(ctx))
	}
	select {
	case <-ledgers:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// Kick asks for a Step soon (Run coalesces kicks within the interval).
func (p *Planner) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run starts the informers and steps (while leading, with
// WithLeaderElection) on every change, at most once an interval, and at
// least every 10 s, until ctx is done; then it returns nil.
func (p *Planner) Run(ctx context.Context) error {
	if err := p.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if p.o.leaseName == "" {
		p.loop(ctx)
		return nil
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	logger := klog.FromContext(ctx)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: p.o.leaseNS, Name: p.o.leaseName},
			Client:     p.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		Name: p.o.leaseName, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second,
		RetryPeriod: 2 * time.Second, ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Leading: planning the fleet's layouts", "identity", id)
				p.loop(ctx)
			},
			OnStoppedLeading: func() { logger.Info("Not leading any more", "identity", id) },
		},
	})
	if err != nil {
		return fmt.Errorf("fleet planner: leader election: %w", err)
	}
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return nil
}

func (p *Planner) loop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	resync := time.NewTicker(p.o.resync)
	defer resync.Stop()
	for {
		r, err := p.Step(ctx)
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "Planning the fleet's layouts")
		} else if r.Writes > 0 {
			logger.V(2).Info("Planned", "pending", r.Pending, "unplaced", r.Unplaced, "relaid", len(r.Relaid),
				"seeded", r.Seeded, "resolved", r.Resolved, "recorded", r.Recorded, "writes", r.Writes)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-resync.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.o.interval):
		}
	}
}

// nodeAlloc is what one claim holds on one node.
type nodeAlloc struct {
	claim *resourceapi.ResourceClaim
	devs  []ledger.Device
}

// allocations returns, per node, the claims allocated there with the
// driver's devices (admin access left out).
func (p *Planner) allocations(claims []*resourceapi.ResourceClaim) map[string][]nodeAlloc {
	out := map[string][]nodeAlloc{}
	for _, c := range claims {
		a := c.Status.Allocation
		if a == nil {
			continue
		}
		byNode := map[string][]ledger.Device{}
		for _, r := range a.Devices.Results {
			if r.Driver != p.driver || r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			node, ok := ledger.NodeOfPool(r.Pool)
			if !ok {
				node = allocationNode(a)
			}
			if node == "" {
				continue
			}
			byNode[node] = append(byNode[node], ledger.Device{Pool: r.Pool, Name: r.Device})
		}
		for n, devs := range byNode {
			out[n] = append(out[n], nodeAlloc{claim: c, devs: devs})
		}
	}
	return out
}

// allocationNode is the node an allocation's node selector names
// (metadata.name), or "".
func allocationNode(a *resourceapi.AllocationResult) string {
	if a.NodeSelector == nil {
		return ""
	}
	for _, t := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn &&
				len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

func refOf(c *resourceapi.ResourceClaim) ledger.ClaimRef {
	return ledger.ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
}

// Step plans once: seeds, resolves and assigns (see Planner), writing
// the ledgers that change. It needs the informers (Run) or, called on
// its own, reads what it needs from the API server first.
func (p *Planner) Step(ctx context.Context) (StepResult, error) {
	if p.claims == nil {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := p.start(sctx); err != nil {
			return StepResult{}, err
		}
		defer func() { p.claims, p.pods, p.nodes = nil, nil, nil }()
	}
	var res StepResult
	claims, err := p.claims.List(labels.Everything())
	if err != nil {
		return res, err
	}
	byUID := make(map[string]*resourceapi.ResourceClaim, len(claims))
	byName := make(map[string]*resourceapi.ResourceClaim, len(claims))
	for _, c := range claims {
		byUID[string(c.UID)] = c
		byName[c.Namespace+"/"+c.Name] = c
	}
	allocs := p.allocations(claims)
	ledgers := p.store.CachedAll()

	// Observations per node: the claims Held there, and those allocated
	// there without an entry.
	obs := map[string][]ledger.Observation{}
	for node, l := range ledgers {
		seen := map[string]bool{}
		for _, ref := range l.Claims() {
			seen[string(ref.UID)] = true
			c, ok := byUID[string(ref.UID)]
			if !ok {
				// Not in the informer: read it by name before it counts
				// as gone (the informer may lag its creation).
				got, err := p.client.ResourceV1().
					ResourceClaims(ref.Namespace).
					Get(ctx, ref.Name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err) || err == nil && got.UID != ref.UID:
					obs[node] = append(obs[node], ledger.Observation{Claim: ref, Deleted: true})
				case err != nil:
					return res, fmt.Errorf("fleet planner: read claim %s: %w", ref, err)
				default:
					c = got
				}
				if c == nil {
					continue
				}
			}
			obs[node] = append(obs[node], p.observe(c, node, allocs))
		}
		for _, a := range allocs[node] {
			if !seen[string(a.claim.UID)] {
				obs[node] = append(obs[node], p.observe(a.claim, node, allocs))
			}
		}
	}

	demand, reserved, pendingN, a, err := p.assign(ledgers, byName)
	if err != nil {
		return res, err
	}
	res.Pending, res.Unplaced, res.Relaid = pendingN, len(a.Unplaced), a.Relaid

	nodes := slices.Sorted(maps.Keys(ledgers))
	for _, node := range nodes {
		l := ledgers[node]
		d, r := demand[node], reserved[node]
		if l.Seeded && len(obs[node]) == 0 && maps.Equal(l.Demand, d) &&
			slices.Equal(l.Reserved, r) {
			continue
		}
		var seeded, resolved, recorded int
		_, err := p.store.Update(ctx, node, false, func(l *ledger.Ledger) error {
			seeded, resolved, recorded = 0, 0, 0
			for _, o := range obs[node] {
				n := len(l.Held)
				_, rec := l.Observe(o, true)
				resolved += max(0, n+boolInt(len(rec) > 0)-len(l.Held))
				recorded += len(rec)
			}
			l.Reconcile(p.o.schemes)
			if !l.Seeded {
				l.Seeded, seeded = true, 1
			}
			l.Demand, l.Reserved = d, r
			return nil
		})
		if errors.Is(err, ledger.ErrNoLedger) {
			continue
		}
		if err != nil {
			return res, err
		}
		res.Writes++
		res.Seeded += seeded
		res.Resolved += resolved
		res.Recorded += recorded
	}
	p.mu.Lock()
	p.last = res
	p.mu.Unlock()
	return res, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// observe is what the API server shows of claim c on node.
func (p *Planner) observe(
	c *resourceapi.ResourceClaim,
	node string,
	allocs map[string][]nodeAlloc,
) ledger.Observation {
	o := ledger.Observation{
		Claim:           refOf(c),
		ResourceVersion: c.ResourceVersion,
		Deleted: c.DeletionTimestamp != nil &&
			c.Status.Allocation == nil,
	}
	for _, a := range allocs[node] {
		if a.claim.UID == c.UID {
			o.Allocated = a.devs
		}
	}
	return o
}

// assign computes each node's Demand and Reserved cards.
func (p *Planner) assign(
	ledgers map[string]*ledger.Ledger,
	claims map[string]*resourceapi.ResourceClaim,
) (
	map[string]plan.Demand, map[string][]plan.ReservedCard, int, *plan.FleetAssignment, error) {
	var nodes []plan.Node
	nodeObjs := map[string]*corev1.Node{}
	for _, name := range slices.Sorted(maps.Keys(ledgers)) {
		l := ledgers[name]
		if !l.Seeded {
			continue
		}
		n, err := p.nodeView(l)
		if err != nil {
			return nil, nil, 0, nil, err
		}
		nodes = append(nodes, n)
		if obj, err := p.nodes.Get(name); err == nil {
			nodeObjs[name] = obj
		}
	}
	pods, err := p.pods.List(labels.Everything())
	if err != nil {
		return nil, nil, 0, nil, err
	}
	now := p.o.now()
	var reqs []plan.PendingRequest
	for _, pod := range pods {
		if !pending(pod) {
			continue
		}
		var profiles []string
		for _, name := range podstatus.ClaimNames(pod) {
			c, ok := claims[pod.Namespace+"/"+name]
			if !ok || c.Status.Allocation != nil || c.DeletionTimestamp != nil {
				continue
			}
			profiles = append(profiles, p.claimProfiles(c)...)
		}
		profiles = append(profiles, p.extendedProfiles(pod)...)
		if len(profiles) == 0 {
			continue
		}
		var cands []string
		aff := nodeaffinity.GetRequiredNodeAffinity(pod)
		for _, n := range nodes {
			obj := nodeObjs[n.Name]
			if obj == nil || obj.Spec.Unschedulable {
				continue
			}
			if ok, _ := aff.Match(obj); !ok {
				continue
			}
			if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), obj.Spec.Taints,
				pod.Spec.Tolerations, func(t *corev1.Taint) bool {
					return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
				}, true); untolerated {
				continue
			}
			cands = append(cands, n.Name)
		}
		reqs = append(
			reqs,
			plan.PendingRequest{ID: pod.Namespace + "/" + pod.Name, Profiles: profiles,
				Nodes: append([]string{}, cands...), Waited: now.Sub(pod.CreationTimestamp.Time)},
		)
	}
	a, err := plan.AssignFleet(nodes, reqs, plan.WithAging(p.o.aging))
	if err != nil {
		return nil, nil, 0, nil, err
	}
	return a.Demand, a.Reserved, len(reqs), a, nil
}

// nodeView is a ledger as plan.AssignFleet sees its node.
func (p *Planner) nodeView(l *ledger.Ledger) (plan.Node, error) {
	n := plan.Node{Name: l.Node}
	held := l.HeldDevices()
	for _, c := range l.Cards {
		s, err := p.o.schemes(c.Scheme)
		if err != nil {
			return n, fmt.Errorf("fleet planner: node %s card %d: %w", l.Node, c.Index, err)
		}
		nc := plan.NodeCard{
			Index:      c.Index,
			Scheme:     s,
			Profiles:   c.Profiles,
			NoWhole:    c.NoWhole,
			WholeInUse: c.BusyWhole,
		}
		for _, in := range c.Busy {
			in.InUse = true
			nc.InUse = append(nc.InUse, in)
		}
		for _, d := range held {
			ref, err := s.ParseDeviceName(d.Name)
			if err != nil || ref.Card != c.Index {
				continue
			}
			switch {
			case d.Pool != c.Pool:
				nc.Withheld = true
			case ref.Profile == "":
				nc.WholeInUse = true
			default:
				nc.InUse = append(
					nc.InUse,
					partition.Instance{Profile: ref.Profile, Start: ref.Start, InUse: true},
				)
			}
		}
		for _, d := range l.Open {
			ref, err := s.ParseDeviceName(d.Name)
			if d.Pool != c.Pool || err != nil || ref.Card != c.Index {
				continue
			}
			if ref.Profile == "" {
				nc.FreeWhole = true
			} else {
				nc.Free = append(nc.Free, partition.Instance{Profile: ref.Profile, Start: ref.Start})
			}
		}
		if nc.WholeInUse && len(nc.InUse) > 0 || s.Validate(nc.InUse) != nil {
			nc.Withheld, nc.InUse, nc.WholeInUse = true, nil, false
		}
		n.Cards = append(n.Cards, nc)
	}
	return n, nil
}
