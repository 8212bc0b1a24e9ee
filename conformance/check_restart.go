package conformance

import (
	"context"
	"fmt"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// restarted is the state of the restart fixture: two claims prepared
// before the driver was killed. One is prepared again after the restart,
// the other only unprepared, so that a driver which forgot it cannot hide
// that by preparing it anew.
type restarted struct {
	again, only *resourceapi.ResourceClaim
	before      map[*resourceapi.ResourceClaim]*prepared
}

type prepared struct {
	resp  *drapbv1.NodePrepareResourcesResponse
	files []string
}

// setupRestart prepares claims, kills the driver without a chance to
// clean up, restarts it and registers it again as the kubelet does.
func (r *runner) setupRestart(ctx context.Context) error {
	if !r.canRestart() {
		return unable("needs a way to restart the driver: Config.StartCommand (the suite starts it) or Config.RestartDriver / RestartCommand (e.g. for a DaemonSet pod)")
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
		rs.before[c].files = created(snap, r.snapshotCDI(ctx))
		if i == 0 {
			rs.again = c
		} else {
			rs.only = c
		}
	}
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
	return pass("same answer after restart")
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
		if left := r.leftover(ctx, rs.before[rs.only].files); len(left) > 0 {
			f.add("files prepare created before the restart are still there after unprepare: %q; the driver forgot the claim across the restart (persist prepared claims)", left)
		}
	}
	if left := r.leftover(ctx, rs.before[rs.again].files); len(left) > 0 {
		f.add("files of the claim prepared again after the restart are still there after unprepare: %q", left)
	}
	return f.outcome("unprepared and cleaned up after restart")
}
