package conformance

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// probing runs one robustness probe. The runner checks after every check
// that the driver still serves; probes also check after each call, to
// name the call that killed it.
func (r *runner) probing(ctx context.Context, probe func(ctx context.Context) failures) outcome {
	return probe(ctx).outcome("no crash; the driver still serves")
}

func (r *runner) checkEmptyRequest(ctx context.Context) outcome {
	return r.probing(ctx, func(ctx context.Context) failures {
		var f failures
		resp, err := r.prepare(ctx)
		if err == nil && len(resp.Claims) > 0 {
			f.add("NodePrepareResources with no claims answered %d claims", len(resp.Claims))
		}
		if msg := r.servingAfter(ctx, "NodePrepareResources with no claims"); msg != "" {
			return append(f, msg)
		}
		uresp, err := r.unprepare(ctx)
		if err == nil && len(uresp.Claims) > 0 {
			f.add("NodeUnprepareResources with no claims answered %d claims", len(uresp.Claims))
		}
		return f
	})
}

func (r *runner) checkDuplicateUIDs(ctx context.Context) outcome {
	claim, err := r.sched.allocated(ctx, "dupuid", claimSpec(exactRequest("dev", r.class, 1)), nil)
	if err != nil {
		return skip("no free device to probe with: %v", err)
	}
	defer r.sched.release(ctx, claim)
	return r.probing(ctx, func(ctx context.Context) failures {
		var f failures
		// The kubelet never names a claim twice: only a crash counts.
		_, _ = r.prepare(ctx, claim, claim)
		if msg := r.servingAfter(ctx, "NodePrepareResources naming a claim twice"); msg != "" {
			return append(f, msg)
		}
		_, _ = r.unprepare(ctx, claim, claim)
		_, _ = r.unprepare(ctx, claim)
		return f
	})
}

func (r *runner) checkUnallocated(ctx context.Context) outcome {
	claim, err := r.sched.newClaim(ctx, "unalloc", claimSpec(exactRequest("dev", r.class, 1)))
	if err != nil {
		return skip("%v", err)
	}
	defer r.sched.release(ctx, claim)
	return r.probing(ctx, func(ctx context.Context) failures {
		var f failures
		resp, err := r.prepare(ctx, claim)
		if err == nil {
			res := resp.Claims[string(claim.UID)]
			if res != nil && res.Error == "" {
				f.add("NodePrepareResources reported success for claim %s, which has no allocation; answer with an error", claim.Name)
				_, _ = r.unprepare(ctx, claim)
			}
		}
		return f
	})
}

func (r *runner) checkOtherDriver(ctx context.Context) outcome {
	probe := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: r.ns, UID: uuid.NewUUID()}, Spec: claimSpec(exactRequest("mine", r.class, 1))}
	alloc, err := r.sched.allocate(ctx, probe, nil)
	if err != nil {
		return skip("no free device to probe with: %v", err)
	}
	if alloc == nil {
		return skip("no free device to probe with: the structured allocator finds no allocation")
	}
	spec := claimSpec(exactRequest("mine", r.class, 1), exactRequest("theirs", r.class, 1))
	claim, err := r.sched.newClaim(ctx, "other", spec)
	if err != nil {
		return skip("%v", err)
	}
	defer r.sched.release(ctx, claim)
	theirs := resourceapi.DeviceRequestAllocationResult{Request: "theirs", Driver: "other.conformance.invalid", Pool: "other-pool", Device: "other-device"}
	alloc.Devices.Results = append(alloc.Devices.Results, theirs)
	claim, err = r.sched.commit(ctx, claim, alloc)
	if err != nil {
		return skip("%v", err)
	}
	return r.probing(ctx, func(ctx context.Context) failures {
		var f failures
		resp, err := r.prepare(ctx, claim)
		if err == nil {
			res := resp.Claims[string(claim.UID)]
			for _, d := range res.GetDevices() {
				if d.PoolName == theirs.Pool && d.DeviceName == theirs.Device {
					f.add("claim %s: prepared device %s/%s of driver %s; prepare only allocation results whose driver is %s", claim.Name, theirs.Pool, theirs.Device, theirs.Driver, r.cfg.DriverName)
				}
			}
			if res != nil && res.Error == "" {
				checkDevicesMatch(&f, r.cfg.DriverName, claim, res)
			}
		}
		if ok, _, _ := r.alive(ctx); ok {
			_, _ = r.unprepare(ctx, claim)
		}
		return f
	})
}

func (r *runner) checkGarbageNames(ctx context.Context) outcome {
	return r.probing(ctx, func(ctx context.Context) failures {
		var f failures
		garbage := []*drapbv1.Claim{
			{},
			{Namespace: r.ns, Name: "does-not-exist", Uid: string(uuid.NewUUID())},
			{Namespace: "kube-system", Name: "../../../etc/passwd", Uid: "../../x"},
			{Namespace: "no-such-namespace", Name: strings.Repeat("x", 300), Uid: "uid-\u00fc\u0000-" + strings.Repeat("z", 200)},
		}
		for _, g := range garbage {
			cctx, cancel := r.callContext(ctx, r.cfg.CallTimeout)
			resp, err := r.node.NodePrepareResources(cctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{g}})
			cancel()
			if err == nil {
				if res := resp.Claims[g.Uid]; res != nil && res.Error == "" && len(res.Devices) > 0 {
					f.add("NodePrepareResources for a claim that does not exist (%q/%q uid %q) returned devices", g.Namespace, g.Name, g.Uid)
				}
			}
			if msg := r.servingAfter(ctx, fmt.Sprintf("NodePrepareResources for claim %q/%q uid %q", g.Namespace, g.Name, g.Uid)); msg != "" {
				return append(f, msg)
			}
			cctx, cancel = r.callContext(ctx, r.cfg.CallTimeout)
			_, _ = r.node.NodeUnprepareResources(cctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{g}})
			cancel()
			if msg := r.servingAfter(ctx, fmt.Sprintf("NodeUnprepareResources for claim %q/%q uid %q", g.Namespace, g.Name, g.Uid)); msg != "" {
				return append(f, msg)
			}
		}
		return f
	})
}

// checkLivenessProbe reports the liveness probes that ended the driver.
// It sends one more itself (the runner sends none after it), so that a
// driver that dies on the last probe is reported too.
func (r *runner) checkLivenessProbe(ctx context.Context) outcome {
	if r.node != nil {
		if ok, why, byProbe := r.alive(ctx); !ok {
			r.probeCrash(ctx, byProbe, "robust.liveness-probe's own probe", why)
		}
	}
	if r.probes == 0 {
		return skip("no liveness probe was sent (the driver never registered)")
	}
	if len(r.probeCrashes) == 0 {
		return pass("the driver answered all %d liveness probes", r.probes)
	}
	var f failures
	for _, c := range r.probeCrashes {
		f.add("%s", c)
	}
	f.add("the kubelet unprepares claims whenever its reconcile loop finds their pods gone, also claims it never prepared and right after the driver registered: unpreparing a claim the driver does not know must succeed at any time after registration")
	return f.outcome("")
}

func (r *runner) checkStillServing(ctx context.Context) outcome {
	claim, err := r.sched.allocated(ctx, "final", claimSpec(exactRequest("dev", r.class, 1)), nil)
	if err != nil {
		return skip("no free device: %v", err)
	}
	defer r.sched.release(ctx, claim)
	_, f := r.cycle(ctx, r.node, claim)
	return f.outcome("a fresh claim prepares and unprepares")
}
