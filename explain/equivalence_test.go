package explain_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/mig"
)

// TestPicksMatchFullAllocator: explain allocates from the candidate
// devices only; its picks must be the allocator's picks on the whole
// problem (every slice, every device), node by node, for MIG claims of
// several sizes and counts on nodes where one 1g.10gb per GPU is taken.
func TestPicksMatchFullAllocator(t *testing.T) {
	ctx := context.Background()
	snap, _ := migFleet(t, 3, true)
	full := fullAllocator(ctx, t, snap)
	fitting := 0
	for _, tc := range []struct {
		profile string
		count   int64
	}{{"1g.10gb", 1}, {"1g.10gb", 20}, {"3g.40gb", 8}, {"3g.40gb", 9}, {"2g.20gb", 5}, {"7g.80gb", 1}, {"1g.20gb", 4}} {
		claim := &resourceapi.ResourceClaim{}
		claim.Name, claim.Namespace, claim.UID = "c", "default", "uid-c"
		claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "mig.drakit.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: tc.count,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes[%q].%s == %q`, migDriver, mig.AttrProfile, tc.profile)}}},
		}}}
		rep, err := explain.Claim(ctx, snap, claim)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range snap.Nodes {
			res, err := full.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				t.Fatal(err)
			}
			var want, got []string
			if len(res) == 1 {
				fitting++
				for _, r := range res[0].Devices.Results {
					want = append(want, r.Pool+"/"+r.Device)
				}
			}
			for _, nr := range rep.Nodes {
				if nr.Node != n.Name {
					continue
				}
				if nr.Fits != (len(res) == 1) {
					t.Errorf("%d x %s on %s: explain fits=%v, allocator %v", tc.count, tc.profile, n.Name, nr.Fits, len(res) == 1)
				}
				for _, d := range nr.Allocation {
					got = append(got, d.Pool+"/"+d.Device)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%d x %s on %s: picks (-allocator on everything +explain):\n%s", tc.count, tc.profile, n.Name, diff)
			}
		}
	}
	if fitting == 0 {
		t.Error("no claim fits anywhere: the comparison compares nothing")
	}
}
