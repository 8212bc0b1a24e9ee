package conformance

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

func (r *runner) unprepareChecks(ctx context.Context) {
	notPrepared := "needs the main claims prepared (see prepare.result-per-claim)"
	unprepared := false
	r.check(ctx, "unprepare.result-per-claim", func(ctx context.Context) outcome {
		if len(r.mainClaims) == 0 || r.node == nil {
			return skip("%s", notPrepared)
		}
		resp, err := r.unprepare(ctx, r.mainClaims...)
		if err != nil {
			return fail("NodeUnprepareResources for %d claims failed: %v", len(r.mainClaims), err)
		}
		unprepared = true
		var f failures
		checkResultKeys(&f, "NodeUnprepareResources", r.mainClaims, resp.Claims, unprepErr)
		return f.outcome("%d claims unprepared in one call", len(r.mainClaims))
	})
	r.check(ctx, "unprepare.cleanup", func(ctx context.Context) outcome {
		if !unprepared || r.mainResp == nil {
			return skip("%s", notPrepared)
		}
		if len(r.cfg.CDIDirs) == 0 {
			return skip("no CDI folders configured")
		}
		made := created(r.cdiBefore, r.cdiAfterPrepare)
		if left := leftover(made); len(left) > 0 {
			return fail("files prepare created are still there after unprepare: %q; remove what prepare created (e.g. per-claim CDI specs)", left)
		}
		return pass("%d files prepare created are gone", len(made))
	})
	r.check(ctx, "unprepare.idempotent", func(ctx context.Context) outcome {
		if !unprepared {
			return skip("%s", notPrepared)
		}
		var f failures
		for i := 0; i < r.cfg.Repeat; i++ {
			resp, err := r.unprepare(ctx, r.mainClaims...)
			if err != nil {
				f.add("repeat %d: NodeUnprepareResources failed: %v", i+1, err)
				continue
			}
			checkResultKeys(&f, fmt.Sprintf("repeat %d: NodeUnprepareResources", i+1), r.mainClaims, resp.Claims, unprepErr)
		}
		return f.outcome("%d repeats succeeded", r.cfg.Repeat)
	})
	for _, c := range r.mainClaims {
		r.sched.release(ctx, c)
	}
	r.check(ctx, "unprepare.unknown-claim", func(ctx context.Context) outcome {
		if r.node == nil {
			return skip("%s", noNode)
		}
		ghost := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "never-prepared", UID: uuid.NewUUID()}}
		resp, err := r.unprepare(ctx, ghost)
		if err != nil {
			return fail("NodeUnprepareResources for a claim that was never prepared failed: %v; treat an unknown claim as already unprepared", err)
		}
		var f failures
		checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{ghost}, resp.Claims, unprepErr)
		if len(f) > 0 {
			f.add("treat an unknown claim as already unprepared")
		}
		return f.outcome("succeeded")
	})
	r.check(ctx, "unprepare.after-delete", func(ctx context.Context) outcome {
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		claim, err := r.sched.allocated(ctx, "deleted", claimSpec(exactRequest("dev", r.class, 1)), nil)
		if err != nil {
			return skip("no free device: %v", err)
		}
		defer r.sched.release(ctx, claim)
		before := snapshot(r.cfg.CDIDirs)
		resp, err := r.prepare(ctx, claim)
		if err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
			return skip("preparing the claim failed (see prepare checks): %v %s", err, resp.GetClaims()[string(claim.UID)].GetError())
		}
		made := created(before, snapshot(r.cfg.CDIDirs))
		if err := r.deleteClaim(ctx, claim); err != nil {
			return fail("%v", err)
		}
		uresp, err := r.unprepare(ctx, claim)
		if err != nil {
			return fail("NodeUnprepareResources after the claim was deleted failed: %v; keep what unprepare needs locally, the claim may be gone", err)
		}
		var f failures
		checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{claim}, uresp.Claims, unprepErr)
		if left := leftover(made); len(left) > 0 {
			f.add("files prepare created are still there: %q", left)
		}
		return f.outcome("unprepared after deletion")
	})
}

// deleteClaim deletes a claim and waits until it is gone.
func (r *runner) deleteClaim(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	cl := r.cfg.Client.ResourceV1().ResourceClaims(claim.Namespace)
	if err := cl.Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete claim %s: %w", claim.Name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cl.Get(ctx, claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("claim %s not gone 30 s after deletion (finalizers?)", claim.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *runner) restartChecks(ctx context.Context) {
	noStart := "needs Config.StartCommand (the suite must start the driver to restart it)"
	// Two claims: one is prepared again after the restart, the other is
	// only unprepared, so that a driver which forgot it cannot hide that
	// by preparing it anew.
	var again, only *resourceapi.ResourceClaim
	var before map[*resourceapi.ResourceClaim]*prepared
	defer func() {
		for c := range before {
			r.sched.release(ctx, c)
		}
	}()
	r.check(ctx, "restart.reregister", func(ctx context.Context) outcome {
		if len(r.cfg.StartCommand) == 0 || r.proc == nil {
			return skip("%s", noStart)
		}
		if msg := r.ready(); msg != "" {
			return skip("%s", msg)
		}
		before = map[*resourceapi.ResourceClaim]*prepared{}
		for i := 0; i < 2; i++ {
			c, err := r.sched.allocated(ctx, "restart", claimSpec(exactRequest("dev", r.class, 1)), nil)
			if err != nil && i == 0 {
				return skip("no free device: %v", err)
			}
			if err != nil {
				break // one device: the claim is prepared again and unprepared
			}
			snap := snapshot(r.cfg.CDIDirs)
			resp, err := r.prepare(ctx, c)
			before[c] = &prepared{resp: resp, files: nil}
			if err != nil || resp.Claims[string(c.UID)].GetError() != "" {
				before = nil
				return skip("preparing a claim failed (see prepare checks): %v %s", err, resp.GetClaims()[string(c.UID)].GetError())
			}
			before[c].files = created(snap, snapshot(r.cfg.CDIDirs))
			if i == 0 {
				again = c
			} else {
				only = c
			}
		}
		r.stopDriver(syscall.SIGKILL)
		if err := r.startDriver(); err != nil {
			return fail("%v", err)
		}
		if err := r.connect(ctx); err != nil {
			return fail("after kill -9 and restart: %v", err)
		}
		if err := notifyRegistration(ctx, r.regSocket, true, ""); err != nil {
			return fail("after restart: %v", err)
		}
		return pass("registered again at %s", r.regSocket)
	})
	r.check(ctx, "restart.still-prepared", func(ctx context.Context) outcome {
		if again == nil {
			return skip("needs a restart (see restart.reregister)")
		}
		resp, err := r.prepare(ctx, again)
		if err != nil {
			return fail("NodePrepareResources after restart failed: %v", err)
		}
		if diff := cmp.Diff(normalize(before[again].resp), normalize(resp)); diff != "" {
			return fail("prepare after restart answered differently (-before +after):\n%s\nPersist prepared claims (a checkpoint) and answer from it", diff)
		}
		return pass("same answer after restart")
	})
	r.check(ctx, "restart.unprepare", func(ctx context.Context) outcome {
		if again == nil {
			return skip("needs a restart (see restart.reregister)")
		}
		claims := []*resourceapi.ResourceClaim{again}
		if only != nil {
			claims = append(claims, only)
		}
		resp, err := r.unprepare(ctx, claims...)
		if err != nil {
			return fail("NodeUnprepareResources after restart failed: %v", err)
		}
		var f failures
		checkResultKeys(&f, "NodeUnprepareResources", claims, resp.Claims, unprepErr)
		// With only one free device, a driver that forgot the claim may
		// hide it by preparing it again; two claims close that gap.
		if only != nil {
			if left := leftover(before[only].files); len(left) > 0 {
				f.add("files prepare created before the restart are still there after unprepare: %q; the driver forgot the claim across the restart (persist prepared claims)", left)
			}
		}
		if left := leftover(before[again].files); len(left) > 0 {
			f.add("files of the claim prepared again after the restart are still there after unprepare: %q", left)
		}
		return f.outcome("unprepared and cleaned up after restart")
	})
}

type prepared struct {
	resp  *drapbv1.NodePrepareResourcesResponse
	files []string
}
