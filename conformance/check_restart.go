package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/drakit/drakit/internal/slicepool"
)

// restarted is the state of the restart fixture: two claims prepared
// before the driver was killed. One is prepared again after the restart,
// the other only unprepared, so that a driver which forgot it cannot hide
// that by preparing it anew.
type restarted struct {
	again, only *resourceapi.ResourceClaim
	before      map[*resourceapi.ResourceClaim]*prepared
	// published are the devices the driver published just before it
	// was killed.
	published []devRef
	// registered is when the restarted driver registered again.
	registered time.Time
}

type prepared struct {
	resp *drapbv1.NodePrepareResourcesResponse
	made cdiMade
	// edits is what each CDI ID did to a container before the restart
	// (nil when the suite cannot read the CDI specs).
	edits map[string]string
}

// setupRestart prepares claims, kills the driver without a chance to
// clean up, restarts it and registers it again as the kubelet does.
func (r *runner) setupRestart(ctx context.Context) error {
	if !r.canRestart() {
		return unable("needs a way to restart the driver: Config.StartCommand (the suite starts it; drakit conformance: the driver command after --) or Config.RestartDriver / RestartCommand (--restart-command, e.g. for a DaemonSet pod)")
	}
	rs := &r.restart
	rs.before = map[*resourceapi.ResourceClaim]*prepared{}
	r.cleanups = append(r.cleanups, func(ctx context.Context) {
		for c := range rs.before {
			r.sched.release(ctx, c)
		}
	})
	for i := 0; i < 2; i++ {
		c, err := r.sched.allocated(ctx, "restart", claimSpec(exactRequest("dev", r.class, 1)), nil)
		if err != nil && i == 0 {
			return unable("no free device: %v", err)
		}
		if err != nil {
			break // one device: the claim is prepared again and unprepared
		}
		snap := r.snapshotCDI(ctx)
		resp, err := r.prepare(ctx, c)
		rs.before[c] = &prepared{resp: resp}
		if err != nil {
			return unable("preparing a claim failed (see the prepare checks): %v", err)
		}
		if res := resp.Claims[string(c.UID)]; res == nil || res.Error != "" {
			return unable("preparing a claim failed (see the prepare checks): %s", prepErr(res))
		}
		rs.before[c].made = created(snap, r.snapshotCDI(ctx))
		if r.canReadCDI() {
			if cache, _, err := r.cdiCache(ctx); err == nil {
				rs.before[c].edits = editsByID(cache, resp)
			}
		}
		if i == 0 {
			rs.again = c
		} else {
			rs.only = c
		}
	}
	if slices, err := r.listSlices(ctx); err == nil {
		rs.published = r.publishedIn(slices)
	}
	gens := r.generations()
	if err := r.restartDriver(ctx); err != nil {
		r.gone = fmt.Errorf("%w: %v", errDriverGone, err)
		r.report.Aborted = r.gone.Error() + r.logLines()
		return broken("%v%s", err, r.logLines())
	}
	if err := r.register(ctx); err != nil {
		r.gone = fmt.Errorf("%w: it does not register again after kill -9 and restart: %v", errDriverGone, err)
		r.report.Aborted = r.gone.Error() + r.logLines()
		return broken("after kill -9 and restart: %v%s", err, r.logLines())
	}
	rs.registered = r.registered
	// From now on the suite allocates from what the new process
	// publishes, as the scheduler would.
	r.rereadSlices(ctx, gens)
	return nil
}

func (r *runner) checkReregister(ctx context.Context) outcome {
	if o := r.judge(ctx, fxRestart); o != nil {
		return *o
	}
	return pass("registered again at %s", r.regSocket)
}

func (r *runner) checkStillPrepared(ctx context.Context) outcome {
	rs := &r.restart
	resp, err := r.prepare(ctx, rs.again)
	if err != nil {
		return fail("NodePrepareResources after restart failed: %v", err)
	}
	if diff := cmp.Diff(normalize(rs.before[rs.again].resp), normalize(resp)); diff != "" {
		return fail("prepare after restart answered differently (-before +after):\n%s\nPersist prepared claims (a checkpoint) and answer from it", diff)
	}
	before := rs.before[rs.again].edits
	if before == nil {
		return pass("same answer after restart (CDI specs not readable: what the IDs inject not compared)")
	}
	cache, _, err := r.cdiCache(ctx)
	if err != nil {
		return pass("same answer after restart (CDI specs not readable now: %v)", err)
	}
	after := editsByID(cache, resp)
	var f failures
	ids := make([]string, 0, len(before))
	for id := range before {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		got, ok := after[id]
		if !ok {
			f.add("CDI ID %s no longer resolves after the restart", id)
			continue
		}
		if diff := cmp.Diff(before[id], got); diff != "" {
			f.add("CDI ID %s injects other edits after the restart (-before +after):\n%s", id, diff)
		}
	}
	if len(f) > 0 {
		f.add("a running container keeps what it got before the restart, so the same ID must keep meaning the same edits: rewrite specs from the checkpoint, not from a new choice")
	}
	return f.outcome("same answer after restart, and its %d CDI IDs inject the same edits", len(ids))
}

// publishedIn returns the relevant devices of the newest complete
// generation of each pool in slices.
func (r *runner) publishedIn(slices []*resourceapi.ResourceSlice) []devRef {
	var out []devRef
	for _, p := range slicepool.Group(slices) {
		for _, sl := range p.Slices {
			for i := range sl.Spec.Devices {
				if r.deviceRelevant(sl, &sl.Spec.Devices[i]) {
					out = append(out, devRef{sl.Spec.Pool.Name, sl.Spec.Devices[i].Name})
				}
			}
		}
	}
	return out
}

// restartSettle is how long after the restarted driver registered the
// suite watches its slices: it republishes within about a second
// (kubeletplugin's slice controller waits one before its first sync).
const restartSettle = 5 * time.Second

func (r *runner) checkDeviceNames(ctx context.Context) outcome {
	rs := &r.restart
	if len(rs.published) == 0 {
		return skip("the devices published before the restart are not known")
	}
	// Claims allocated before the restart name these devices.
	held := map[devRef]string{}
	for c := range rs.before {
		for _, a := range ownResults(r.cfg.DriverName, c) {
			held[devRef{a.Pool, a.Device}] = c.Name
		}
	}
	// Watch until the settle time has passed: a driver that renames
	// its devices does so when it republishes, a moment after it
	// registered; devices a dynamic inventory withdrew get the publish
	// grace to come back.
	var missing []devRef
	end := rs.registered.Add(restartSettle)
	for {
		slices, err := r.listSlices(ctx)
		if err != nil {
			return skip("%v", err)
		}
		now := map[devRef]bool{}
		for _, d := range r.publishedIn(slices) {
			now[d] = true
		}
		missing = missing[:0]
		for _, d := range rs.published {
			if !now[d] {
				missing = append(missing, d)
			}
		}
		if time.Now().After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return skip("run canceled")
		case <-time.After(250 * time.Millisecond):
		}
	}
	missing = r.publishedSoon(ctx, missing)
	if len(missing) == 0 {
		return pass("the %d devices published before the restart are published under the same names", len(rs.published))
	}
	var f failures
	var others []string
	for _, d := range missing {
		if claim, ok := held[d]; ok {
			f.add("device %s, allocated to claim %s before the restart, is no longer published", d, claim)
		} else {
			others = append(others, d.String())
		}
	}
	if len(f) > 0 {
		f.add("claims name devices by pool and name: publish the same names after a restart (derive them from the hardware, not from the process), or the scheduler's allocations point at devices that no longer exist; also gone: %d others", len(others))
		return f.outcome("")
	}
	return pass("devices allocated before the restart are still published; %d other devices published before are not now (a dynamic inventory?): %s", len(others), strings.Join(limit(others, 10), ", "))
}

func (r *runner) checkRestartUnprepare(ctx context.Context) outcome {
	rs := &r.restart
	claims := []*resourceapi.ResourceClaim{rs.again}
	if rs.only != nil {
		claims = append(claims, rs.only)
	}
	resp, err := r.unprepare(ctx, claims...)
	for _, c := range claims {
		r.sched.forget(c) // their devices are free for later checks
	}
	if err != nil {
		return fail("NodeUnprepareResources after restart failed: %v", err)
	}
	var f failures
	checkResultKeys(&f, "NodeUnprepareResources", claims, resp.Claims, unprepErr)
	// With only one free device, a driver that forgot the claim may
	// hide it by preparing it again; two claims close that gap.
	if rs.only != nil {
		if left, _ := r.leftover(ctx, rs.before[rs.only].made); len(left) > 0 {
			f.add("CDI devices prepare defined before the restart are still defined after unprepare: %s; the driver forgot the claim across the restart (persist prepared claims)", strings.Join(left, ", "))
		}
	}
	if left, _ := r.leftover(ctx, rs.before[rs.again].made); len(left) > 0 {
		f.add("CDI devices of the claim prepared again after the restart are still defined after unprepare: %s", strings.Join(left, ", "))
	}
	return f.outcome("unprepared and cleaned up after restart")
}
