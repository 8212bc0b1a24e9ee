package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
)

// everyDevice is what allocating (and, with a node service, preparing)
// every device one by one found.
type everyDevice struct {
	nPlain, nCounter, nPrepared int
	plainFail, counterFail      failures
	prepFail                    failures
	prepared                    bool // the node service was there to prepare
	empty                       []string
	allocatable                 []devRef
	withdrawn                   []devRef // published at the start, gone from the slices when their turn came
}

// setupEveryDevice allocates a claim for each published device alone,
// prepares and unprepares it when the driver is registered, and releases
// it.
func (r *runner) setupEveryDevice(ctx context.Context) error {
	ev := &r.every
	ev.prepared = r.need(ctx, fxNode) == nil
	for _, dev := range r.devices {
		// The scheduler allocates from the slices of the moment. A driver
		// with a dynamic inventory (KEP-4815 partitions published only
		// while they fit, republished after every prepare and unprepare)
		// may not list a device of the suite's first snapshot right after
		// the previous device's unprepare: give it publishedSoon's grace
		// to come back, and leave out one that does not.
		if len(r.publishedSoon(ctx, []devRef{dev})) > 0 {
			ev.withdrawn = append(ev.withdrawn, dev)
			continue
		}
		d := r.deviceObj[dev]
		counters := len(d.ConsumesCounters) > 0
		if counters {
			ev.nCounter++
		} else {
			ev.nPlain++
		}
		claim, err := r.sched.allocated(ctx, "dev", claimSpec(exactRequest("dev", r.class, 1)), &dev)
		if err != nil {
			if counters {
				ev.counterFail.add("device %s: %v", dev, err)
			} else {
				ev.plainFail.add("device %s: %v", dev, err)
			}
			continue
		}
		ev.allocatable = append(ev.allocatable, dev)
		if ev.prepared && len(d.BindingConditions) == 0 {
			ev.nPrepared++
			resp, f := r.cycle(ctx, r.node, claim)
			ev.prepFail = append(ev.prepFail, f...)
			if res := resp.GetClaims()[string(claim.UID)]; res != nil && res.Error == "" && len(res.Devices) == 0 {
				ev.empty = append(ev.empty, claim.Name)
			}
		}
		r.sched.release(ctx, claim)
	}
	return nil
}

func (r *runner) checkEveryDevice(ctx context.Context) outcome {
	if o := r.judge(ctx, fxEveryDevice); o != nil {
		return *o
	}
	if r.every.nPlain == 0 {
		return skip("every device consumes counters (see allocation.counters)")
	}
	return r.every.plainFail.outcome("%d devices allocated one by one%s", r.every.nPlain, withdrawnNote(r.every.withdrawn))
}

func (r *runner) checkCounterDevices(context.Context) outcome {
	if r.every.nCounter == 0 {
		return skip("no device consumes counters")
	}
	return r.every.counterFail.outcome("%d counter-consuming devices allocated one by one%s", r.every.nCounter, withdrawnNote(r.every.withdrawn))
}

func (r *runner) checkFirstAvailable(ctx context.Context) outcome {
	spec := claimSpec(resourceapi.DeviceRequest{Name: "pick", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "impossible", DeviceClassName: r.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "impossible.conformance.invalid"`}}}},
		{Name: "any", DeviceClassName: r.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Tolerations: []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}},
	}})
	claim, err := r.sched.newClaim(ctx, "first", spec)
	if err != nil {
		return skip("the API server does not accept firstAvailable requests: %v", err)
	}
	defer r.sched.release(ctx, claim)
	if len(claim.Spec.Devices.Requests) == 0 || len(claim.Spec.Devices.Requests[0].FirstAvailable) == 0 {
		return skip("the API server drops firstAvailable (DRAPrioritizedList off)")
	}
	alloc, err := r.sched.allocate(ctx, claim, nil)
	if err != nil {
		return skip("the structured allocator does not allocate a firstAvailable claim whose second subrequest takes any device (no free device?): %v", err)
	}
	if alloc == nil {
		return skip("the structured allocator finds no allocation for a firstAvailable claim whose second subrequest takes any device (no free device?)")
	}
	claim, err = r.sched.commit(ctx, claim, alloc)
	if err != nil {
		return skip("%v", err)
	}
	resp, f := r.cycle(ctx, r.node, claim)
	if res := resp.GetClaims()[string(claim.UID)]; res != nil && res.Error == "" {
		// No request names is fine here: the claim has one request, and
		// api.proto says an empty list means all of them.
		checkRequestNames(&f, r.cfg.DriverName, claim, res)
	}
	return f.outcome("allocated as %s, prepared; request names are base request names", alloc.Devices.Results[0].Request)
}

func (r *runner) checkAdminAccess(ctx context.Context) outcome {
	user, err := r.sched.allocated(ctx, "user", claimSpec(exactRequest("dev", r.class, 1)), nil)
	if err != nil {
		return skip("no free device for an ordinary claim: %v", err)
	}
	defer r.sched.release(ctx, user)
	resp, err := r.prepare(ctx, user)
	if err != nil {
		return skip("preparing an ordinary claim failed (see the prepare checks): %v", err)
	}
	if res := resp.Claims[string(user.UID)]; res == nil || res.Error != "" {
		return skip("preparing an ordinary claim failed (see the prepare checks): %s", prepErr(res))
	}
	defer func() { _, _ = r.unprepare(ctx, user) }()
	res := user.Status.Allocation.Devices.Results[0]
	dev := devRef{res.Pool, res.Device}
	req := exactRequest("admin", r.class, 1)
	req.Exactly.AdminAccess = ptr.To(true)
	admin, err := r.sched.newClaim(ctx, "admin", claimSpec(req))
	if err != nil {
		return skip("the API server refuses admin-access claims: %v", err)
	}
	defer r.sched.release(ctx, admin)
	if a := admin.Spec.Devices.Requests[0].Exactly.AdminAccess; a == nil || !*a {
		return skip("the API server drops adminAccess (DRAAdminAccess off)")
	}
	alloc, err := r.sched.allocate(ctx, admin, &dev)
	if err != nil {
		return skip("the structured allocator cannot give device %s, in use, to an admin-access claim, so the scheduler would not either (nothing to prepare): %v", dev, err)
	}
	if alloc == nil {
		why := ""
		if d := r.deviceObj[dev]; d != nil && len(d.ConsumesCounters) > 0 {
			why = " (the device consumes counters, which the claim using it holds)"
		}
		return skip("the structured allocator finds no allocation of device %s, in use, for an admin-access claim%s, so the scheduler would not either (nothing to prepare)", dev, why)
	}
	admin, err = r.sched.commit(ctx, admin, alloc)
	if err != nil {
		return skip("%v", err)
	}
	_, f := r.cycle(ctx, r.node, admin)
	return f.outcome("admin-access claim prepared on device %s while it is prepared for another claim", dev)
}

// sharedClaims are two claims prepared on one shared device.
type sharedClaims struct {
	dev      devRef
	capacity map[resourceapi.QualifiedName]resource.Quantity
	claims   []*resourceapi.ResourceClaim
	resp     *drapbv1.NodePrepareResourcesResponse
	empty    []string
}

// setupShared allocates two claims on a device that allows multiple
// allocations, each asking for a share its capacity allows, prepares both
// in one call and unprepares them.
func (r *runner) setupShared(ctx context.Context) error {
	sh := &r.shared
	var found bool
	for _, dev := range r.devices {
		if d := r.deviceObj[dev]; d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
			sh.dev, found = dev, true
			break
		}
	}
	if !found {
		return unable("no device allows multiple allocations")
	}
	capacity, why := shareOfTwo(r.deviceObj[sh.dev])
	if why != "" {
		return unable("device %s allows multiple allocations, but %s", sh.dev, why)
	}
	sh.capacity = capacity
	defer func() {
		for _, c := range sh.claims {
			r.sched.release(ctx, c)
		}
	}()
	for i := 0; i < 2; i++ {
		c, err := r.sched.allocated(ctx, "shared", claimSpec(withCapacity(exactRequest("dev", r.class, 1), capacity)), &sh.dev)
		if err != nil {
			return unable("the structured allocator does not place allocation %d of shared device %s (capacity %s), so the scheduler would not either: %v", i+1, sh.dev, quantities(capacity), err)
		}
		sh.claims = append(sh.claims, c)
	}
	var f failures
	resp, err := r.prepare(ctx, sh.claims...)
	if err != nil {
		return broken("NodePrepareResources for two claims sharing %s: %v", sh.dev, err)
	}
	checkResultKeys(&f, "NodePrepareResources", sh.claims, resp.Claims, prepErr)
	for _, c := range sh.claims {
		if res := resp.Claims[string(c.UID)]; res != nil && res.Error == "" {
			if checkDevicesMatch(&f, r.cfg.DriverName, c, res) {
				sh.empty = append(sh.empty, c.Name)
			}
		}
	}
	sh.resp = resp
	uresp, err := r.unprepare(ctx, sh.claims...)
	if err != nil {
		f.add("NodeUnprepareResources: %v", err)
	} else {
		checkResultKeys(&f, "NodeUnprepareResources", sh.claims, uresp.Claims, unprepErr)
	}
	if len(f) > 0 {
		return broken("%s", f.outcome("").msg)
	}
	return nil
}

func (r *runner) checkShared(ctx context.Context) outcome {
	if o := r.judge(ctx, fxShared); o != nil {
		return *o
	}
	return pass("device %s prepared for two claims (capacity %s each)%s", r.shared.dev, quantities(r.shared.capacity), noDevicesNote(r.shared.empty))
}

func (r *runner) checkShareID(context.Context) outcome {
	var f failures
	n := 0
	for _, c := range r.shared.claims {
		res := r.shared.resp.Claims[string(c.UID)]
		n += len(res.GetDevices())
		checkShareIDs(&f, r.cfg.DriverName, c, res)
	}
	if n == 0 {
		return skip("the driver returned no devices for the shared allocations")
	}
	return f.outcome("both allocations of the shared device returned with their share IDs")
}

// noDevicesNote notes claims for which the driver returned no devices.
// withdrawnNote says which devices the driver stopped publishing before
// the suite could allocate them alone.
func withdrawnNote(devs []devRef) string {
	if len(devs) == 0 {
		return ""
	}
	return fmt.Sprintf("; note: %d device(s) no longer published when their turn came, left out (a dynamic inventory may withdraw devices): %v", len(devs), devs)
}

func noDevicesNote(claims []string) string {
	if len(claims) == 0 {
		return ""
	}
	return fmt.Sprintf("; note: no devices returned for %d claim(s) (allowed by api.proto; their containers get no CDI devices, e.g. the driver configures them through NRI)", len(claims))
}

// quantities formats capacity requests.
func quantities(m map[resourceapi.QualifiedName]resource.Quantity) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for n, q := range m {
		parts = append(parts, fmt.Sprintf("%s=%s", n, q.String()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
