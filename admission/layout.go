package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// LayoutGuard refuses the allocation of a device that the current
// ResourceSlice of its pool no longer lists, for the pools of one driver
// that are a single slice: the shape of a driver that publishes a
// layout, replacing free devices by overlapping ones after a fence
// (docs/dynamic-mig-publication.md, "What it guarantees", rule 3). The
// scheduler allocates from the slices it last saw and writes the
// allocation later (PreBind); the API server asks the guard (through
// [LayoutWebhook], served at [LayoutPath] by a [Server] given
// [WithLayoutGuard]), the guard refuses a stale write, PreBind fails and
// the pod is scheduled again from the current slice.
//
// The guard keeps the driver's slices in an informer restricted to the
// driver (field selector spec.driver) and, per pool, the device names of
// its slice when the pool is one slice: a request costs decoding the
// claim and one map lookup per allocated device, whatever the number of
// slices in the cluster. It answers only once the informer has synced
// ([LayoutGuard.HasSynced]); before, a review is refused as unavailable.
// Its view of a slice lags the API server's by its watch's delay (as an
// admission policy's view would, through the API server's informer): the
// driver's fence, a margin after it has seen its own retirement, is what
// covers that lag. It is safe for concurrent use.
type LayoutGuard struct {
	driver string
	client kubernetes.Interface

	mu sync.RWMutex
	// slices are the driver's slices by pool name, then slice name.
	slices map[string]map[string]*sliceDevices
	// poolOf is each slice's pool, by slice name.
	poolOf map[string]string
	// one is, for each pool whose newest generation is exactly one slice
	// with resourceSliceCount 1, that slice.
	one map[string]*sliceDevices

	synced chan struct{}
	once   sync.Once
}

// sliceDevices is what the guard keeps of one slice.
type sliceDevices struct {
	name       string
	generation int64
	count      int64
	devices    map[string]struct{}
}

// NewLayoutGuard returns the LayoutGuard of driverName's slices, read
// with client (which needs get, list and watch on
// resource.k8s.io resourceslices). It watches nothing until
// [LayoutGuard.Run] (a [Server] given [WithLayoutGuard] runs it).
func NewLayoutGuard(client kubernetes.Interface, driverName string) (*LayoutGuard, error) {
	switch {
	case client == nil:
		return nil, errors.New("new layout guard: no client")
	case driverName == "":
		return nil, errors.New("new layout guard: no driver name")
	}
	return &LayoutGuard{
		driver: driverName, client: client,
		slices: map[string]map[string]*sliceDevices{}, poolOf: map[string]string{}, one: map[string]*sliceDevices{},
		synced: make(chan struct{}),
	}, nil
}

// Driver is the driver whose allocations are checked.
func (g *LayoutGuard) Driver() string { return g.driver }

// Run watches the driver's ResourceSlices until ctx is done, then
// returns nil; it returns an error at once when the guard runs already.
// [LayoutGuard.Synced] is closed once the first list is in.
func (g *LayoutGuard) Run(ctx context.Context) error {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return errors.New("run layout guard: running already")
	}
	logger := klog.FromContext(ctx).WithValues("driver", g.driver)
	selector := fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, g.driver).String()
	factory := informers.NewSharedInformerFactoryWithOptions(g.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Resource().V1().ResourceSlices().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.upsert(obj) },
		UpdateFunc: func(_, obj any) { g.upsert(obj) },
		DeleteFunc: func(obj any) { g.remove(obj) },
	}); err != nil {
		return fmt.Errorf("run layout guard: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	g.mu.RLock()
	logger.Info("Layout guard synced", "pools", len(g.slices), "oneSlicePools", len(g.one))
	g.mu.RUnlock()
	close(g.synced)
	<-ctx.Done()
	return nil
}

// Synced is closed once the guard has the driver's slices (its informer
// has synced): from then on it answers.
func (g *LayoutGuard) Synced() <-chan struct{} { return g.synced }

// HasSynced says whether [LayoutGuard.Synced] is closed.
func (g *LayoutGuard) HasSynced() bool {
	select {
	case <-g.synced:
		return true
	default:
		return false
	}
}

// upsert indexes a slice added or updated.
func (g *LayoutGuard) upsert(obj any) {
	s, ok := obj.(*resourceapi.ResourceSlice)
	if !ok || s.Spec.Driver != g.driver {
		return
	}
	d := &sliceDevices{name: s.Name, generation: s.Spec.Pool.Generation, count: s.Spec.Pool.ResourceSliceCount,
		devices: make(map[string]struct{}, len(s.Spec.Devices))}
	for _, dev := range s.Spec.Devices {
		d.devices[dev.Name] = struct{}{}
	}
	pool := s.Spec.Pool.Name
	g.mu.Lock()
	defer g.mu.Unlock()
	// A slice may move to another pool: drop it from the old one.
	if p, ok := g.poolOf[s.Name]; ok && p != pool {
		delete(g.slices[p], s.Name)
		g.reindex(p)
	}
	g.poolOf[s.Name] = pool
	if g.slices[pool] == nil {
		g.slices[pool] = map[string]*sliceDevices{}
	}
	g.slices[pool][s.Name] = d
	g.reindex(pool)
}

// remove drops a deleted slice.
func (g *LayoutGuard) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*resourceapi.ResourceSlice)
	if !ok || s.Spec.Driver != g.driver {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.poolOf[s.Name]; ok {
		delete(g.poolOf, s.Name)
		delete(g.slices[p], s.Name)
		g.reindex(p)
	}
}

// reindex decides whether pool is one slice, as the allocator sees it:
// among its slices of the newest generation, exactly one, which says
// the pool has one (resourceSliceCount 1). g.mu is held.
func (g *LayoutGuard) reindex(pool string) {
	byName := g.slices[pool]
	if len(byName) == 0 {
		delete(g.slices, pool)
		delete(g.one, pool)
		return
	}
	var newest []*sliceDevices
	for _, d := range byName {
		switch {
		case len(newest) == 0 || d.generation > newest[0].generation:
			newest = append(newest[:0], d)
		case d.generation == newest[0].generation:
			newest = append(newest, d)
		}
	}
	if len(newest) == 1 && newest[0].count == 1 {
		g.one[pool] = newest[0]
		return
	}
	delete(g.one, pool)
}

// StaleAllocationError is the refusal of an allocation of devices that
// the current slice of their one-slice pool does not list.
type StaleAllocationError struct {
	Claim   string // namespace/name
	Driver  string
	Pool    string
	Devices []string // of Pool, in the allocation's order
	Slice   string   // the pool's current slice
}

func (e *StaleAllocationError) Error() string {
	return fmt.Sprintf("claim %s: device %s of pool %s (driver %s) was allocated from an older publication of the layout: ResourceSlice %s no longer lists it; the scheduler will try again",
		e.Claim, strings.Join(e.Devices, ", "), e.Pool, e.Driver, e.Slice)
}

// CheckAllocation returns a [*StaleAllocationError] when the update of a
// claim's status from old to claim allocates it (old has no
// status.allocation, claim has one) and a result for the driver names a
// device of a pool whose current slice is known, the pool's only one,
// and does not list the device; the error names the devices of the first
// such pool. It returns nil for everything else: a write that does not
// allocate (the driver's status.devices, reservedFor, deallocation),
// other drivers' devices, pools of several slices (the device may be in
// another one), pools without a slice. Before [LayoutGuard.Synced] it
// knows no slice and returns nil: [LayoutGuard.Review] does not call it
// then.
func (g *LayoutGuard) CheckAllocation(old, claim *resourceapi.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil || (old != nil && old.Status.Allocation != nil) {
		return nil
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	var stale *StaleAllocationError
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != g.driver || (stale != nil && r.Pool != stale.Pool) {
			continue
		}
		s, ok := g.one[r.Pool]
		if !ok {
			continue
		}
		if _, listed := s.devices[r.Device]; listed {
			continue
		}
		if stale == nil {
			stale = &StaleAllocationError{Claim: claim.Namespace + "/" + claim.Name, Driver: g.driver, Pool: r.Pool, Slice: s.name}
		}
		stale.Devices = append(stale.Devices, r.Device)
	}
	if stale == nil {
		return nil
	}
	return stale
}

// ErrLayoutNotSynced is the refusal of a review that comes before the
// guard has the driver's slices.
var ErrLayoutNotSynced = errors.New("layout guard: the driver's ResourceSlices are not read yet")

// Review answers one admission request: an UPDATE of the status of a
// resource.k8s.io/v1 ResourceClaim is refused (403 Forbidden, the
// message of [LayoutGuard.CheckAllocation]'s error) when
// [LayoutGuard.CheckAllocation] refuses it, and refused as unavailable
// (503, [ErrLayoutNotSynced]) before the guard has synced. Anything else
// is allowed, with a warning when it is not a claim status update.
func (g *LayoutGuard) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	logger := klog.FromContext(ctx).WithValues("operation", req.Operation, "resource", req.Resource.Resource, "object", klog.KRef(req.Namespace, req.Name))
	if req.Resource.Group != resourceapi.GroupName || req.Resource.Version != "v1" || req.Resource.Resource != ResourceClaims ||
		req.SubResource != "status" || req.Operation != admissionv1.Update {
		resp.Warnings = []string{fmt.Sprintf("%s layout admission: %s %s %s not checked: only UPDATE of resource.k8s.io/v1 %s/status is", g.driver, req.Operation, req.Resource.String(), req.SubResource, ResourceClaims)}
		return resp
	}
	if !g.HasSynced() {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: ErrLayoutNotSynced.Error(), Reason: metav1.StatusReasonServiceUnavailable, Code: http.StatusServiceUnavailable}
		return resp
	}
	var claim, old resourceapi.ResourceClaim
	if err := json.Unmarshal(req.Object.Raw, &claim); err != nil {
		logger.Error(err, "Cannot decode the claim; allowed unchecked")
		resp.Warnings = []string{fmt.Sprintf("%s layout admission: not checked: decode ResourceClaim: %v", g.driver, err)}
		return resp
	}
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		logger.Error(err, "Cannot decode the old claim; allowed unchecked")
		resp.Warnings = []string{fmt.Sprintf("%s layout admission: not checked: decode the old ResourceClaim: %v", g.driver, err)}
		return resp
	}
	if claim.Namespace == "" {
		claim.Namespace = req.Namespace
	}
	if claim.Name == "" {
		claim.Name = req.Name
	}
	if err := g.CheckAllocation(&old, &claim); err != nil {
		logger.V(2).Info("Refused", "reason", err.Error())
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden}
		return resp
	}
	logger.V(5).Info("Allowed")
	return resp
}

// ServeHTTP answers a POSTed AdmissionReview (admission.k8s.io/v1) with
// [LayoutGuard.Review]'s response. Before the guard has synced it
// answers 503 and no review, so that the API server applies the
// webhook's failure policy; a body that is not a review gets 400.
func (g *LayoutGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.HasSynced() {
		http.Error(w, ErrLayoutNotSynced.Error(), http.StatusServiceUnavailable)
		return
	}
	serveReview(w, r, g.Review)
}

// serveReview decodes a POSTed AdmissionReview, answers it with review
// and writes the answer.
func serveReview(w http.ResponseWriter, r *http.Request, review func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
	if err != nil {
		http.Error(w, "read AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		if err == nil {
			err = errors.New("no request")
		}
		http.Error(w, "decode AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: review(r.Context(), in.Request)}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(w, "encode AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
