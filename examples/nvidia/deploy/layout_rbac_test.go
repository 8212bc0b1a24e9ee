package deploy_test

import (
	"slices"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy"
)

// TestChartLayoutDriverRBAC: with the layout publication (the default,
// with a dynamic GPU) the driver's ClusterRole adds list and watch on
// resourceclaims and pods (the claimwatch.Watcher's informers) and
// nothing else; migPublication=placements grants neither, nor does the
// default without a dynamic GPU.
func TestChartLayoutDriverRBAC(t *testing.T) {
	driverGrants := func(set ...string) []grant {
		t.Helper()
		r := template(t, set...)
		for _, cr := range r.clusterRoles {
			if cr.Name == deploy.DaemonSet {
				return grants(t, cr.Rules, "")
			}
		}
		t.Fatalf("no ClusterRole %s", deploy.DaemonSet)
		return nil
	}
	// Both with the webhook, which the layout needs (its own role is
	// TestChartLayoutPublication's).
	def, lay := driverGrants(dynamicGPU, "webhook.enabled=true", "migPublication=placements"), driverGrants(dynamicGPU, "webhook.enabled=true")
	if static := driverGrants(); !slices.Equal(static, def) {
		t.Errorf("the default without a dynamic GPU grants the driver %v, want placements' %v", static, def)
	}
	want := []grant{{"resource.k8s.io", "resourceclaims", "list", ""}, {"resource.k8s.io", "resourceclaims", "watch", ""}, {"", "pods", "list", ""}, {"", "pods", "watch", ""}}
	for _, g := range want {
		if slices.Contains(def, g) {
			t.Errorf("migPublication=placements grants the driver %+v", g)
		}
		if !slices.Contains(lay, g) {
			t.Errorf("migPublication=layout does not grant the driver %+v", g)
		}
	}
	var extra []grant
	for _, g := range lay {
		if !slices.Contains(def, g) && !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	if len(extra) > 0 || len(lay) != len(def)+len(want) {
		t.Errorf("migPublication=layout grants %v beyond the default and %v", extra, want)
	}
}
