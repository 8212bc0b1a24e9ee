package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
