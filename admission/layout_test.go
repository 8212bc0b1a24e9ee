package admission

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const guardDriver = "gpu.example.com"

// newGuard is a LayoutGuard whose client leads nowhere: these tests feed
// its index by hand and never run it (cluster_test.go runs one on a real
// API server).
func newGuard(t *testing.T) *LayoutGuard {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewLayoutGuard(c, guardDriver)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func slice(name, driver, pool string, generation, count int64, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, Pool: resourceapi.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: count}}}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// allocated is a claim allocated to (driver, pool, device) triples.
func allocated(results ...[3]string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "r" + string(rune('0'+i)), Driver: r[0], Pool: r[1], Device: r[2]})
	}
	return c
}

// TestLayoutGuardIndex follows the index through slices added, updated
// and deleted, a pool going from one slice to two and back, a pool's
// newer generation replacing an older one slice by slice, and another
// driver's slices (ignored): after each step, which allocations
// CheckAllocation refuses.
func TestLayoutGuardIndex(t *testing.T) {
	g := newGuard(t)
	// stale says which of the devices of pool p CheckAllocation refuses.
	stale := func(p string, devices ...string) []string {
		var out []string
		for _, d := range devices {
			err := g.CheckAllocation(nil, allocated([3]string{guardDriver, p, d}))
			var se *StaleAllocationError
			switch {
			case err == nil:
			case errors.As(err, &se) && se.Pool == p && cmp.Equal(se.Devices, []string{d}):
				out = append(out, d)
			default:
				t.Errorf("%s/%s: %v, want nil or a StaleAllocationError", p, d, err)
			}
		}
		return out
	}
	steps := []struct {
		what      string
		do        func()
		pool      string
		devices   []string
		wantStale []string
	}{
		{"no slice", func() {}, "n1", []string{"a"}, nil},
		{"one-slice pool", func() { g.upsert(slice("n1", guardDriver, "n1", 1, 1, "a", "b")) }, "n1", []string{"a", "b", "c"}, []string{"c"}},
		{"another driver's slice of the same pool name", func() { g.upsert(slice("n1-other", "other.example.com", "n1", 1, 1, "z")) }, "n1", []string{"a", "z"}, []string{"z"}},
		{"updated: a withdrawn", func() { g.upsert(slice("n1", guardDriver, "n1", 2, 1, "b", "d")) }, "n1", []string{"a", "b", "d"}, []string{"a"}},
		{"a second slice of a newer generation: two slices announced", func() { g.upsert(slice("n1-1", guardDriver, "n1", 3, 2, "e")) }, "n1", []string{"a", "e", "x"}, nil},
		{"the first slice in the newer generation too", func() { g.upsert(slice("n1", guardDriver, "n1", 3, 2, "b")) }, "n1", []string{"a", "x"}, nil},
		{"back to one slice: n1-1 deleted, n1 rewritten", func() {
			g.remove(slice("n1-1", guardDriver, "n1", 3, 2))
			g.upsert(slice("n1", guardDriver, "n1", 4, 1, "f"))
		}, "n1", []string{"b", "e", "f"}, []string{"b", "e"}},
		{"a newer generation's one slice beside an old one not yet deleted", func() {
			g.upsert(slice("n1-new", guardDriver, "n1", 5, 1, "g"))
		}, "n1", []string{"f", "g"}, []string{"f"}},
		{"the old one deleted (a tombstone)", func() {
			g.remove(cache.DeletedFinalStateUnknown{Key: "n1", Obj: slice("n1", guardDriver, "n1", 4, 1)})
		}, "n1", []string{"f", "g"}, []string{"f"}},
		{"the slice moves to another pool", func() { g.upsert(slice("n1-new", guardDriver, "n2", 1, 1, "g")) }, "n1", []string{"f", "g"}, nil},
		{"...where it is checked", func() {}, "n2", []string{"f", "g"}, []string{"f"}},
		{"deleted: no slice, nothing to check", func() { g.remove(slice("n1-new", guardDriver, "n2", 1, 1)) }, "n2", []string{"f"}, nil},
	}
	for _, s := range steps {
		s.do()
		if diff := cmp.Diff(s.wantStale, stale(s.pool, s.devices...)); diff != "" {
			t.Errorf("%s: stale devices of %s (-want +got):\n%s", s.what, s.pool, diff)
		}
	}
	if len(g.slices) != 0 || len(g.one) != 0 || len(g.poolOf) != 0 {
		t.Errorf("after every slice is deleted: %d pools, %d one-slice pools, %d slices indexed", len(g.slices), len(g.one), len(g.poolOf))
	}
}

// TestLayoutGuardCheck: which claim status writes CheckAllocation and
// Review refuse, and the message.
func TestLayoutGuardCheck(t *testing.T) {
	g := newGuard(t)
	g.upsert(slice("n1-layout", guardDriver, "n1", 1, 1, "gpu-0", "gpu-1"))
	g.upsert(slice("n2-0", guardDriver, "n2", 1, 2, "gpu-0"))
	held := allocated([3]string{guardDriver, "n1", "gone"})
	withStatus := held.DeepCopy()
	withStatus.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: guardDriver, Pool: "n1", Device: "gone"}}
	for _, tc := range []struct {
		name     string
		old, new *resourceapi.ResourceClaim
		want     string
	}{
		{name: "listed", new: allocated([3]string{guardDriver, "n1", "gpu-1"})},
		{name: "unlisted", new: allocated([3]string{guardDriver, "n1", "gpu-7"}),
			want: "claim ns/c: device gpu-7 of pool n1 (driver gpu.example.com) was allocated from an older publication of the layout: ResourceSlice n1-layout no longer lists it; the scheduler will try again"},
		{name: "two unlisted of one pool, one listed, another pool's", new: allocated([3]string{guardDriver, "n1", "gpu-0"}, [3]string{guardDriver, "n1", "gpu-7"}, [3]string{guardDriver, "n9", "x"}, [3]string{guardDriver, "n1", "gpu-8"}),
			want: "claim ns/c: device gpu-7, gpu-8 of pool n1 (driver gpu.example.com) was allocated from an older publication of the layout: ResourceSlice n1-layout no longer lists it; the scheduler will try again"},
		{name: "a pool of two slices", new: allocated([3]string{guardDriver, "n2", "gpu-1"})},
		{name: "a pool without slices", new: allocated([3]string{guardDriver, "n3", "gpu-0"})},
		{name: "another driver's", new: allocated([3]string{"other.example.com", "n1", "gpu-7"})},
		{name: "status.devices of an allocated claim", old: held, new: withStatus},
		{name: "deallocation", old: held, new: &resourceapi.ResourceClaim{ObjectMeta: held.ObjectMeta}},
		{name: "no allocation", old: &resourceapi.ResourceClaim{}, new: &resourceapi.ResourceClaim{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.old
			if old == nil {
				old = &resourceapi.ResourceClaim{ObjectMeta: tc.new.ObjectMeta}
			}
			got := ""
			if err := g.CheckAllocation(old, tc.new); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("CheckAllocation: %q, want %q", got, tc.want)
			}

			// Review, unsynced then synced.
			req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Update, Namespace: "ns", Name: "c", SubResource: "status",
				Resource: metav1.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: ResourceClaims}}
			req.Object.Raw, _ = json.Marshal(tc.new)
			req.OldObject.Raw, _ = json.Marshal(old)
			if r := g.Review(context.Background(), req); r.Allowed || r.Result.Code != http.StatusServiceUnavailable {
				t.Errorf("Review before the guard synced: %+v, want refused as unavailable", r)
			}
			ready := &LayoutGuard{driver: g.driver, slices: g.slices, poolOf: g.poolOf, one: g.one, synced: make(chan struct{})}
			close(ready.synced)
			r := ready.Review(context.Background(), req)
			if tc.want == "" && !r.Allowed {
				t.Errorf("Review: refused %+v, want allowed", r.Result)
			}
			if tc.want != "" && (r.Allowed || r.Result.Message != tc.want || r.Result.Code != http.StatusForbidden) {
				t.Errorf("Review: %+v, want refused (403) with %q", r, tc.want)
			}
		})
	}
	// Anything but a claim status update is allowed, with a warning.
	ready := &LayoutGuard{driver: g.driver, slices: g.slices, one: g.one, synced: make(chan struct{})}
	close(ready.synced)
	req := &admissionv1.AdmissionRequest{Operation: admissionv1.Update, Resource: metav1.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: ResourceClaims}}
	req.Object = runtime.RawExtension{Raw: []byte(`{}`)}
	if r := ready.Review(context.Background(), req); !r.Allowed || len(r.Warnings) == 0 {
		t.Errorf("a claim update (not status): %+v, want allowed with a warning", r)
	}
}
