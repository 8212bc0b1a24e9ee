package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// setupMainUnprepared unprepares the main claims in one call. Their
// devices are free for later checks from then on (the claim objects stay
// until the end, so that unprepare.idempotent does not also test
// unprepare after deletion).
func (r *runner) setupMainUnprepared(ctx context.Context) error {
	m := &r.main
	resp, err := r.unprepare(ctx, m.claims...)
	m.unprepared = true
	for _, c := range m.claims {
		r.sched.forget(c)
	}
	if err != nil {
		return broken("NodeUnprepareResources for %d claims failed: %v", len(m.claims), err)
	}
	m.uresp = resp
	var f failures
	checkResultKeys(&f, "NodeUnprepareResources", m.claims, resp.Claims, unprepErr)
	if len(f) > 0 {
		return broken("%s", f.outcome("").msg)
	}
	return nil
}

func (r *runner) checkMainUnprepared(ctx context.Context) outcome {
	if o := r.judge(ctx, fxMainUnprepared); o != nil {
		return *o
	}
	return pass("%d claims unprepared in one call", len(r.main.claims))
}

func (r *runner) checkCleanup(ctx context.Context) outcome {
	if !r.canReadCDI() {
		return skip("no CDI folders configured (Config.CDIDirs or Config.ReadCDI)")
	}
	made := created(r.main.cdiBefore, r.main.cdiPrepared)
	devs, files := r.leftover(ctx, made)
	if len(devs) > 0 {
		return fail("CDI devices prepare defined are still defined after unprepare: %s; remove what prepare created (a per-claim spec file, or the claim's entries in a spec file shared with others)", strings.Join(devs, ", "))
	}
	return pass("the %d CDI devices prepare defined are gone%s", len(made.devices), keptFilesNote(files))
}

// keptFilesNote notes spec files prepare created that are still there
// but define none of the claim's devices (e.g. a spec file the driver
// keeps for all claims): nothing a runtime would apply.
func keptFilesNote(files []string) string {
	if len(files) == 0 {
		return ""
	}
	return fmt.Sprintf(" (files prepare created that remain, defining none of them: %s)", strings.Join(files, ", "))
}

func (r *runner) checkUnprepareIdempotent(ctx context.Context) outcome {
	var f failures
	for i := 0; i < r.cfg.Repeat; i++ {
		resp, err := r.unprepare(ctx, r.main.claims...)
		if err != nil {
			f.add("repeat %d: NodeUnprepareResources failed: %v", i+1, err)
			continue
		}
		checkResultKeys(&f, fmt.Sprintf("repeat %d: NodeUnprepareResources", i+1), r.main.claims, resp.Claims, unprepErr)
	}
	return f.outcome("%d repeats succeeded", r.cfg.Repeat)
}

func (r *runner) checkUnprepareUnknown(ctx context.Context) outcome {
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
}

func (r *runner) checkUnprepareAfterDelete(ctx context.Context) outcome {
	claim, err := r.sched.allocated(ctx, "deleted", claimSpec(exactRequest("dev", r.class, 1)), nil)
	if err != nil {
		return skip("no free device: %v", err)
	}
	defer r.sched.release(ctx, claim)
	before := r.snapshotCDI(ctx)
	resp, err := r.prepare(ctx, claim)
	if err != nil {
		return skip("preparing the claim failed (see the prepare checks): %v", err)
	}
	if res := resp.Claims[string(claim.UID)]; res == nil || res.Error != "" {
		return skip("preparing the claim failed (see the prepare checks): %s", prepErr(res))
	}
	made := created(before, r.snapshotCDI(ctx))
	if err := r.deleteClaim(ctx, claim); err != nil {
		return skip("%v", err)
	}
	uresp, err := r.unprepare(ctx, claim)
	if err != nil {
		return fail("NodeUnprepareResources after the claim was deleted failed: %v; keep what unprepare needs locally, the claim may be gone", err)
	}
	var f failures
	checkResultKeys(&f, "NodeUnprepareResources", []*resourceapi.ResourceClaim{claim}, uresp.Claims, unprepErr)
	if devs, _ := r.leftover(ctx, made); len(devs) > 0 {
		f.add("CDI devices prepare defined are still defined: %s", strings.Join(devs, ", "))
	}
	return f.outcome("unprepared after deletion")
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
