package driver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	. "github.com/drakit/drakit/driver"
)

// TestLostRecord: a claim whose checkpoint record is corrupted while it is
// prepared is undone from its allocation in the API server, so that its
// devices are not leaked and never prepared twice.
func TestLostRecord(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// apiServer holds the claims the fake API server knows; getErr, when
	// set, is what it answers instead.
	apiServer := map[types.UID]*resourceapi.ResourceClaim{}
	var getErr error
	setup := func(t *testing.T, claims ...*resourceapi.ResourceClaim) *env {
		t.Helper()
		e := newEnv(t)
		for _, c := range claims {
			apiServer[c.UID] = c
			if r := e.eng.Prepare(ctx, c); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		// The record of the first claim is corrupted on disk.
		if err := os.WriteFile(filepath.Join(e.dir, "checkpoint", string(claims[0].UID)+".json"), []byte(`{"kind":`), 0o600); err != nil {
			t.Fatal(err)
		}
		e.restart(t)
		e.eng.SetClaimGetter(func(_ context.Context, ref ClaimRef) (*resourceapi.ResourceClaim, error) {
			if getErr != nil {
				return nil, getErr
			}
			if c := apiServer[ref.UID]; c != nil && c.Name == ref.Name {
				return c, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, ref.Name)
		})
		return e
	}
	refOf := func(c *resourceapi.ResourceClaim) ClaimRef {
		return ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	}
	lost := func(t *testing.T, e *env) []types.UID {
		t.Helper()
		l, err := e.eng.Store().Lost()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	noViolations := func(t *testing.T, e *env) {
		t.Helper()
		if v := e.hw.Violations(); len(v) > 0 {
			t.Errorf("hardware rules broken: %v", v)
		}
	}

	t.Run("unprepare with the claim in the API server", func(t *testing.T) {
		l := testClaim("lost-1", alloc{request: "a", device: "dev-1"}, alloc{request: "b", device: "dev-2"})
		keep := testClaim("keep-1", alloc{request: "a", device: "dev-0"})
		e := setup(t, l, keep)
		// Recovery kept the lost claim's CDI spec: its containers may
		// still restart with the IDs they got.
		specs, err := e.eng.Specs().Claims(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]types.UID{"keep-1", "lost-1"}, specs); diff != "" {
			t.Errorf("CDI specs after recovery (-want +got):\n%s", diff)
		}
		getErr = errors.New("connection refused")
		if err := e.eng.Unprepare(ctx, refOf(l)); err == nil {
			t.Error("unprepare while the API server is unreachable succeeded; want an error so that the kubelet retries")
		}
		getErr = nil
		if err := e.eng.Unprepare(ctx, refOf(l)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string][]types.UID{"node-a_dev-0": {"keep-1"}}, e.holders(t)); diff != "" {
			t.Errorf("configured devices after unprepare (-want +got):\n%s", diff)
		}
		if specs, _ = e.eng.Specs().Claims(ctx); !cmp.Equal(specs, []types.UID{"keep-1"}) {
			t.Errorf("CDI specs after unprepare = %v, want [keep-1]", specs)
		}
		if got := lost(t, e); len(got) != 0 {
			t.Errorf("still lost after unprepare: %v", got)
		}
		// Released for good: another restart does not bring it back.
		e.restart(t)
		if err := e.eng.Unprepare(ctx, refOf(l)); err != nil {
			t.Fatal(err)
		}
		noViolations(t, e)
	})

	t.Run("prepared again", func(t *testing.T) {
		l := testClaim("lost-2", alloc{request: "a", device: "dev-1"})
		e := setup(t, l)
		// The kubelet prepares the claim again (a pod of it restarts):
		// the device is undone first, never prepared twice.
		r := e.eng.Prepare(ctx, l)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Devices) != 1 || len(r.Devices[0].CDIDeviceIDs) != 1 {
			t.Errorf("prepare result = %+v, want one device with a CDI ID", r)
		}
		noViolations(t, e)
		if diff := cmp.Diff(map[string][]types.UID{"node-a_dev-1": {"lost-2"}}, e.holders(t)); diff != "" {
			t.Errorf("configured devices (-want +got):\n%s", diff)
		}
		if got := lost(t, e); len(got) != 0 {
			t.Errorf("still lost after prepare: %v", got)
		}
		if err := e.eng.Unprepare(ctx, refOf(l)); err != nil {
			t.Fatal(err)
		}
		if h := e.holders(t); len(h) != 0 {
			t.Errorf("configured devices after unprepare: %v", h)
		}
	})

	t.Run("a newer record supersedes the quarantined one", func(t *testing.T) {
		e := newEnv(t)
		c := testClaim("back-1", alloc{request: "a", device: "dev-1"})
		if r := e.eng.Prepare(ctx, c); r.Err != nil {
			t.Fatal(r.Err)
		}
		// A quarantined copy of the claim's record next to a good one
		// (left by an earlier process).
		q := filepath.Join(e.dir, "checkpoint", "quarantine")
		if err := os.MkdirAll(q, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(q, "back-1.json.1"), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		e.restart(t)
		if got := lost(t, e); len(got) != 0 {
			t.Errorf("lost after restart: %v, want none (the good record wins)", got)
		}
		if err := e.eng.Unprepare(ctx, refOf(c)); err != nil {
			t.Fatal(err)
		}
		// Gone for good: the claim does not come back as lost.
		e.restart(t)
		if got := lost(t, e); len(got) != 0 {
			t.Errorf("lost after unprepare and restart: %v", got)
		}
		noViolations(t, e)
	})

	t.Run("claim gone from the API server", func(t *testing.T) {
		l := testClaim("lost-3", alloc{request: "a", device: "dev-1"})
		e := setup(t, l)
		delete(apiServer, l.UID)
		var reported []ClaimRef
		e.eng.OnUnreleased(func(_ context.Context, ref ClaimRef) { reported = append(reported, ref) })
		if err := e.eng.Unprepare(ctx, refOf(l)); err != nil {
			t.Fatalf("unprepare: %v (the kubelet would retry forever)", err)
		}
		if diff := cmp.Diff([]ClaimRef{refOf(l)}, reported); diff != "" {
			t.Errorf("reported unreleased claims (-want +got):\n%s", diff)
		}
		if got := e.eng.ErrorCount("unprepare", ReasonCorrupt); got != 1 {
			t.Errorf("errors_total{unprepare,%s} = %v, want 1", ReasonCorrupt, got)
		}
		if specs, _ := e.eng.Specs().Claims(ctx); len(specs) != 0 {
			t.Errorf("CDI specs left: %v", specs)
		}
		// The vendor's claim-level state (by claim UID) is released too:
		// UnprepareClaim ran without devices.
		if slices.Contains(e.hw.Claims(), l.UID) {
			t.Errorf("claim-level setup of %s left after its release: %v", l.UID, e.hw.Claims())
		}
		// Reported once, not on every later unprepare.
		if err := e.eng.Unprepare(ctx, refOf(l)); err != nil || len(reported) != 1 {
			t.Errorf("second unprepare: %v, reported %d times", err, len(reported))
		}
	})
}
