package deploy_test

import (
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/mig/defrag"
)

// TestChartDefrag renders the chart with the MIG defragmenter on: one
// Deployment of the driver's image running "defrag-controller" under its
// own ServiceAccount, bound to a ClusterRole that grants exactly what the
// controller calls (read what the scheduler reads plus pods and budgets,
// evict pods, write a claim's allocation, manage DeviceTaintRules, record
// Events) and nothing else. Off by default (TestChartObjects: no
// Deployment).
func TestChartDefrag(t *testing.T) {
	r := render(t, "template", deploy.Release, "chart", "--namespace", deploy.Namespace, "--set", "defrag.enabled=true", "--set", "defrag.dryRun=true")
	if len(r.deployments) != 1 || len(r.sas) != 2 || len(r.clusterRoles) != 2 || len(r.crbs) != 2 {
		t.Fatalf("objects: %d Deployments, %d ServiceAccounts, %d ClusterRoles, %d ClusterRoleBindings", len(r.deployments), len(r.sas), len(r.clusterRoles), len(r.crbs))
	}
	d := r.deployments[0]
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("containers %+v", spec.Containers)
	}
	c := spec.Containers[0]
	if c.Image != deploy.Image || len(c.Args) == 0 || c.Args[0] != "defrag-controller" || !slices.Contains(c.Args, "--dry-run") || !slices.Contains(c.Args, "--max-moves=2") {
		t.Errorf("container %s %v", c.Image, c.Args)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != "Recreate" {
		t.Errorf("replicas %v, strategy %s: want one controller, never two", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	var role string
	for _, b := range r.crbs {
		if len(b.Subjects) == 1 && b.Subjects[0].Name == spec.ServiceAccountName && b.Subjects[0].Namespace == deploy.Namespace {
			role = b.RoleRef.Name
		}
	}
	var got []grant
	for _, cr := range r.clusterRoles {
		if cr.Name == role {
			got = grants(t, cr.Rules, "")
		}
	}
	if role == "" || spec.ServiceAccountName == deploy.DaemonSet {
		t.Fatalf("the Deployment's ServiceAccount %q is not bound to a role of its own", spec.ServiceAccountName)
	}
	want := []grant{
		{"", "pods", "get", ""}, {"", "pods", "list", ""}, {"", "nodes", "list", ""},
		{"", "pods/eviction", "create", ""}, {"", "events", "create", ""},
		{"policy", "poddisruptionbudgets", "list", ""},
		{"resource.k8s.io", "resourceslices", "list", ""}, {"resource.k8s.io", "deviceclasses", "list", ""}, {"resource.k8s.io", "resourceclaimtemplates", "list", ""},
		{"resource.k8s.io", "resourceclaims", "get", ""}, {"resource.k8s.io", "resourceclaims", "list", ""},
		{"resource.k8s.io", "resourceclaims/status", "update", ""},
		{"resource.k8s.io", "devicetaintrules", "list", ""}, {"resource.k8s.io", "devicetaintrules", "create", ""}, {"resource.k8s.io", "devicetaintrules", "deletecollection", ""},
	}
	key := func(g []grant) []string {
		var out []string
		for _, x := range g {
			out = append(out, x.group+"/"+x.resource+"/"+x.verb)
		}
		sort.Strings(out)
		return out
	}
	if diff := cmp.Diff(key(want), key(got)); diff != "" {
		t.Errorf("the controller's grants (-want +got):\n%s", diff)
	}
	if defrag.AnnotationDefrag != "mig.drakit.dev/defrag" {
		t.Errorf("the chart's values document annotation mig.drakit.dev/defrag, the controller reads %s", defrag.AnnotationDefrag)
	}
}
