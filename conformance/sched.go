package conformance

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/allocstate"
)

// allocFeatures are the allocator features the suite uses. They only take
// effect where slices and claims use the matching fields, which the API
// server drops when its feature gates are off.
var allocFeatures = structured.Features{
	AdminAccess:            true,
	PrioritizedList:        true,
	PartitionableDevices:   true,
	DeviceTaints:           true,
	DeviceBindingAndStatus: true,
	ConsumableCapacity:     true,
}

// devRef names one published device.
type devRef struct {
	Pool, Name string
}

func (d devRef) String() string { return d.Pool + "/" + d.Name }

// scheduler plays kube-scheduler: it allocates claims with the real
// structured allocator against the driver's slices and writes the result
// to the API server.
type scheduler struct {
	client   kubernetes.Interface
	driver   string
	ns       string
	node     *corev1.Node
	classes  classLister
	slices   []*resourceapi.ResourceSlice
	consumer resourceapi.ResourceClaimConsumerReference
	celCache *cel.Cache

	mu sync.Mutex
	// inUse are the suite's claims that hold devices, as committed.
	inUse map[types.UID]*resourceapi.ResourceClaim
	// roomy are slices in the order any-device claims take devices
	// (roomFirst); nil until needed after slices changed.
	roomy  []*resourceapi.ResourceSlice
	seq    int
	prefix string
	// refresh, when set, is called before each allocation: it brings
	// the slices up to date after a restart of the driver.
	refresh func(ctx context.Context)
	// relist, when set, is called when the allocator finds nothing: it
	// makes the slices the API server shows now the ones allocated from
	// and reports true if they differ from those (see runner.relist).
	relist func(ctx context.Context) bool
}

// setSlices makes slices the ones the scheduler allocates from.
func (s *scheduler) setSlices(slices []*resourceapi.ResourceSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slices, s.roomy = slices, nil
}

type classLister struct{ classes []*resourceapi.DeviceClass }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l.classes, nil }
func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l.classes {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

// allocatedState returns the devices allocated to the suite's claims.
func (s *scheduler) allocatedState() structured.AllocatedState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := allocstate.New()
	for _, c := range s.inUse {
		allocstate.Add(st, c.Status.Allocation.Devices.Results, nil)
	}
	return st
}

// held returns the suite's claims that hold devices.
func (s *scheduler) held() []*resourceapi.ResourceClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*resourceapi.ResourceClaim, 0, len(s.inUse))
	for _, c := range s.inUse {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// onlyDevice returns copies of the slices in which every device is
// removed except dev and the exclusively allocated devices in inUse, so
// that the allocator can pick only dev (CEL cannot select a device by
// name). Allocated devices stay because the allocator counts their
// counter consumption from the slices; they are no candidates. Pools stay
// complete and counter sets stay in place.
func onlyDevice(slices []*resourceapi.ResourceSlice, dev devRef, inUse sets.Set[structured.DeviceID]) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, sl := range slices {
		c := sl.DeepCopy()
		c.Spec.Devices = nil
		for _, d := range sl.Spec.Devices {
			if (sl.Spec.Pool.Name == dev.Pool && d.Name == dev.Name) || inUse.Has(structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name)) {
				c.Spec.Devices = append(c.Spec.Devices, d)
			}
		}
		out = append(out, c)
	}
	return out
}

// newClaim creates a claim with the given spec and returns it.
func (s *scheduler) newClaim(ctx context.Context, base string, spec resourceapi.ResourceClaimSpec) (*resourceapi.ResourceClaim, error) {
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("%s-%s-%d", s.prefix, base, s.seq)
	s.mu.Unlock()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: managedBy},
		Spec:       spec,
	}
	created, err := s.client.ResourceV1().ResourceClaims(s.ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create claim %s: %w", name, err)
	}
	return created, nil
}

// allocate runs the structured allocator for claim, restricted to dev when
// dev is not nil, else on the devices in roomFirst order. It returns nil,
// nil when the allocator finds no allocation.
func (s *scheduler) allocate(ctx context.Context, claim *resourceapi.ResourceClaim, dev *devRef) (*resourceapi.AllocationResult, error) {
	if s.refresh != nil {
		s.refresh(ctx)
	}
	state := s.allocatedState()
	var slices []*resourceapi.ResourceSlice
	if dev != nil {
		slices = onlyDevice(s.slices, *dev, state.AllocatedDevices)
	} else {
		slices = s.roomFirst()
	}
	alloc, err := structured.NewAllocator(ctx, allocFeatures, state, s.classes, slices, s.celCache)
	if err != nil {
		return nil, fmt.Errorf("create allocator: %w", err)
	}
	results, err := alloc.Allocate(ctx, s.node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, fmt.Errorf("allocate claim %s: %w", claim.Name, err)
	}
	if len(results) == 0 {
		return nil, nil
	}
	return &results[0], nil
}

// allocateCurrent is allocate, tried once more on the slices the API
// server shows now when it finds nothing and they changed (relist): the
// scheduler allocates from its current view, and a driver may have
// published a pool, or republished one, since the suite read its slices.
func (s *scheduler) allocateCurrent(ctx context.Context, claim *resourceapi.ResourceClaim, dev *devRef) (*resourceapi.AllocationResult, error) {
	alloc, err := s.allocate(ctx, claim, dev)
	if err == nil && alloc == nil && s.relist != nil && s.relist(ctx) {
		alloc, err = s.allocate(ctx, claim, dev)
	}
	return alloc, err
}

// commit writes allocation and the suite's reservation to the claim's
// status, as the scheduler does, and records the devices as in use.
func (s *scheduler) commit(ctx context.Context, claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) (*resourceapi.ResourceClaim, error) {
	c := claim.DeepCopy()
	c.Status.Allocation = alloc
	if c.Status.Allocation.AllocationTimestamp == nil {
		now := metav1.NewTime(time.Now())
		c.Status.Allocation.AllocationTimestamp = &now
	}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{s.consumer}
	updated, err := s.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("write allocation of claim %s: %w", claim.Name, err)
	}
	s.mu.Lock()
	s.inUse[updated.UID] = updated
	s.mu.Unlock()
	return updated, nil
}

// allocated creates a claim, allocates and commits it. With dev set, only
// that device may be used. It fails when the allocator finds nothing.
func (s *scheduler) allocated(ctx context.Context, base string, spec resourceapi.ResourceClaimSpec, dev *devRef) (*resourceapi.ResourceClaim, error) {
	claim, err := s.newClaim(ctx, base, spec)
	if err != nil {
		return nil, err
	}
	alloc, err := s.allocateCurrent(ctx, claim, dev)
	if err == nil && alloc == nil {
		err = fmt.Errorf("the structured allocator found no allocation for claim %s%s", claim.Name, s.whyNoFit(ctx, claim, dev))
	}
	if err != nil {
		s.release(ctx, claim)
		return nil, err
	}
	updated, err := s.commit(ctx, claim, alloc)
	if err != nil {
		s.release(ctx, claim)
		return nil, err
	}
	return updated, nil
}

// forget frees the claim's devices for later allocations, leaving the
// claim object in place.
func (s *scheduler) forget(claim *resourceapi.ResourceClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inUse, claim.UID)
}

// release deletes the claim and frees its devices. Errors are ignored:
// the namespace is deleted at the end anyway.
func (s *scheduler) release(ctx context.Context, claim *resourceapi.ResourceClaim) {
	s.mu.Lock()
	delete(s.inUse, claim.UID)
	s.mu.Unlock()
	err := s.client.ResourceV1().ResourceClaims(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return
	}
}

// exactRequest returns a request for count devices of class.
func exactRequest(name, class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           count,
		Tolerations:     []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}},
	}}
}

func claimSpec(reqs ...resourceapi.DeviceRequest) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}
}

// shares returns the capacity requests of up to n allocations that
// share device d together, as its capacities and their request policies
// allow (KEP-5075: a request that asks for no capacity gets the
// policy's default, or all of the capacity when there is no policy; a
// request the policy does not allow is rounded up to a valid amount).
// The shares are unequal where the policies allow (the k-th asks the
// k-th smallest valid amount, their sum within the capacity), so that a
// setting a driver derives from a share's amount differs between
// shares; equal reports that some capacity allows only equal shares.
// It returns at least two shares, or a reason why no two fit.
func shares(d *resourceapi.Device, n int) (out []map[resourceapi.QualifiedName]resource.Quantity, equal bool, why string) {
	names := make([]string, 0, len(d.Capacity))
	for name := range d.Capacity {
		names = append(names, string(name))
	}
	sort.Strings(names)
	perName := map[string][]resource.Quantity{}
	for _, name := range names {
		c := d.Capacity[resourceapi.QualifiedName(name)]
		amounts, same := shareAmounts(c, n)
		if len(amounts) < 2 {
			return nil, false, fmt.Sprintf("capacity %s (%s) and its request policy leave no room for two allocations", name, c.Value.String())
		}
		equal = equal || same
		n = min(n, len(amounts))
		perName[name] = amounts
	}
	if len(names) == 0 {
		n = max(n, 2) // no capacity: any number of allocations
	}
	for i := 0; i < n; i++ {
		m := map[resourceapi.QualifiedName]resource.Quantity{}
		for _, name := range names {
			m[resourceapi.QualifiedName(name)] = perName[name][i].DeepCopy()
		}
		out = append(out, m)
	}
	return out, equal, ""
}

// shareAmounts returns up to n amounts of capacity c, ascending, that
// its request policy allows and whose sum fits: distinct where the
// policy has room for that (the smallest valid ones first), else equal
// (same). Fewer than two means no two allocations fit.
func shareAmounts(c resourceapi.DeviceCapacity, n int) (amounts []resource.Quantity, same bool) {
	// Milli-units: capacities may be fractional (a compute share of 1
	// in steps of 100m).
	total := c.Value.MilliValue()
	p := c.RequestPolicy
	var valid []int64 // the smallest valid amounts, ascending
	switch {
	case p != nil && p.ValidRange != nil && p.ValidRange.Min != nil:
		lo, hi := p.ValidRange.Min.MilliValue(), total
		if p.ValidRange.Max != nil {
			hi = min(hi, p.ValidRange.Max.MilliValue())
		}
		step := int64(0)
		if p.ValidRange.Step != nil {
			step = p.ValidRange.Step.MilliValue()
		}
		base := lo
		if step > 0 {
			// lo, lo+step, lo+2 step, ...; a zero minimum is no share.
			for v, i := lo, 0; v <= hi && i < n+1; v, i = v+step, i+1 {
				if v > 0 {
					valid = append(valid, v)
				}
			}
			break
		}
		if base <= 0 {
			base = total / int64(n*(n+1)/2)
		}
		for k := int64(1); k <= int64(n) && base > 0 && base*k <= hi; k++ {
			valid = append(valid, base*k)
		}
	case p != nil && len(p.ValidValues) > 0:
		for _, v := range p.ValidValues {
			if v.MilliValue() > 0 && (len(valid) == 0 || v.MilliValue() > valid[len(valid)-1]) {
				valid = append(valid, v.MilliValue())
			}
		}
	default:
		// Any amount is valid: split the capacity 1:2:...:n.
		base := total / int64(n*(n+1)/2)
		for k := int64(1); k <= int64(n) && base > 0; k++ {
			valid = append(valid, base*k)
		}
	}
	// The most distinct amounts whose sum fits.
	sum := int64(0)
	for _, v := range valid {
		if len(amounts) == n || sum+v > total {
			break
		}
		sum += v
		amounts = append(amounts, *resource.NewMilliQuantity(v, c.Value.Format))
	}
	if len(amounts) >= 2 {
		return amounts, false
	}
	// Equal shares of the smallest valid amount, where two fit.
	if len(valid) > 0 && 2*valid[0] <= total {
		q := *resource.NewMilliQuantity(valid[0], c.Value.Format)
		amounts = []resource.Quantity{q}
		for i := 1; i < n && int64(i+1)*valid[0] <= total; i++ {
			amounts = append(amounts, q.DeepCopy())
		}
		return amounts, true
	}
	return nil, false
}

// withCapacity returns req asking for the given capacity.
func withCapacity(req resourceapi.DeviceRequest, capacity map[resourceapi.QualifiedName]resource.Quantity) resourceapi.DeviceRequest {
	if len(capacity) > 0 {
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: capacity}
	}
	return req
}

// allocatable counts the devices that the allocator could give to a
// claim for one device right now, without creating any claim.
func (s *scheduler) allocatable(ctx context.Context, class string) int {
	n := 0
	probe := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: s.ns, UID: "probe"}, Spec: claimSpec(exactRequest("dev", class, 1))}
	for _, sl := range s.slices {
		for _, d := range sl.Spec.Devices {
			if alloc, err := s.allocate(ctx, probe, &devRef{sl.Spec.Pool.Name, d.Name}); err == nil && alloc != nil {
				n++
			}
		}
	}
	return n
}
