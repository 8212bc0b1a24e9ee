package deploy_test

import (
	"slices"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy"
)

// TestChartLayoutDriverRBAC: with migPublication=layout the driver's
// ClusterRole adds list and watch on resourceclaims and pods (the
// claimwatch.Watcher's informers) and nothing else; the default grants
// neither.
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
	def, lay := driverGrants("webhook.enabled=true"), driverGrants("webhook.enabled=true", "migPublication=layout")
	want := []grant{{"resource.k8s.io", "resourceclaims", "list", ""}, {"resource.k8s.io", "resourceclaims", "watch", ""}, {"", "pods", "list", ""}, {"", "pods", "watch", ""}}
	for _, g := range want {
		if slices.Contains(def, g) {
			t.Errorf("default values grant the driver %+v", g)
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
