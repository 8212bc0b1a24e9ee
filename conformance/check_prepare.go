package conformance

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/drakit/drakit/internal/kubeletclient"
)

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

// mainClaims are the claims most prepare checks look at: one with two
// requests when the driver has three devices to spare (else one), and one
// with one request, prepared together in one call.
type mainClaims struct {
	claims      []*resourceapi.ResourceClaim
	resp        *drapbv1.NodePrepareResourcesResponse
	cdiBefore   *cdiState
	cdiPrepared *cdiState
	unprepared  bool
	uresp       *drapbv1.NodeUnprepareResourcesResponse
}

// setupMain allocates the main claims and prepares them in one call.
func (r *runner) setupMain(ctx context.Context) error {
	m := &r.main
	r.cleanups = append(r.cleanups, func(ctx context.Context) {
		// Left prepared when the checks that unprepare them did not
		// run (Config.Only): the kubelet unprepares a claim once no
		// pod uses it, so does the suite.
		if !m.unprepared {
			r.unprepareAll(ctx, m.claims)
		}
		for _, c := range m.claims {
			r.sched.release(ctx, c)
		}
	})
	spec := claimSpec(exactRequest("first", r.class, 1), exactRequest("second", r.class, 1))
	if r.sched.allocatable(ctx, r.class) < 3 {
		spec = claimSpec(exactRequest("first", r.class, 1))
	}
	a, err := r.sched.allocated(ctx, "main", spec, nil)
	if err != nil {
		return unable("allocate the first claim: %v", err)
	}
	m.claims = append(m.claims, a)
	if b, err := r.sched.allocated(ctx, "main", claimSpec(exactRequest("only", r.class, 1)), nil); err == nil {
		m.claims = append(m.claims, b)
	}
	m.cdiBefore = r.snapshotCDI(ctx)
	resp, err := r.prepare(ctx, m.claims...)
	if err != nil {
		return broken("NodePrepareResources for %d claims failed: %v", len(m.claims), err)
	}
	m.cdiPrepared = r.snapshotCDI(ctx)
	var f failures
	checkResultKeys(&f, "NodePrepareResources", m.claims, resp.Claims, prepErr)
	if len(f) > 0 {
		return broken("%s", f.outcome("").msg)
	}
	m.resp = resp
	return nil
}

func (r *runner) checkMainPrepared(ctx context.Context) outcome {
	if o := r.judge(ctx, fxMain); o != nil {
		return *o
	}
	return pass("%d claims prepared in one call", len(r.main.claims))
}

func (r *runner) checkDevicesMatch(context.Context) outcome {
	var f failures
	var empty []string
	for _, c := range r.main.claims {
		if checkDevicesMatch(&f, r.cfg.DriverName, c, r.main.resp.Claims[string(c.UID)]) {
			empty = append(empty, c.Name)
		}
	}
	return f.outcome("devices match the allocation%s", noDevicesNote(empty))
}

func (r *runner) checkRequestNames(ctx context.Context) outcome {
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
}

func (r *runner) checkCDIFormat(context.Context) outcome {
	ids := cdiIDs(r.main.resp)
	if len(ids) == 0 {
		return skip("the driver returned no CDI IDs")
	}
	var f failures
	checkCDIFormat(&f, ids)
	return f.outcome("%d CDI IDs well-formed", len(ids))
}

// mainCDI loads the CDI specs for the main claims' IDs, or says why not.
func (r *runner) mainCDI(ctx context.Context) (*cdi.Cache, string, []string, string) {
	ids := cdiIDs(r.main.resp)
	if len(ids) == 0 {
		return nil, "", nil, "the driver returned no CDI IDs"
	}
	if !r.canReadCDI() {
		return nil, "", nil, "no CDI folders configured (Config.CDIDirs or Config.ReadCDI)"
	}
	cache, specErrs, err := r.cdiCache(ctx)
	if err != nil {
		return nil, "", nil, err.Error()
	}
	return cache, specErrs, ids, ""
}

func (r *runner) checkCDIResolve(ctx context.Context) outcome {
	cache, specErrs, ids, why := r.mainCDI(ctx)
	if why != "" {
		return skip("%s", why)
	}
	var f failures
	checkCDIResolve(&f, cache, specErrs, r.cdiDirsShown(), ids)
	return f.outcome("%d CDI IDs resolve in %q", len(ids), r.cdiDirsShown())
}

func (r *runner) checkCDIInject(ctx context.Context) outcome {
	cache, _, ids, why := r.mainCDI(ctx)
	if why != "" {
		return skip("%s", why)
	}
	var ok []string
	for _, id := range ids {
		if cache.GetDevice(id) != nil {
			ok = append(ok, id)
		}
	}
	if len(ok) == 0 {
		return skip("no CDI ID resolves (see prepare.cdi-resolve)")
	}
	var f failures
	checkCDIInject(&f, cache, ok)
	return f.outcome("%d CDI devices injected into an OCI spec", len(ok))
}

func (r *runner) checkPrepareIdempotent(ctx context.Context) outcome {
	want := normalize(r.main.resp)
	claims := r.main.claims
	var f failures
	for i := 0; i < r.cfg.Repeat; i++ {
		resp, err := r.prepare(ctx, claims...)
		if err != nil {
			f.add("repeat %d: NodePrepareResources failed: %v", i+1, err)
			continue
		}
		if diff := cmp.Diff(want, normalize(resp)); diff != "" {
			f.add("repeat %d answered differently (-first +repeat):\n%s", i+1, diff)
		}
	}
	resp, err := r.prepare(ctx, claims[0])
	if err != nil {
		f.add("preparing the first claim alone again failed: %v", err)
	} else if diff := cmp.Diff(map[string][]string{string(claims[0].UID): want[string(claims[0].UID)]}, normalize(resp)); diff != "" {
		f.add("preparing the first claim alone again answered differently (-first +repeat):\n%s", diff)
	}
	return f.outcome("%d repeats gave the same answer", r.cfg.Repeat+1)
}

func (r *runner) checkConcurrent(ctx context.Context) outcome {
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
		return skip("needs two free devices")
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
}

func (r *runner) checkEveryDevicePrepared(context.Context) outcome {
	if !r.every.prepared || r.every.nPrepared == 0 {
		return skip("no device could be allocated (see allocation.every-device)")
	}
	return r.every.prepFail.outcome("%d devices prepared and unprepared one by one%s", r.every.nPrepared, noDevicesNote(r.every.empty))
}

func (r *runner) checkDeviceInUse(ctx context.Context) outcome {
	var res *resourceapi.DeviceRequestAllocationResult
	var owner *resourceapi.ResourceClaim
	for _, c := range r.main.claims {
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
		return skip("%v", err)
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
		return skip("write a second allocation of %s/%s: %v", res.Pool, res.Device, err)
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
}

func (r *runner) checkOtherVersion(ctx context.Context) outcome {
	var other string
	for _, s := range kubeletclient.NodeServices {
		if s != r.nodeService && kubeletclient.FirstKnown(r.info.SupportedVersions, []string{s}) != "" {
			other = s
		}
	}
	if other == "" {
		return skip("the driver advertises one node service version")
	}
	claim, err := r.sched.allocated(ctx, "version", claimSpec(exactRequest("dev", r.class, 1)), nil)
	if err != nil && r.need(ctx, fxMain) == nil && !r.main.unprepared {
		// No free device: prepare a main claim again over the other
		// version (it must give the same answer); unprepare over it is
		// not exercised, the unprepare checks need the claim.
		main := r.main.claims[0]
		resp, err := r.prepareWith(ctx, kubeletclient.NodeClient(r.conn, other), main)
		if err != nil {
			return fail("NodePrepareResources over %s: %v", other, err)
		}
		want := map[string][]string{string(main.UID): normalize(withoutShareIDs(r.main.resp))[string(main.UID)]}
		if diff := cmp.Diff(want, normalize(withoutShareIDs(resp))); diff != "" {
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
	resp, f := r.cycle(ctx, kubeletclient.NodeClient(r.conn, other), claim)
	if resp != nil {
		if diff := cmp.Diff(normalize(withoutShareIDs(first)), normalize(withoutShareIDs(resp))); diff != "" {
			f.add("%s answered differently from %s (-%s +%s):\n%s", other, r.nodeService, r.nodeService, other, diff)
		}
	}
	_, _ = r.unprepare(ctx, claim)
	return f.outcome("%s prepares and unprepares like %s", other, r.nodeService)
}

func (r *runner) checkExtraClaims(ctx context.Context) outcome {
	if len(r.cfg.ExtraClaims) == 0 {
		return skip("no extra claims configured")
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
}

// withoutShareIDs returns a copy of resp without share IDs, to compare
// answers over v1 and v1beta1 (whose Device has no share_id field).
func withoutShareIDs(resp *drapbv1.NodePrepareResourcesResponse) *drapbv1.NodePrepareResourcesResponse {
	c := &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{}}
	for uid, res := range resp.GetClaims() {
		cr := &drapbv1.NodePrepareResourceResponse{Error: res.GetError()}
		for _, d := range res.GetDevices() {
			cr.Devices = append(cr.Devices, &drapbv1.Device{RequestNames: d.RequestNames, PoolName: d.PoolName, DeviceName: d.DeviceName, CdiDeviceIds: d.CdiDeviceIds})
		}
		c.Claims[uid] = cr
	}
	return c
}

// twoRequests returns a prepared claim with two requests of the driver,
// so that request names matter: the first main claim when it has two,
// else a claim of its own (two devices, or two shares of one shared
// device), prepared and unprepared here. The reason is set when no such
// claim can be allocated.
func (r *runner) twoRequests(ctx context.Context) (*resourceapi.ResourceClaim, *drapbv1.NodePrepareResourcesResponse, string) {
	if main := r.main.claims[0]; len(main.Spec.Devices.Requests) > 1 {
		return main, r.main.resp, ""
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
			capacity, _, why := shares(d, 2)
			if why != "" {
				whyNot = append(whyNot, fmt.Sprintf("shared device %s: %s", dev, why))
				continue
			}
			claim, err = r.sched.allocated(ctx, "names", claimSpec(withCapacity(exactRequest("first", r.class, 1), capacity[0]), withCapacity(exactRequest("second", r.class, 1), capacity[1])), &dev)
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
