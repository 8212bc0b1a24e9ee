package deploy_test

import (
	"slices"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy"
)

// TestChartLayoutDriverRBAC: with the layout publication (the default,
// with a dynamic GPU) the driver's cluster grants are those of the
// placements publication (get on claims, its node's slices; no list or
// watch of claims or pods: the node agent watches only its own node's
// objects), and a Role of the release's namespace adds get, list, watch,
// create and update on ConfigMaps (its ledger; the policy
// nvidia-dra-driver-ledgers narrows the writes to its own node's). The
// planner's ClusterRole is the one that lists and watches claims, pods
// and nodes.
func TestChartLayoutDriverRBAC(t *testing.T) {
	clusterGrants := func(r rendered, name string) []grant {
		t.Helper()
		for _, cr := range r.clusterRoles {
			if cr.Name == name {
				return grants(t, cr.Rules, "")
			}
		}
		return nil
	}
	def := template(t, dynamicGPU, "webhook.enabled=true", "migPublication=placements")
	lay := template(t, dynamicGPU, "webhook.enabled=true", layoutPub)
	gotCluster := clusterGrants(lay, deploy.DaemonSet)
	placements := clusterGrants(def, deploy.DaemonSet)
	if !slices.Equal(gotCluster, placements) {
		t.Errorf("migPublication=layout grants the driver %v cluster-wide, want placements' %v",
			gotCluster, placements)
	}
	for _, g := range clusterGrants(lay, deploy.DaemonSet) {
		if g.verb == "list" || g.verb == "watch" {
			if g.resource == "resourceclaims" || g.resource == "pods" {
				t.Errorf("the driver may %s %s", g.verb, g.resource)
			}
		}
	}
	var ns []grant
	for _, role := range lay.roles {
		if role.Name == deploy.DaemonSet+"-layout" {
			ns = append(ns, grants(t, role.Rules, role.Namespace)...)
		}
	}
	var want []grant
	for _, v := range []string{"get", "list", "watch", "create", "update"} {
		want = append(want, grant{"", "configmaps", v, deploy.Namespace})
	}
	slices.SortFunc(want, compareGrants)
	slices.SortFunc(ns, compareGrants)
	if !slices.Equal(ns, want) {
		t.Errorf("the driver's ledger grants %v, want %v", ns, want)
	}
	policy := false
	for _, p := range lay.policies {
		policy = policy || p.Name == deploy.DaemonSet+"-ledgers"
	}
	if !policy {
		t.Errorf("no policy %s-ledgers", deploy.DaemonSet)
	}
	planner := clusterGrants(lay, deploy.DaemonSet+"-planner")
	for _, g := range []grant{
		{"resource.k8s.io", "resourceclaims", "watch", ""},
		{"", "pods", "watch", ""},
		{"", "nodes", "watch", ""},
	} {
		if !slices.Contains(planner, g) {
			t.Errorf("the planner may not %s %s: %v", g.verb, g.resource, planner)
		}
	}
	if len(clusterGrants(def, deploy.DaemonSet+"-planner")) != 0 {
		t.Errorf("migPublication=placements renders the planner's ClusterRole")
	}
}

func compareGrants(a, b grant) int {
	for _, c := range [][2]string{
		{a.group, b.group}, {a.resource, b.resource}, {a.verb, b.verb}, {a.namespace, b.namespace},
	} {
		if c[0] != c[1] {
			if c[0] < c[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}
