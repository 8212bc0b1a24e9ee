package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	var emptyEvery []string
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
				resp, f := r.cycle(ctx, r.node, claim)
				prepFail = append(prepFail, f...)
				if res := resp.GetClaims()[string(claim.UID)]; res != nil && res.Error == "" && len(res.Devices) == 0 {
					emptyEvery = append(emptyEvery, claim.Name)
				}
			}
			r.sched.release(ctx, claim)
		}
		if ranEvery && r.node != nil {
			o := prepFail.outcome("%d devices prepared and unprepared one by one%s", nPrepared, noDevicesNote(emptyEvery))
			r.everyDevicePrepare = &o
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
			return fail("%v", err)
		}
		_, f := r.cycle(ctx, r.node, admin)
		return f.outcome("admin-access claim prepared on device %s while it is prepared for another claim", dev)
	})

	var sharedClaims []*resourceapi.ResourceClaim
	var sharedResp *drapbv1.NodePrepareResourcesResponse
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
		capacity, why := shareOfTwo(r.deviceObj[*shared])
		if why != "" {
			return skip("device %s allows multiple allocations, but %s", shared, why)
		}
		for i := 0; i < 2; i++ {
			c, err := r.sched.allocated(ctx, "shared", claimSpec(withCapacity(exactRequest("dev", r.class, 1), capacity)), shared)
			if err != nil {
				return skip("the structured allocator does not place allocation %d of shared device %s (capacity %s), so the scheduler would not either: %v", i+1, shared, quantities(capacity), err)
			}
			sharedClaims = append(sharedClaims, c)
		}
		var f failures
		resp, err := r.prepare(ctx, sharedClaims...)
		if err != nil {
			return fail("NodePrepareResources for two claims sharing %s: %v", shared, err)
		}
		checkResultKeys(&f, "NodePrepareResources", sharedClaims, resp.Claims, prepErr)
		var empty []string
		for _, c := range sharedClaims {
			if res := resp.Claims[string(c.UID)]; res != nil && res.Error == "" {
				if checkDevicesMatch(&f, r.cfg.DriverName, c, res) {
					empty = append(empty, c.Name)
				}
			}
		}
		if len(f) == 0 {
			sharedResp = resp
		}
		uresp, err := r.unprepare(ctx, sharedClaims...)
		if err != nil {
			f.add("NodeUnprepareResources: %v", err)
		} else {
			checkResultKeys(&f, "NodeUnprepareResources", sharedClaims, uresp.Claims, unprepErr)
		}
		return f.outcome("device %s prepared for two claims (capacity %s each)%s", shared, quantities(capacity), noDevicesNote(empty))
	})
	r.check(ctx, "allocation.share-id", func(ctx context.Context) outcome {
		if sharedResp == nil {
			return skip("needs two claims prepared on a shared device (see allocation.shared)")
		}
		var f failures
		n := 0
		for _, c := range sharedClaims {
			res := sharedResp.Claims[string(c.UID)]
			n += len(res.GetDevices())
			checkShareIDs(&f, r.cfg.DriverName, c, res)
		}
		if n == 0 {
			return skip("the driver returned no devices for the shared allocations")
		}
		return f.outcome("both allocations of the shared device returned with their share IDs")
	})
	for _, c := range sharedClaims {
		r.sched.release(ctx, c)
	}
}

// noDevicesNote notes claims for which the driver returned no devices.
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
		var empty []string
		for _, c := range r.mainClaims {
			if checkDevicesMatch(&f, r.cfg.DriverName, c, r.mainResp.Claims[string(c.UID)]) {
				empty = append(empty, c.Name)
			}
		}
		return f.outcome("devices match the allocation%s", noDevicesNote(empty))
	})
	r.check(ctx, "prepare.request-names", func(ctx context.Context) outcome {
		if r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		claim, resp, why := r.twoRequests(ctx)
		if why != "" {
			return skip("%s", why)
		}
		var f failures
		res := resp.Claims[string(claim.UID)]
		if len(res.GetDevices()) == 0 {
			return pass("the driver returns no devices, so there are no request names to match%s", noDevicesNote([]string{claim.Name}))
		}
		checkRequestNames(&f, r.cfg.DriverName, claim, res)
		var on []string
		for _, a := range ownResults(r.cfg.DriverName, claim) {
			on = append(on, fmt.Sprintf("%s on %s", a.Request, devRef{a.Pool, a.Device}))
		}
		return f.outcome("request names match in claim %s (%s)", claim.Name, strings.Join(on, ", "))
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

// twoRequests returns a prepared claim with two requests of the driver,
// so that request names matter: the first main claim when it has two,
// else a claim of its own (two devices, or two shares of one shared
// device), prepared and unprepared here. The reason is set when no such
// claim can be allocated.
func (r *runner) twoRequests(ctx context.Context) (*resourceapi.ResourceClaim, *drapbv1.NodePrepareResourcesResponse, string) {
	if main := r.mainClaims[0]; len(main.Spec.Devices.Requests) > 1 {
		return main, r.mainResp, ""
	}
	claim, err := r.sched.allocated(ctx, "names", claimSpec(exactRequest("first", r.class, 1), exactRequest("second", r.class, 1)), nil)
	var whyNot []string
	if err != nil {
		whyNot = append(whyNot, fmt.Sprintf("two devices: %v", err))
		for _, dev := range r.devices {
			d := r.deviceObj[dev]
			if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
				continue
			}
			capacity, why := shareOfTwo(d)
			if why != "" {
				whyNot = append(whyNot, fmt.Sprintf("shared device %s: %s", dev, why))
				continue
			}
			claim, err = r.sched.allocated(ctx, "names", claimSpec(withCapacity(exactRequest("first", r.class, 1), capacity), withCapacity(exactRequest("second", r.class, 1), capacity)), &dev)
			if err == nil {
				break
			}
			whyNot = append(whyNot, fmt.Sprintf("two shares of %s: %v", dev, err))
		}
	}
	if claim == nil {
		return nil, nil, fmt.Sprintf("needs a claim with two requests (the main claims have one each) and the allocator finds none: %s", strings.Join(whyNot, "; "))
	}
	defer r.sched.release(ctx, claim)
	resp, err := r.prepare(ctx, claim)
	if err != nil {
		return nil, nil, fmt.Sprintf("NodePrepareResources for claim %s with two requests failed (see the other prepare checks): %v", claim.Name, err)
	}
	_, _ = r.unprepare(ctx, claim)
	if res := resp.Claims[string(claim.UID)]; res == nil || res.Error != "" {
		return nil, nil, fmt.Sprintf("NodePrepareResources for claim %s with two requests failed (see the other prepare checks): %s", claim.Name, prepErr(res))
	}
	return claim, resp, ""
}
