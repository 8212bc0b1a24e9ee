package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"

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
	// shares are claims on one device that allows multiple allocations,
	// each for an unequal share, prepared one by one before the kill
	// (restart.shares); whyNoShares says why there are none.
	shares      []*resourceapi.ResourceClaim
	shareDev    devRef
	whyNoShares string
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
		// Unprepare is idempotent: whatever the restart checks left
		// prepared goes, as the kubelet unprepares claims no pod uses.
		r.unprepareAll(ctx, rs.claims())
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
	r.prepareRestartShares(ctx)
	if slices, err := r.listSlices(ctx); err == nil {
		rs.published = r.publishedIn(slices)
	}
	before, err := r.restartDriver(ctx)
	if isHookError(err) {
		// Not the driver's failure: nothing about restarts is judged.
		// Whatever serves now serves the next checks.
		if rerr := r.register(ctx); rerr != nil {
			r.gone = fmt.Errorf("%w: %v; and no driver registers now: %v", errDriverGone, err, rerr)
			r.report.Aborted = r.gone.Error()
		} else {
			r.unprepareAll(ctx, rs.claims())
		}
		return unable("restarts not judged: %v", err)
	}
	if err != nil {
		r.gone = fmt.Errorf("%w: %v", errDriverGone, err)
		r.report.Aborted = r.gone.Error() + r.logLines()
		return broken("%v%s", err, r.logLines())
	}
	if err := r.register(ctx); err != nil {
		r.gone = fmt.Errorf("%w: it does not register again after kill -9 and restart: %v", errDriverGone, err)
		r.report.Aborted = r.gone.Error() + r.logLines()
		return broken("after kill -9 and restart: %v%s", err, r.logLines())
	}
	// From now on the suite allocates from what the new process
	// publishes, as the scheduler would, once the API server shows it.
	r.restarted(before, true)
	return nil
}

// claims returns the claims the restart fixture prepared.
func (rs *restarted) claims() []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, 0, len(rs.before))
	for c := range rs.before {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// prepareRestartShares allocates up to maxShares claims for unequal
// shares of one device that allows multiple allocations and prepares
// them one by one, as the kubelet prepares separate pods' claims, for
// restart.shares; it records why not where that is not possible.
func (r *runner) prepareRestartShares(ctx context.Context) {
	rs := &r.restart
	for _, dev := range r.devices {
		d := r.deviceObj[dev]
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			continue
		}
		capacity, _, why := shares(d, maxShares)
		if why != "" {
			rs.whyNoShares = fmt.Sprintf("device %s allows multiple allocations, but %s", dev, why)
			continue
		}
		rs.shareDev = dev
		for _, c := range capacity {
			claim, err := r.sched.allocated(ctx, "restart-share", claimSpec(withCapacity(exactRequest("dev", r.class, 1), c)), &dev)
			if err != nil {
				rs.whyNoShares = fmt.Sprintf("the structured allocator does not place another share of device %s: %v", dev, err)
				break
			}
			snap := r.snapshotCDI(ctx)
			resp, err := r.prepare(ctx, claim)
			rs.before[claim] = &prepared{resp: resp}
			if err != nil || resp.Claims[string(claim.UID)].GetError() != "" || resp.Claims[string(claim.UID)] == nil {
				rs.whyNoShares = fmt.Sprintf("preparing claim %s for a share of device %s failed (see allocation.shared)", claim.Name, dev)
				break
			}
			rs.before[claim].made = created(snap, r.snapshotCDI(ctx))
			if r.canReadCDI() {
				if cache, _, err := r.cdiCache(ctx); err == nil {
					rs.before[claim].edits = editsByID(cache, resp)
				}
			}
			rs.shares = append(rs.shares, claim)
		}
		if len(rs.shares) < 2 {
			rs.shares = nil
		}
		return
	}
	if rs.whyNoShares == "" {
		rs.whyNoShares = "no device allows multiple allocations"
	}
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
		return fail("NodePrepareResources for claim %s after the restart failed: %v%s", rs.again.Name, err, r.unpublishedNote(ctx, rs.again))
	}
	if res := resp.Claims[string(rs.again.UID)]; res == nil || res.Error != "" {
		return fail("NodePrepareResources for claim %s, prepared before the restart, fails after it: %s%s", rs.again.Name, prepErr(res), r.unpublishedNote(ctx, rs.again))
	}
	if diff := cmp.Diff(normalize(rs.before[rs.again].resp), normalize(resp)); diff != "" {
		return fail("prepare after restart answered differently (-before +after):\n%s\nPersist prepared claims (a checkpoint) and answer from it%s", diff, r.unpublishedNote(ctx, rs.again))
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

// unpublishedNote names the devices of claim that the driver's slices do
// not publish now, as a cause of a failed prepare after a restart: a
// device renamed at start (restart.device-names), not state the driver
// lost.
func (r *runner) unpublishedNote(ctx context.Context, claim *resourceapi.ResourceClaim) string {
	slices, err := r.listSlices(ctx)
	if err != nil {
		return ""
	}
	now := map[devRef]bool{}
	for _, d := range r.publishedIn(slices) {
		now[d] = true
	}
	var gone []string
	for _, a := range ownResults(r.cfg.DriverName, claim) {
		if d := (devRef{a.Pool, a.Device}); !now[d] {
			gone = append(gone, d.String())
		}
	}
	if len(gone) == 0 {
		return ""
	}
	return fmt.Sprintf("\nthe claim's device %s is no longer published by the restarted driver (see restart.device-names): a device renamed at start cannot be prepared for claims allocated before", strings.Join(gone, ", "))
}

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
	// Judge the new process's publication, once the API server shows it
	// (see republication).
	r.freshSlices(ctx, true)
	slices := r.slices
	if p := r.repub; p == nil || !p.done {
		// Not recognized (the driver exited, the run was canceled):
		// what there is now.
		var err error
		if slices, err = r.listSlices(ctx); err != nil {
			return skip("%v", err)
		}
	}
	now := map[devRef]bool{}
	for _, d := range r.publishedIn(slices) {
		now[d] = true
	}
	var missing []devRef
	for _, d := range rs.published {
		if !now[d] {
			missing = append(missing, d)
		}
	}
	note := r.republishedNote()
	if len(missing) == 0 {
		return pass("the %d devices published before the restart are published under the same names%s", len(rs.published), note)
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
		f.add("claims name devices by pool and name: publish the same names after a restart (derive them from the hardware, not from the process), or the scheduler's allocations point at devices that no longer exist; also gone: %d others%s", len(others), note)
		return f.outcome("")
	}
	return pass("devices allocated before the restart are still published; %d other devices published before are not now (a dynamic inventory?): %s%s", len(others), strings.Join(limit(others, 10), ", "), note)
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

func (r *runner) checkRestartShares(ctx context.Context) outcome {
	rs := &r.restart
	if len(rs.shares) == 0 {
		return skip("%s", rs.whyNoShares)
	}
	for _, c := range rs.shares {
		defer r.sched.forget(c) // unprepared below: the capacity is free
	}
	// One prepared again on its own, the others only unprepared: a
	// driver that forgot a share across the restart cannot hide it by
	// preparing it anew.
	again := rs.shares[1]
	var others []*resourceapi.ResourceClaim
	for _, c := range rs.shares {
		if c != again {
			others = append(others, c)
		}
	}
	var f failures
	resp, err := r.prepare(ctx, again)
	switch res := resp.GetClaims()[string(again.UID)]; {
	case err != nil:
		f.add("NodePrepareResources for claim %s (a share of device %s) after the restart failed: %v%s", again.Name, rs.shareDev, err, r.unpublishedNote(ctx, again))
	case res == nil || res.Error != "":
		f.add("NodePrepareResources for claim %s, prepared before the restart for a share of device %s, fails after it: %s%s", again.Name, rs.shareDev, prepErr(res), r.unpublishedNote(ctx, again))
	default:
		if diff := cmp.Diff(normalize(rs.before[again].resp), normalize(resp)); diff != "" {
			f.add("claim %s (a share of device %s) prepared after the restart answered differently (-before +after):\n%s", again.Name, rs.shareDev, diff)
		} else if before := rs.before[again].edits; before != nil {
			if cache, _, err := r.cdiCache(ctx); err == nil {
				after := editsByID(cache, resp)
				for id, want := range before {
					if got, ok := after[id]; !ok {
						f.add("CDI ID %s of claim %s (a share of device %s) no longer resolves after the restart", id, again.Name, rs.shareDev)
					} else if diff := cmp.Diff(want, got); diff != "" {
						f.add("CDI ID %s of claim %s (a share of device %s) injects other edits after the restart (-before +after):\n%s", id, again.Name, rs.shareDev, diff)
					}
				}
			}
		}
	}
	for _, c := range others {
		uresp, err := r.unprepare(ctx, c)
		if err != nil {
			f.add("NodeUnprepareResources for claim %s (a share of device %s) after the restart failed: %v", c.Name, rs.shareDev, err)
			continue
		}
		checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{c}, uresp.Claims, unprepErr)
		if left, _ := r.leftover(ctx, rs.before[c].made); len(left) > 0 {
			f.add("claim %s, prepared before the restart for a share of device %s and unprepared after it, left CDI devices behind: %s; the restarted driver forgot the share (record every share in the checkpoint, not one per device)", c.Name, rs.shareDev, strings.Join(left, ", "))
		}
		if now := r.snapshotCDI(ctx); now != nil {
			var lost []string
			for _, d := range rs.before[again].made.devices {
				if _, ok := now.devices[d]; !ok {
					lost = append(lost, d)
				}
			}
			if len(lost) > 0 {
				f.add("unpreparing claim %s after the restart took CDI devices of claim %s (another share of device %s, still prepared) with it: %s", c.Name, again.Name, rs.shareDev, strings.Join(lost, ", "))
			}
		}
	}
	uresp, err := r.unprepare(ctx, again)
	if err != nil {
		f.add("NodeUnprepareResources for claim %s after the restart failed: %v", again.Name, err)
	} else {
		checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{again}, uresp.Claims, unprepErr)
		if left, _ := r.leftover(ctx, rs.before[again].made); len(left) > 0 {
			f.add("claim %s (a share of device %s) unprepared after the restart left CDI devices behind: %s", again.Name, rs.shareDev, strings.Join(left, ", "))
		}
	}
	judged := ""
	if !r.canReadCDI() {
		judged = " (CDI specs not readable: cleanup not judged)"
	}
	return f.outcome("claims %s, each for a share of device %s, were prepared before the restart: %s prepared again to the same answer, the others unprepared on their own and cleaned up while it stayed, then it%s", claimNames(rs.shares), rs.shareDev, again.Name, judged)
}
