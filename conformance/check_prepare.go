package conformance

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

const noNode = "needs a connection to the node service (see registration.endpoint)"
const noDevices = "needs published devices (see slices.published)"

func (r *runner) ready() string {
	if r.node == nil {
		return noNode
	}
	if len(r.devices) == 0 {
		return noDevices
	}
	return ""
}

// cycle prepares one claim, checks the result against the allocation and
// unprepares it. It returns the problems found.
func (r *runner) cycle(ctx context.Context, node drapbv1.DRAPluginClient, claim *resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, failures) {
	var f failures
	resp, err := r.prepareWith(ctx, node, claim)
	if err != nil {
		f.add("claim %s: NodePrepareResources failed: %v", claim.Name, err)
		return nil, f
	}
	checkResultKeys(&f, "NodePrepareResources", []*resourceapi.ResourceClaim{claim}, resp.Claims, prepErr)
	if res := resp.Claims[string(claim.UID)]; res != nil && res.Error == "" {
		checkDevicesMatch(&f, r.cfg.DriverName, claim, res)
	}
	uresp, err := r.unprepareWith(ctx, node, claim)
	if err != nil {
		f.add("claim %s: NodeUnprepareResources failed: %v", claim.Name, err)
		return resp, f
	}
	checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{claim}, uresp.Claims, unprepErr)
	return resp, f
}

func (r *runner) allocationChecks(ctx context.Context) {
	var plainFail, counterFail, prepFail failures
	nPlain, nCounter, nPrepared := 0, 0, 0
	ranEvery := false
	r.check(ctx, "allocation.every-device", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" && len(r.devices) == 0 {
			return skip("%s", msg)
		}
		ranEvery = true
		for _, dev := range r.devices {
			d := r.deviceObj[dev]
			counters := len(d.ConsumesCounters) > 0
			if counters {
				nCounter++
			} else {
				nPlain++
			}
			claim, err := r.sched.allocated(ctx, "dev", claimSpec(exactRequest("dev", r.class, 1)), &dev)
			if err != nil {
				if counters {
					counterFail.add("device %s: %v", dev, err)
				} else {
					plainFail.add("device %s: %v", dev, err)
				}
				continue
			}
			r.allocatable = append(r.allocatable, dev)
			if r.node != nil && len(d.BindingConditions) == 0 {
				nPrepared++
				_, f := r.cycle(ctx, r.node, claim)
				prepFail = append(prepFail, f...)
			}
			r.sched.release(ctx, claim)
		}
		if nPlain == 0 {
			return skip("every device consumes counters (see allocation.counters)")
		}
		return plainFail.outcome("%d devices allocated one by one", nPlain)
	})
	r.check(ctx, "allocation.counters", func(ctx context.Context) outcome {
		if !ranEvery {
			return skip("%s", noDevices)
		}
		if nCounter == 0 {
			return skip("no device consumes counters")
		}
		return counterFail.outcome("%d counter-consuming devices allocated one by one", nCounter)
	})
	if ranEvery && r.node != nil {
		o := prepFail.outcome("%d devices prepared and unprepared one by one", nPrepared)
		r.everyDevicePrepare = &o
	}

	r.check(ctx, "allocation.first-available", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
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
		if err != nil || alloc == nil {
			return fail("no allocation for a firstAvailable claim whose second subrequest takes any device: %v", err)
		}
		claim, err = r.sched.commit(ctx, claim, alloc)
		if err != nil {
			return fail("%v", err)
		}
		resp, f := r.cycle(ctx, r.node, claim)
		if res := resp.GetClaims()[string(claim.UID)]; res != nil && res.Error == "" {
			checkRequestNames(&f, r.cfg.DriverName, claim, res)
			for _, d := range res.Devices {
				if len(d.RequestNames) == 0 {
					f.add("device %s/%s names no request; return %q (the base request name)", d.PoolName, d.DeviceName, "pick")
				}
			}
		}
		return f.outcome("allocated as %s, prepared with base request name", alloc.Devices.Results[0].Request)
	})

	r.check(ctx, "allocation.admin-access", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		user, err := r.sched.allocated(ctx, "user", claimSpec(exactRequest("dev", r.class, 1)), nil)
		if err != nil {
			return skip("no free device for an ordinary claim: %v", err)
		}
		defer r.sched.release(ctx, user)
		resp, err := r.prepare(ctx, user)
		if err != nil || resp.Claims[string(user.UID)].GetError() != "" {
			return skip("preparing an ordinary claim failed (see prepare checks): %v %s", err, resp.GetClaims()[string(user.UID)].GetError())
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
		if err != nil || alloc == nil {
			return fail("the allocator could not give device %s in use to an admin-access claim: %v", dev, err)
		}
		admin, err = r.sched.commit(ctx, admin, alloc)
		if err != nil {
			return fail("%v", err)
		}
		_, f := r.cycle(ctx, r.node, admin)
		return f.outcome("admin-access claim prepared on device %s while it is prepared for another claim", dev)
	})

	r.check(ctx, "allocation.shared", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		var shared *devRef
		for _, dev := range r.devices {
			if d := r.deviceObj[dev]; d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				shared = &dev
				break
			}
		}
		if shared == nil {
			return skip("no device allows multiple allocations")
		}
		var claims []*resourceapi.ResourceClaim
		defer func() {
			for _, c := range claims {
				r.sched.release(ctx, c)
			}
		}()
		for i := 0; i < 2; i++ {
			c, err := r.sched.allocated(ctx, "shared", claimSpec(exactRequest("dev", r.class, 1)), shared)
			if err != nil {
				return fail("allocation %d of shared device %s: %v", i+1, shared, err)
			}
			claims = append(claims, c)
		}
		var f failures
		resp, err := r.prepare(ctx, claims...)
		if err != nil {
			return fail("NodePrepareResources for two claims sharing %s: %v", shared, err)
		}
		checkResultKeys(&f, "NodePrepareResources", claims, resp.Claims, prepErr)
		for _, c := range claims {
			if res := resp.Claims[string(c.UID)]; res != nil && res.Error == "" {
				checkDevicesMatch(&f, r.cfg.DriverName, c, res)
			}
		}
		uresp, err := r.unprepare(ctx, claims...)
		if err != nil {
			f.add("NodeUnprepareResources: %v", err)
		} else {
			checkResultKeys(&f, "NodeUnprepareResources", claims, uresp.Claims, unprepErr)
		}
		return f.outcome("device %s prepared for two claims with their share IDs", shared)
	})
}

func (r *runner) prepareChecks(ctx context.Context) {
	notPrepared := "needs the main claims prepared (see prepare.result-per-claim)"
	r.check(ctx, "prepare.result-per-claim", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		spec := claimSpec(exactRequest("first", r.class, 1), exactRequest("second", r.class, 1))
		if len(r.allocatable) < 3 {
			spec = claimSpec(exactRequest("first", r.class, 1))
		}
		a, err := r.sched.allocated(ctx, "main", spec, nil)
		if err != nil {
			return fail("allocate the first claim: %v", err)
		}
		r.mainClaims = append(r.mainClaims, a)
		if b, err := r.sched.allocated(ctx, "main", claimSpec(exactRequest("only", r.class, 1)), nil); err == nil {
			r.mainClaims = append(r.mainClaims, b)
		}
		r.cdiBefore = snapshot(r.cfg.CDIDirs)
		resp, err := r.prepare(ctx, r.mainClaims...)
		if err != nil {
			return fail("NodePrepareResources for %d claims failed: %v", len(r.mainClaims), err)
		}
		r.cdiAfterPrepare = snapshot(r.cfg.CDIDirs)
		var f failures
		checkResultKeys(&f, "NodePrepareResources", r.mainClaims, resp.Claims, prepErr)
		if len(f) == 0 {
			r.mainResp = resp
		}
		return f.outcome("%d claims prepared in one call", len(r.mainClaims))
	})
	r.check(ctx, "prepare.devices-match", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		var f failures
		for _, c := range r.mainClaims {
			checkDevicesMatch(&f, r.cfg.DriverName, c, r.mainResp.Claims[string(c.UID)])
		}
		return f.outcome("devices match the allocation")
	})
	r.check(ctx, "prepare.request-names", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		var f failures
		for _, c := range r.mainClaims {
			checkRequestNames(&f, r.cfg.DriverName, c, r.mainResp.Claims[string(c.UID)])
		}
		return f.outcome("request names match (%d requests in the first claim)", len(r.mainClaims[0].Spec.Devices.Requests))
	})
	ids := cdiIDs(r.mainResp)
	r.check(ctx, "prepare.cdi-ids-format", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		if len(ids) == 0 {
			return skip("the driver returned no CDI IDs")
		}
		var f failures
		checkCDIFormat(&f, ids)
		return f.outcome("%d CDI IDs well-formed", len(ids))
	})
	var cache cdiResolver
	r.check(ctx, "prepare.cdi-resolve", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		if len(ids) == 0 {
			return skip("the driver returned no CDI IDs")
		}
		if len(r.cfg.CDIDirs) == 0 {
			return skip("no CDI folders configured")
		}
		c, specErrs, err := cdiCache(r.cfg.CDIDirs)
		if err != nil {
			return fail("%v", err)
		}
		cache = cdiResolver{c, specErrs}
		var f failures
		checkCDIResolve(&f, c, specErrs, r.cfg.CDIDirs, ids)
		return f.outcome("%d CDI IDs resolve in %q", len(ids), r.cfg.CDIDirs)
	})
	r.check(ctx, "prepare.cdi-inject", func(ctx context.Context) outcome {
		if cache.cache == nil {
			return skip("needs resolvable CDI IDs (see prepare.cdi-resolve)")
		}
		var f failures
		var ok []string
		for _, id := range ids {
			if cache.cache.GetDevice(id) != nil {
				ok = append(ok, id)
			}
		}
		checkCDIInject(&f, cache.cache, ok)
		return f.outcome("%d CDI devices injected into an OCI spec", len(ok))
	})
	r.check(ctx, "prepare.idempotent", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		want := normalize(r.mainResp)
		var f failures
		for i := 0; i < r.cfg.Repeat; i++ {
			resp, err := r.prepare(ctx, r.mainClaims...)
			if err != nil {
				f.add("repeat %d: NodePrepareResources failed: %v", i+1, err)
				continue
			}
			if diff := cmp.Diff(want, normalize(resp)); diff != "" {
				f.add("repeat %d answered differently (-first +repeat):\n%s", i+1, diff)
			}
		}
		resp, err := r.prepare(ctx, r.mainClaims[0])
		if err != nil {
			f.add("preparing the first claim alone again failed: %v", err)
		} else if diff := cmp.Diff(map[string][]string{string(r.mainClaims[0].UID): want[string(r.mainClaims[0].UID)]}, normalize(resp)); diff != "" {
			f.add("preparing the first claim alone again answered differently (-first +repeat):\n%s", diff)
		}
		return f.outcome("%d repeats gave the same answer", r.cfg.Repeat+1)
	})
	r.check(ctx, "prepare.concurrent", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		var claims []*resourceapi.ResourceClaim
		defer func() {
			for _, c := range claims {
				r.sched.release(ctx, c)
			}
		}()
		for i := 0; i < r.cfg.Concurrency; i++ {
			c, err := r.sched.allocated(ctx, "conc", claimSpec(exactRequest("dev", r.class, 1)), nil)
			if err != nil {
				break
			}
			claims = append(claims, c)
		}
		if len(claims) < 2 {
			return skip("needs two free devices besides the main claims")
		}
		var mu sync.Mutex
		var f failures
		var wg sync.WaitGroup
		for _, c := range claims {
			wg.Go(func() {
				resp, err := r.prepare(ctx, c)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					f.add("claim %s: NodePrepareResources failed: %v", c.Name, err)
					return
				}
				checkResultKeys(&f, "NodePrepareResources", []*resourceapi.ResourceClaim{c}, resp.Claims, prepErr)
				if res := resp.Claims[string(c.UID)]; res != nil && res.Error == "" {
					checkDevicesMatch(&f, r.cfg.DriverName, c, res)
				}
			})
		}
		wg.Wait()
		for _, c := range claims {
			wg.Go(func() {
				resp, err := r.unprepare(ctx, c)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					f.add("claim %s: NodeUnprepareResources failed: %v", c.Name, err)
					return
				}
				checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{c}, resp.Claims, unprepErr)
			})
		}
		wg.Wait()
		return f.outcome("%d claims prepared and unprepared concurrently", len(claims))
	})
	r.record(ctx, "prepare.every-device", r.everyDevicePrepare, "needs the node service and allocatable devices")
	r.check(ctx, "prepare.device-in-use", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		var res *resourceapi.DeviceRequestAllocationResult
		var owner *resourceapi.ResourceClaim
		for _, c := range r.mainClaims {
			for _, rr := range ownResults(r.cfg.DriverName, c) {
				d := r.deviceObj[devRef{rr.Pool, rr.Device}]
				if d != nil && (d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations) {
					res, owner = &rr, c
					break
				}
			}
			if res != nil {
				break
			}
		}
		if res == nil {
			return skip("the main claims hold no device that is exclusive")
		}
		claim, err := r.sched.newClaim(ctx, "double", claimSpec(exactRequest("dup", r.class, 1)))
		if err != nil {
			return fail("%v", err)
		}
		defer r.sched.release(ctx, claim)
		dup := *res
		dup.Request = "dup"
		alloc := &resourceapi.AllocationResult{
			Devices:      resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{dup}},
			NodeSelector: owner.Status.Allocation.NodeSelector,
		}
		claim, err = r.sched.commit(ctx, claim, alloc)
		if err != nil {
			return fail("write a second allocation of %s/%s: %v", res.Pool, res.Device, err)
		}
		resp, err := r.prepare(ctx, claim)
		if err != nil {
			return pass("refused with a call error: %v", err)
		}
		if msg := resp.Claims[string(claim.UID)].GetError(); msg != "" {
			return pass("refused: %s", msg)
		}
		_, _ = r.unprepare(ctx, claim)
		return fail("device %s/%s is prepared for claim %s and was prepared again for claim %s; refuse a device that is in use by another claim (unless admin access or shared)", res.Pool, res.Device, owner.Name, claim.Name)
	})
	r.check(ctx, "prepare.other-version", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		var other string
		for _, s := range nodeServices {
			if s != r.nodeService && firstKnown(r.info.SupportedVersions, []string{s}) != "" {
				other = s
			}
		}
		if other == "" {
			return skip("the driver advertises one node service version")
		}
		claim, err := r.sched.allocated(ctx, "version", claimSpec(exactRequest("dev", r.class, 1)), nil)
		if err != nil && r.mainResp != nil {
			// No free device: prepare a main claim again over the other
			// version (it must give the same answer); unprepare over it
			// is not exercised, the unprepare checks need the claim.
			main := r.mainClaims[0]
			resp, err := r.prepareWith(ctx, nodeClient(r.conn, other), main)
			if err != nil {
				return fail("NodePrepareResources over %s: %v", other, err)
			}
			want := map[string][]string{string(main.UID): normalize(r.mainResp)[string(main.UID)]}
			if diff := cmp.Diff(want, normalize(resp)); diff != "" {
				return fail("%s answered differently from %s (-%s +%s):\n%s", other, r.nodeService, r.nodeService, other, diff)
			}
			return pass("%s prepares like %s (no free device to check unprepare over it)", other, r.nodeService)
		}
		if err != nil {
			return skip("no free device: %v", err)
		}
		defer r.sched.release(ctx, claim)
		first, err := r.prepare(ctx, claim)
		if err != nil {
			return fail("NodePrepareResources over %s: %v", r.nodeService, err)
		}
		resp, f := r.cycle(ctx, nodeClient(r.conn, other), claim)
		if resp != nil {
			if diff := cmp.Diff(normalize(first), normalize(resp)); diff != "" {
				f.add("%s answered differently from %s (-%s +%s):\n%s", other, r.nodeService, r.nodeService, other, diff)
			}
		}
		_, _ = r.unprepare(ctx, claim)
		return f.outcome("%s prepares and unprepares like %s", other, r.nodeService)
	})
	r.check(ctx, "prepare.extra-claims", func(ctx context.Context) outcome {
		if len(r.cfg.ExtraClaims) == 0 {
			return skip("no extra claims configured")
		}
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		var f failures
		for i, spec := range r.cfg.ExtraClaims {
			spec = *spec.DeepCopy()
			for j := range spec.Devices.Requests {
				q := &spec.Devices.Requests[j]
				if q.Exactly != nil && q.Exactly.DeviceClassName == "" {
					q.Exactly.DeviceClassName = r.class
				}
				for k := range q.FirstAvailable {
					if q.FirstAvailable[k].DeviceClassName == "" {
						q.FirstAvailable[k].DeviceClassName = r.class
					}
				}
			}
			claim, err := r.sched.allocated(ctx, fmt.Sprintf("extra%d", i), spec, nil)
			if err != nil {
				f.add("extra claim %d: %v", i, err)
				continue
			}
			resp, ff := r.cycle(ctx, r.node, claim)
			if res := resp.GetClaims()[string(claim.UID)]; res != nil && res.Error == "" {
				checkRequestNames(&ff, r.cfg.DriverName, claim, res)
			}
			f = append(f, ff...)
			r.sched.release(ctx, claim)
		}
		return f.outcome("%d extra claims allocated, prepared and unprepared", len(r.cfg.ExtraClaims))
	})
}

type cdiResolver struct {
	cache    *cdi.Cache
	specErrs string
}
