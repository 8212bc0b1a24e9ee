package deploy_test

import (
	"flag"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig/defrag"
	pdefrag "github.com/drakit/drakit/partition/defrag"
)

// TestChartDefrag renders the chart with the MIG defragmenter on: a
// Deployment of the driver's image running "defrag-controller" under its
// own ServiceAccount, bound to a ClusterRole that grants exactly what the
// controller calls (read what the scheduler reads plus pods and budgets,
// evict pods, write a claim's allocation, manage DeviceTaintRules, record
// Events and list them at start, get its own ClusterRole, the owner of
// its rules) and a Role in the release's namespace for its Lease. The
// values reach the flags: leader election (on by default, with
// RollingUpdate; off: Recreate, no Role, at most one replica), the
// eviction budgets, the backoff, the namespaces, and always
// --owner-cluster-role with the ClusterRole's name. Off by default
// (TestChartObjects: no Deployment).
func TestChartDefrag(t *testing.T) {
	r := template(t, "defrag.enabled=true", "defrag.dryRun=true")
	if len(r.deployments) != 1 || len(r.sas) != 2 || len(r.clusterRoles) != 2 || len(r.crbs) != 2 ||
		len(r.roles) != 1 ||
		len(r.rbs) != 1 {
		t.Fatalf(
			"objects: %d Deployments, %d ServiceAccounts, %d ClusterRoles, %d "+
				"ClusterRoleBindings, %d Roles, %d RoleBindings",
			len(
				r.deployments,
			),
			len(r.sas),
			len(r.clusterRoles),
			len(r.crbs),
			len(r.roles),
			len(r.rbs),
		)
	}
	d := r.deployments[0]
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("containers %+v", spec.Containers)
	}
	c := spec.Containers[0]
	name := deploy.DaemonSet + "-defrag"
	wantArgs := []string{
		"--dry-run",
		"--max-moves=2",
		"--max-evictions-per-hour=10",
		"--max-evictions-per-node-per-hour=4",
		"--backoff=10m",
		"--leader-elect",
		"--leader-elect-namespace=" + deploy.Namespace,
		"--leader-elect-name=" + name,
		"--owner-cluster-role=" + name,
	}
	if c.Image != deploy.Image || len(c.Args) == 0 || c.Args[0] != "defrag-controller" ||
		!containsAll(c.Args, wantArgs) {
		t.Errorf("container %s %v, want defrag-controller with %v", c.Image, c.Args, wantArgs)
	}
	if slices.ContainsFunc(
		c.Args,
		func(a string) bool { return strings.HasPrefix(a, "--namespaces") },
	) {
		t.Errorf("args %v: --namespaces without defrag.namespaces", c.Args)
	}
	u := d.Spec.Strategy
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || u.Type != "RollingUpdate" ||
		u.RollingUpdate == nil ||
		*u.RollingUpdate.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf(
			"replicas %v, strategy %+v: want one replica, rolled out beside the old one (leader "+
				"election)",
			d.Spec.Replicas,
			u,
		)
	}
	var role string
	for _, b := range r.crbs {
		if len(b.Subjects) == 1 && b.Subjects[0].Name == spec.ServiceAccountName &&
			b.Subjects[0].Namespace == deploy.Namespace {
			role = b.RoleRef.Name
		}
	}
	if role != name || spec.ServiceAccountName != name {
		t.Fatalf(
			"the Deployment's ServiceAccount %q is bound to ClusterRole %q, want %s",
			spec.ServiceAccountName,
			role,
			name,
		)
	}
	var got []string
	for _, cr := range r.clusterRoles {
		if cr.Name == role {
			got = rules("", cr.Rules)
		}
	}
	var nsRole string
	for _, b := range r.rbs {
		if b.Namespace == deploy.Namespace && len(b.Subjects) == 1 && b.Subjects[0].Name == name &&
			b.Subjects[0].Namespace == deploy.Namespace &&
			b.RoleRef.Kind == "Role" {
			nsRole = b.RoleRef.Name
		}
	}
	for _, ro := range r.roles {
		if ro.Name == nsRole && ro.Namespace == deploy.Namespace {
			got = append(got, rules(ro.Namespace, ro.Rules)...)
		}
	}
	want := []string{
		"//pods/get/*", "//pods/list/*", "//pods/watch/*", "//nodes/list/*", "//nodes/watch/*",
		"//pods/eviction/create/*", "//events/create/*", "//events/list/*",
		"/policy/poddisruptionbudgets/list/*", "/policy/poddisruptionbudgets/watch/*",
		"/resource.k8s.io/resourceslices/list/*", "/resource.k8s.io/deviceclasses/list/*",
		"/resource.k8s.io/resourceclaimtemplates/list/*",
		"/resource.k8s.io/resourceslices/watch/*", "/resource.k8s.io/deviceclasses/watch/*",
		"/resource.k8s.io/resourceclaimtemplates/watch/*",
		"/resource.k8s.io/resourceclaims/get/*", "/resource.k8s.io/resourceclaims/list/*",
		"/resource.k8s.io/resourceclaims/watch/*",
		"/resource.k8s.io/resourceclaims/status/update/*",
		"/resource.k8s.io/resourceclaims/binding/update/*",
		"/resource.k8s.io/devicetaintrules/list/*", "/resource.k8s.io/devicetaintrules/watch/*",
		"/resource.k8s.io/devicetaintrules/create/*",
		"/resource.k8s.io/devicetaintrules/deletecollection/*",
		"/batch/jobs/get/*", "//persistentvolumeclaims/get/*", "//persistentvolumes/get/*",
		"//namespaces/get/*", "/storage.k8s.io/storageclasses/get/*",
		"/rbac.authorization.k8s.io/clusterroles/get/" + name,
		deploy.Namespace + "/coordination.k8s.io/leases/create/*",
		deploy.Namespace + "/coordination.k8s.io/leases/get/" + name,
		deploy.Namespace + "/coordination.k8s.io/leases/update/" + name,
	}
	sort.Strings(want)
	sort.Strings(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the controller's grants (-want +got):\n%s", diff)
	}
	if defrag.AnnotationDefrag != "mig.drakit.dev/defrag" {
		t.Errorf(
			"the chart's values document annotation mig.drakit.dev/defrag, the controller reads %s",
			defrag.AnnotationDefrag,
		)
	}

	// Every flag the chart passes is one of the controller's (those of
	// component-base aside), with the values' meaning.
	f := parseDefragFlags(t, c.Args)
	if !f.LeaderElect || f.LeaseNamespace != deploy.Namespace || f.LeaseName != name ||
		f.OwnerClusterRole != name ||
		f.Namespaces != "" ||
		f.EvictionsPerHour != pdefrag.DefaultEvictionsPerHour ||
		f.EvictionsPerNodePerHour != pdefrag.DefaultEvictionsPerNodePerHour ||
		f.Backoff != pdefrag.DefaultBackoff {
		t.Errorf("the controller's flags from the default values: %+v", f)
	}

	// Other values.
	r = template(
		t,
		"defrag.enabled=true",
		"defrag.leaderElection=false",
		"defrag.namespaces={team-a,team-b}",
		"defrag.maxEvictionsPerHour=3",
		"defrag.maxEvictionsPerNodePerHour=1",
		"defrag.backoff=30m",
	)
	d = r.deployments[0]
	a := d.Spec.Template.Spec.Containers[0].Args
	if want := []string{
		"--namespaces=team-a,team-b",
		"--max-evictions-per-hour=3",
		"--max-evictions-per-node-per-hour=1",
		"--backoff=30m",
		"--owner-cluster-role=" + name,
	}; !containsAll(
		a,
		want,
	) {
		t.Errorf("args %v lack %v", a, want)
	}
	if f := parseDefragFlags(t, a); f.Namespaces != "team-a,team-b" || f.EvictionsPerHour != 3 ||
		f.EvictionsPerNodePerHour != 1 ||
		f.Backoff != 30*time.Minute ||
		f.LeaderElect {
		t.Errorf("the controller's flags: %+v", f)
	}
	if slices.ContainsFunc(
		a,
		func(a string) bool { return strings.HasPrefix(a, "--leader-elect") },
	) {
		t.Errorf("args %v: leader election with defrag.leaderElection=false", a)
	}
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != "Recreate" || len(r.roles) != 0 ||
		len(r.rbs) != 0 {
		t.Errorf(
			"without leader election: %d replicas, strategy %s, %d Roles: want one replica, "+
				"Recreate, no Lease Role",
			*d.Spec.Replicas,
			d.Spec.Strategy.Type,
			len(r.roles),
		)
	}
	if r = template(
		t, "defrag.enabled=true", "defrag.replicas=2",
	); *r.deployments[0].Spec.Replicas != 2 {
		t.Errorf("defrag.replicas=2: %d replicas", *r.deployments[0].Spec.Replicas)
	}
	out, err := exec.Command(
		helm(t),
		"template",
		deploy.Release,
		"chart",
		"--set",
		"defrag.enabled=true",
		"--set",
		"defrag.leaderElection=false",
		"--set",
		"defrag.replicas=2",
	).
		CombinedOutput()
	if err == nil ||
		!strings.Contains(string(out), "defrag.replicas above 1 needs defrag.leaderElection") {
		t.Errorf("two replicas without leader election: %v\n%s", err, out)
	}
}

// parseDefragFlags parses a defrag container's arguments (after the
// command) with the controller's own flags; component-base's logging and
// gate flags are the driver command's and left out.
func parseDefragFlags(t *testing.T, args []string) defrag.Flags {
	t.Helper()
	fs := flag.NewFlagSet("defrag-controller", flag.ContinueOnError)
	var f defrag.Flags
	f.Register(fs, nvdriver.DriverName)
	var own []string
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "--logging-format=") && !strings.HasPrefix(a, "-v=") &&
			!strings.HasPrefix(a, "--feature-gates=") {
			own = append(own, a)
		}
	}
	if err := fs.Parse(own); err != nil || fs.NArg() != 0 {
		t.Fatalf(
			"the controller does not take the chart's arguments %v: %v (left: %v)",
			own,
			err,
			fs.Args(),
		)
	}
	return f
}

// TestChartDefragPolicy: with the defragmenter on, the chart ships
// ValidatingAdmissionPolicies that match only its ServiceAccount's
// requests: ResourceClaim status updates, DeviceTaintRule creates and
// deletes, and, with defrag.namespaces, evictions (limited to those
// namespaces). defrag.admissionPolicy=false leaves them out. Their CEL is
// checked on the API server by TestDefragPolicy.
func TestChartDefragPolicy(t *testing.T) {
	sa := "system:serviceaccount:" + deploy.Namespace + ":" + deploy.DaemonSet + "-defrag"
	policies := func(r rendered) map[string]*admissionregv1.ValidatingAdmissionPolicy {
		t.Helper()
		out := map[string]*admissionregv1.ValidatingAdmissionPolicy{}
		for _, p := range r.policies {
			if !strings.Contains(p.Name, "-defrag-") {
				continue
			}
			out[p.Name] = p
			if len(p.Spec.MatchConditions) != 1 ||
				p.Spec.MatchConditions[0].Expression != "request.userInfo.username == \""+sa+"\"" ||
				*p.Spec.FailurePolicy != admissionregv1.Fail {
				t.Errorf(
					"policy %s: match conditions %+v, failure policy %s: want only %s's "+
						"requests, failing closed",
					p.Name,
					p.Spec.MatchConditions,
					*p.Spec.FailurePolicy,
					sa,
				)
			}
			bound := false
			for _, b := range r.bindings {
				bound = bound ||
					b.Spec.PolicyName == p.Name &&
						slices.Equal(
							b.Spec.ValidationActions,
							[]admissionregv1.ValidationAction{admissionregv1.Deny},
						)
			}
			if !bound {
				t.Errorf("policy %s has no Deny binding", p.Name)
			}
		}
		return out
	}
	resources := func(p *admissionregv1.ValidatingAdmissionPolicy) []string {
		var out []string
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			for _, res := range r.Resources {
				for _, op := range r.Operations {
					out = append(out, res+"/"+string(op))
				}
			}
		}
		sort.Strings(out)
		return out
	}
	name := deploy.DaemonSet + "-defrag"
	ps := policies(template(t, "defrag.enabled=true"))
	want := map[string][]string{
		name + "-claims":      {"resourceclaims/status/UPDATE"},
		name + "-taint-rules": {"devicetaintrules/CREATE", "devicetaintrules/DELETE"},
	}
	check := func(
		ps map[string]*admissionregv1.ValidatingAdmissionPolicy, want map[string][]string,
	) {
		t.Helper()
		got := map[string][]string{}
		for n, p := range ps {
			got[n] = resources(p)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("policies (-want +got):\n%s", diff)
		}
	}
	check(ps, want)
	ps = policies(template(t, "defrag.enabled=true", "defrag.namespaces={team-a,team-b}"))
	want[name+"-evictions"] = []string{"pods/eviction/CREATE"}
	check(ps, want)
	if p := ps[name+"-evictions"]; p != nil &&
		p.Spec.Validations[0].Expression != `request.namespace in ["team-a","team-b"]` {
		t.Errorf("evictions: %s", p.Spec.Validations[0].Expression)
	}
	check(
		policies(template(t, "defrag.enabled=true", "defrag.admissionPolicy=false")),
		map[string][]string{},
	)
	check(policies(template(t)), map[string][]string{})
}
