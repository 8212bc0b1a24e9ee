package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

const defaultHealthTimeout = 30 * time.Second

type healthMsg struct {
	at   time.Time
	resp *drahealthv1.NodeWatchResourcesResponse
	err  error
}

func (r *runner) healthChecks(ctx context.Context) {
	var service string
	if r.info != nil {
		service = firstKnown(r.info.SupportedVersions, healthServices)
	}
	why := ""
	switch {
	case r.conn == nil:
		why = noNode
	case service == "":
		why = "the driver does not advertise a health service"
	}
	var msgs chan healthMsg
	cancel := func() {}
	defer func() { cancel() }()
	var first []healthMsg
	silent := false // the stream stayed open but sent nothing for 10 s
	r.check(ctx, "health.initial-report", func(ctx context.Context) outcome {
		if why != "" {
			return skip("%s", why)
		}
		sctx, c := context.WithCancel(ctx)
		cancel = c
		stream, err := healthClient(r.conn, service).NodeWatchResources(sctx, &drahealthv1.NodeWatchResourcesRequest{})
		if err != nil {
			return fail("NodeWatchResources over %s: %v", service, err)
		}
		msgs = make(chan healthMsg, 100)
		go func() {
			for {
				resp, err := stream.Recv()
				select {
				case msgs <- healthMsg{time.Now(), resp, err}:
				case <-sctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		// The first report, and whatever follows within a second
		// (drivers may split the initial report by health source).
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		for {
			select {
			case m := <-msgs:
				if m.err != nil {
					if status.Code(m.err) == codes.Unimplemented {
						why = "the driver answers NodeWatchResources with Unimplemented: it does not report health (allowed)"
						return skip("%s", why)
					}
					if len(first) == 0 {
						return fail("NodeWatchResources over %s ended before the first report: %v", service, m.err)
					}
					return r.judgeInitial(first)
				}
				first = append(first, m)
				if len(first) == 1 {
					timer.Reset(time.Second)
				}
			case <-timer.C:
				if len(first) == 0 {
					// Not a kubelet breakage (it shows the devices as
					// Unknown until a report comes): health.coverage
					// warns about it.
					silent = true
					return skip("no health report within 10 s of NodeWatchResources over %s: nothing to judge (see health.coverage)", service)
				}
				return r.judgeInitial(first)
			}
		}
	})
	r.check(ctx, "health.coverage", func(ctx context.Context) outcome {
		if silent {
			return fail("no health report within 10 s of opening the stream; send an initial report covering every device at once (until then the kubelet shows them as Unknown)")
		}
		if len(first) == 0 {
			return skip("needs an initial report (see health.initial-report)")
		}
		seen := map[devRef]bool{}
		for _, m := range first {
			for _, d := range m.resp.GetDevices() {
				seen[devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}] = true
			}
		}
		var missing []string
		for _, dev := range r.devices {
			if !seen[dev] {
				missing = append(missing, dev.String())
			}
		}
		if len(missing) > 0 {
			return fail("the initial reports do not cover %d of %d published devices: %s; report every device at once (the kubelet shows the others as Unknown)", len(missing), len(r.devices), strings.Join(limit(missing, 10), ", "))
		}
		return pass("all %d published devices reported", len(r.devices))
	})
	r.check(ctx, "health.refresh", func(ctx context.Context) outcome {
		if len(first) == 0 {
			return skip("needs an initial report (see health.initial-report)")
		}
		// Deadline per device: its last report plus its timeout.
		deadline := map[devRef]time.Time{}
		maxTimeout := time.Duration(0)
		for _, m := range first {
			for _, d := range m.resp.GetDevices() {
				t := time.Duration(d.HealthCheckTimeoutSeconds) * time.Second
				if t <= 0 {
					t = defaultHealthTimeout
				}
				maxTimeout = max(maxTimeout, t)
				deadline[devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}] = m.at.Add(t)
			}
		}
		if len(deadline) == 0 {
			return skip("the initial reports name no device: nothing to refresh (see health.coverage)")
		}
		wait := maxTimeout + 5*time.Second
		if r.cfg.HealthWait > 0 {
			wait = r.cfg.HealthWait
		} else if wait > 2*time.Minute {
			wait = 2 * time.Minute
		}
		end := time.Now().Add(wait)
		refreshed := map[devRef]bool{}
		late := map[devRef]bool{}
		for len(refreshed)+len(late) < len(deadline) {
			select {
			case m := <-msgs:
				if m.err != nil {
					return fail("the health stream ended: %v; keep it open until the kubelet cancels it", m.err)
				}
				for _, d := range m.resp.GetDevices() {
					k := devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}
					if dl, ok := deadline[k]; ok && !refreshed[k] && !late[k] {
						if m.at.After(dl) {
							late[k] = true
						} else {
							refreshed[k] = true
						}
					}
				}
			case <-time.After(time.Until(end)):
				var missing []string
				for k := range deadline {
					if !refreshed[k] {
						missing = append(missing, k.String())
					}
				}
				sort.Strings(missing)
				return fail("%d devices were not reported again within their health check timeout (waited %s): %s; re-send reports before the timeout even when nothing changed", len(missing), wait.Round(time.Second), strings.Join(limit(missing, 10), ", "))
			case <-ctx.Done():
				return skip("run canceled")
			}
		}
		if len(late) > 0 {
			var l []string
			for k := range late {
				l = append(l, k.String())
			}
			sort.Strings(l)
			return fail("%d devices were reported again only after their health check timeout: %s", len(l), strings.Join(limit(l, 10), ", "))
		}
		return pass("%d devices refreshed within their timeout", len(refreshed))
	})
}

func (r *runner) judgeInitial(msgs []healthMsg) outcome {
	var f failures
	n := 0
	for _, m := range msgs {
		for _, d := range m.resp.GetDevices() {
			n++
			k := devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}
			if _, ok := r.deviceObj[k]; !ok {
				f.add("the report names device %s, which the driver does not publish for this node", k)
			}
			if _, ok := drahealthv1.HealthStatus_name[int32(d.Health)]; !ok {
				f.add("device %s has health %d, which is not UNKNOWN, HEALTHY or UNHEALTHY", k, d.Health)
			}
			if d.HealthCheckTimeoutSeconds < 0 {
				f.add("device %s has a negative health_check_timeout_seconds %d", k, d.HealthCheckTimeoutSeconds)
			}
		}
	}
	if n == 0 {
		return f.outcome("%d reports naming no device (nothing the kubelet could misattribute; see health.coverage)", len(msgs))
	}
	return f.outcome("%d device entries in %d reports, all published devices", n, len(msgs))
}

func limit(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... (%d more)", len(s)-n))
	}
	return s
}

// robust runs one robustness probe and then checks the driver is alive.
func (r *runner) robust(ctx context.Context, id string, probe func(ctx context.Context) failures) {
	r.check(ctx, id, func(ctx context.Context) outcome {
		if r.node == nil {
			return skip("%s", noNode)
		}
		// The runner checks after every check that the driver still
		// serves; probes check it after each call to name the call.
		return probe(ctx).outcome("no crash; the driver still serves")
	})
}

func (r *runner) robustnessChecks(ctx context.Context) {
	r.robust(ctx, "robust.empty-request", func(ctx context.Context) failures {
		var f failures
		resp, err := r.prepare(ctx)
		if err == nil && len(resp.Claims) > 0 {
			f.add("NodePrepareResources with no claims answered %d claims", len(resp.Claims))
		}
		if ok, why := r.alive(ctx); !ok {
			return append(f, "after NodePrepareResources with no claims: "+why)
		}
		uresp, err := r.unprepare(ctx)
		if err == nil && len(uresp.Claims) > 0 {
			f.add("NodeUnprepareResources with no claims answered %d claims", len(uresp.Claims))
		}
		return f
	})
	r.robust(ctx, "robust.duplicate-uids", func(ctx context.Context) failures {
		var f failures
		claim, err := r.sched.allocated(ctx, "dupuid", claimSpec(exactRequest("dev", r.class, 1)), nil)
		if err != nil {
			return f // nothing to probe with; alive check still runs
		}
		defer r.sched.release(ctx, claim)
		resp, err := r.prepare(ctx, claim, claim)
		if err == nil {
			if res := resp.Claims[string(claim.UID)]; res == nil {
				f.add("NodePrepareResources naming claim %s twice has no result for it", claim.Name)
			}
		}
		if ok, why := r.alive(ctx); !ok {
			return append(f, "after NodePrepareResources naming a claim twice: "+why)
		}
		_, _ = r.unprepare(ctx, claim, claim)
		_, _ = r.unprepare(ctx, claim)
		return f
	})
	r.robust(ctx, "robust.unallocated-claim", func(ctx context.Context) failures {
		var f failures
		claim, err := r.sched.newClaim(ctx, "unalloc", claimSpec(exactRequest("dev", r.class, 1)))
		if err != nil {
			f.add("%v", err)
			return f
		}
		defer r.sched.release(ctx, claim)
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
	r.robust(ctx, "robust.other-driver", func(ctx context.Context) failures {
		var f failures
		probe := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: r.ns, UID: uuid.NewUUID()}, Spec: claimSpec(exactRequest("mine", r.class, 1))}
		alloc, err := r.sched.allocate(ctx, probe, nil)
		if err != nil || alloc == nil {
			return f
		}
		spec := claimSpec(exactRequest("mine", r.class, 1), exactRequest("theirs", r.class, 1))
		claim, err := r.sched.newClaim(ctx, "other", spec)
		if err != nil {
			f.add("%v", err)
			return f
		}
		defer r.sched.release(ctx, claim)
		theirs := resourceapi.DeviceRequestAllocationResult{Request: "theirs", Driver: "other.conformance.invalid", Pool: "other-pool", Device: "other-device"}
		alloc.Devices.Results = append(alloc.Devices.Results, theirs)
		claim, err = r.sched.commit(ctx, claim, alloc)
		if err != nil {
			f.add("%v", err)
			return f
		}
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
		if ok, _ := r.alive(ctx); ok {
			_, _ = r.unprepare(ctx, claim)
		}
		return f
	})
	r.robust(ctx, "robust.garbage-names", func(ctx context.Context) failures {
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
			if ok, why := r.alive(ctx); !ok {
				return append(f, fmt.Sprintf("after NodePrepareResources for claim %q/%q uid %q: %s", g.Namespace, g.Name, g.Uid, why))
			}
			cctx, cancel = r.callContext(ctx, r.cfg.CallTimeout)
			_, _ = r.node.NodeUnprepareResources(cctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{g}})
			cancel()
			if ok, why := r.alive(ctx); !ok {
				return append(f, fmt.Sprintf("after NodeUnprepareResources for claim %q/%q uid %q: %s", g.Namespace, g.Name, g.Uid, why))
			}
		}
		return f
	})
	r.check(ctx, "robust.still-serving", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		claim, err := r.sched.allocated(ctx, "final", claimSpec(exactRequest("dev", r.class, 1)), nil)
		if err != nil {
			return skip("no free device: %v", err)
		}
		defer r.sched.release(ctx, claim)
		_, f := r.cycle(ctx, r.node, claim)
		return f.outcome("a fresh claim prepares and unprepares")
	})
}
