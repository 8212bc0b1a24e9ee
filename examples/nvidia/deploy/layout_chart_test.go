package deploy_test

import (
	"maps"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// webhookName is the name of the chart's webhook: its Deployment,
// Service, ServiceAccount and roles.
const webhookName = "nvidia-dra-driver-webhook"

// dynamicGPU is the chart value that makes GPU 0 dynamic MIG (and the
// DynamicMIG gate, alpha and off by default): the MIG publication
// concerns only nodes with a dynamic GPU.
const dynamicGPU = "dynamicMIGGPUs=0,featureGates.DynamicMIG=true"

// layoutPub is the chart value that selects the layout publication, an
// option (the default is the placements, docs/dynamic-mig-publication.md).
const layoutPub = "migPublication=layout"

// TestChartLayoutPublication: the default is the placements
// (migPublication=placements, what the chart rendered before the layout
// existed); with a dynamic GPU, migPublication=layout gives the driver
// --mig-publication=layout and runs the webhook (webhook.enabled auto; false is refused with a
// message) and the planner; the webhook then runs with
// --layout-allocations and --layout-namespace (its other arguments
// unchanged), its configuration gets a second entry equal to
// admission.LayoutWebhook (UPDATE of resourceclaims/status at
// admission.LayoutPath, only writes that allocate a device of a layout
// pool of this driver, failurePolicy webhook.layoutFailurePolicy, Fail by
// default), beside the configuration check unchanged, and its
// ServiceAccount may get, list, watch and update ConfigMaps of the
// release's namespace (the ledgers), nothing more.
// migPublication=placements leaves the driver's and the webhook's
// arguments and the webhook's configuration as they were before the
// layout existed; so does the layout without a dynamic GPU (none set,
// "none", or the DynamicMIG gate off), where the webhook does not run
// unless enabled. Any other value is refused with a message. The
// webhook's behaviour on an API server
// is admission.TestLayoutOnAPIServer's.
func TestChartLayoutPublication(t *testing.T) {
	args := func(r rendered) []string {
		t.Helper()
		if len(r.ds) != 1 || len(r.ds[0].Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%d DaemonSets", len(r.ds))
		}
		return r.ds[0].Spec.Template.Spec.Containers[0].Args
	}
	webhookArgs := func(r rendered) []string {
		t.Helper()
		for _, d := range r.deployments {
			if d.Name == webhookName {
				return d.Spec.Template.Spec.Containers[0].Args
			}
		}
		t.Fatal("no webhook Deployment")
		return nil
	}
	without := func(args []string, arg string) (rest []string, n int) {
		for _, a := range args {
			if a == arg {
				n++
				continue
			}
			rest = append(rest, a)
		}
		return rest, n
	}
	// grants are the rules of the webhook's ServiceAccount's roles.
	grants := func(r rendered) []string {
		var roles []string
		for _, b := range r.crbs {
			if len(b.Subjects) == 1 && b.Subjects[0].Name == webhookName &&
				b.Subjects[0].Namespace == deploy.Namespace {
				roles = append(roles, b.RoleRef.Name)
			}
		}
		var out []string
		for _, role := range r.clusterRoles {
			if slices.Contains(roles, role.Name) {
				out = append(out, rules("", role.Rules)...)
			}
		}
		sort.Strings(out)
		return out
	}
	service := func(path string) admissionregv1.WebhookClientConfig {
		return admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{
			Namespace: deploy.Namespace,
			Name:      webhookName,
			Path:      ptr.To(path),
			Port:      ptr.To[int32](443)}}
	}

	// def is the placements publication with the webhook on: the
	// reference the layout adds to.
	def := template(t, dynamicGPU, "webhook.enabled=true", "migPublication=placements")
	for _, p := range def.policies {
		if strings.Contains(p.Name, "layout") {
			t.Errorf("migPublication=placements renders the policy %s", p.Name)
		}
	}
	defArgs := args(def)
	if slices.ContainsFunc(
		defArgs,
		func(a string) bool { return strings.Contains(a, "mig-publication") },
	) {
		t.Errorf("migPublication=placements: args %v name a MIG publication", defArgs)
	}
	if slices.Contains(webhookArgs(def), "--layout-allocations") {
		t.Errorf(
			"migPublication=placements: webhook args %v check layout allocations",
			webhookArgs(def),
		)
	}
	if len(def.webhooks) != 1 || len(def.webhooks[0].Webhooks) != 1 {
		t.Errorf(
			"migPublication=placements: %d webhook configurations, want one of one webhook",
			len(def.webhooks),
		)
	}
	if p := template(t, dynamicGPU, "migPublication=placements"); len(p.webhooks) != 0 ||
		len(p.deployments) != 0 {
		t.Errorf(
			"migPublication=placements, webhook auto: %d webhook configurations, %d Deployments, "+
				"want none",
			len(p.webhooks),
			len(p.deployments),
		)
	}
	unexported := cmp.AllowUnexported(rendered{})
	if diff := cmp.Diff(
		def, template(t, dynamicGPU, "webhook.enabled=true"), unexported,
	); diff != "" {
		t.Errorf(
			"the default with a dynamic GPU is not migPublication=placements (-explicit "+
				"+default):\n%s",
			diff,
		)
	}
	// Without a dynamic GPU the layout is as placements, without the
	// webhook unless enabled.
	for _, static := range [][]string{{layoutPub}, {layoutPub, "dynamicMIGGPUs=none"},
		{layoutPub, dynamicGPU, "featureGates.DynamicMIG=false"}} {
		r := template(t, static...)
		if len(r.webhooks) != 0 || len(r.deployments) != 0 {
			t.Errorf(
				"%v: %d webhook configurations, %d Deployments, want none (webhook auto, no "+
					"dynamic GPU)",
				static,
				len(r.webhooks),
				len(r.deployments),
			)
		}
		r = template(t, append(static, "webhook.enabled=true")...)
		if slices.ContainsFunc(
			args(r),
			func(a string) bool { return strings.Contains(a, "mig-publication") },
		) ||
			slices.Contains(webhookArgs(r), "--layout-allocations") ||
			len(r.webhooks) != 1 ||
			len(r.webhooks[0].Webhooks) != 1 {
			t.Errorf(
				"%v, webhook on: args %v, webhook args %v, %d configurations: want no layout",
				static,
				args(r),
				webhookArgs(r),
				len(r.webhooks),
			)
		}
	}

	r := template(t, dynamicGPU, layoutPub)
	// --set makes a number of dynamicMIGGPUs=0; it is still GPU 0.
	if !slices.Contains(args(r), "--dynamic-mig-gpus=0") {
		t.Errorf("%s: args %v lack --dynamic-mig-gpus=0", dynamicGPU, args(r))
	}
	explicit := template(t, dynamicGPU, "webhook.enabled=true", layoutPub)
	if diff := cmp.Diff(explicit, r, unexported); diff != "" {
		t.Errorf(
			"migPublication=layout with a dynamic GPU does not run the webhook (-enabled "+
				"+auto):\n%s",
			diff,
		)
	}
	rest, n := without(args(r), "--mig-publication=layout")
	if n != 1 {
		t.Errorf("migPublication=layout: args %v, want --mig-publication=layout once", args(r))
	}
	if diff := cmp.Diff(defArgs, rest); diff != "" {
		t.Errorf("migPublication=layout changes other args (-default +layout):\n%s", diff)
	}
	rest, n = without(webhookArgs(r), "--layout-allocations")
	rest, m := without(rest, "--layout-namespace="+deploy.Namespace)
	if n != 1 || m != 1 {
		t.Errorf(
			"migPublication=layout: webhook args %v, want --layout-allocations and "+
				"--layout-namespace once",
			webhookArgs(r),
		)
	}
	if diff := cmp.Diff(webhookArgs(def), rest); diff != "" {
		t.Errorf(
			"migPublication=layout changes the webhook's other args (-default +layout):\n%s",
			diff,
		)
	}
	for _, p := range r.policies {
		if strings.Contains(p.Name, "layout") {
			t.Errorf(
				"migPublication=layout renders the policy %s; the webhook does its work",
				p.Name,
			)
		}
	}
	if len(r.webhooks) != 1 || len(r.webhooks[0].Webhooks) != 2 {
		t.Fatalf(
			"migPublication=layout: %d webhook configurations, want one of two webhooks",
			len(r.webhooks),
		)
	}
	ws := r.webhooks[0].Webhooks
	if diff := cmp.Diff(def.webhooks[0].Webhooks[0], ws[0]); diff != "" {
		t.Errorf(
			"migPublication=layout changes the configuration check (-default +layout):\n%s",
			diff,
		)
	}
	want := admission.LayoutWebhook(
		nvdriver.DriverName,
		service(admission.LayoutPath),
		admissionregv1.Fail,
	)
	if diff := cmp.Diff(want, ws[1]); diff != "" {
		t.Errorf(
			"the chart's layout webhook differs from admission.LayoutWebhook (-want +got):\n%s",
			diff,
		)
	}
	if diff := cmp.Diff(grants(def), grants(r)); diff != "" {
		t.Errorf(
			"the webhook's cluster grants with migPublication=layout (-placements +layout):\n%s",
			diff,
		)
	}
	var nsGrants []string
	for _, role := range r.roles {
		if role.Name == webhookName+"-layout" {
			nsGrants = append(nsGrants, rules(role.Namespace, role.Rules)...)
		}
	}
	sort.Strings(nsGrants)
	wantNS := []string{
		deploy.Namespace + "//configmaps/get/*",
		deploy.Namespace + "//configmaps/list/*",
		deploy.Namespace + "//configmaps/update/*",
		deploy.Namespace + "//configmaps/watch/*",
	}
	if diff := cmp.Diff(wantNS, nsGrants); diff != "" {
		t.Errorf("the webhook's grants on the ledgers (-want +got):\n%s", diff)
	}
	planners := 0
	for _, d := range r.deployments {
		if d.Name == deploy.DaemonSet+"-planner" {
			planners++
		}
	}
	if planners != 1 {
		t.Errorf("migPublication=layout: %d planner Deployments, want 1", planners)
	}

	// The failure policy is a value; by URL, the guard's path.
	ignore := template(t, dynamicGPU, layoutPub, "webhook.layoutFailurePolicy=Ignore",
		"webhook.url=https://127.0.0.1:8443/", "webhook.hostNetwork=true")
	want = admission.LayoutWebhook(
		nvdriver.DriverName,
		admissionregv1.WebhookClientConfig{
			URL: ptr.To("https://127.0.0.1:8443" + admission.LayoutPath),
		},
		admissionregv1.Ignore,
	)
	if len(ignore.webhooks) != 1 || len(ignore.webhooks[0].Webhooks) != 2 {
		t.Fatalf("layoutFailurePolicy=Ignore, url: %d configurations", len(ignore.webhooks))
	}
	if diff := cmp.Diff(want, ignore.webhooks[0].Webhooks[1]); diff != "" {
		t.Errorf("layoutFailurePolicy=Ignore, url (-want +got):\n%s", diff)
	}
	// With cert-manager's certificates (not decodable here: read as
	// text), the same role and its binding to the webhook.
	cm := runHelm(
		t,
		"template",
		deploy.Release,
		"chart",
		"--namespace",
		deploy.Namespace,
		"--set",
		dynamicGPU,
		"--set",
		layoutPub,
		"--set",
		"webhook.certManager.enabled=true",
	)
	if strings.Count(cm, "name: "+webhookName+"-layout\n") != 3 ||
		!strings.Contains(cm, "resources: [configmaps]\n    verbs: [get, list, watch, update]") ||
		!strings.Contains(cm, "- --layout-allocations") {
		t.Errorf(
			"with cert-manager: the webhook's Role %s-layout, its binding or "+
				"--layout-allocations missing",
			webhookName,
		)
	}

	refused := func(want string, set ...string) {
		t.Helper()
		args := []string{"template", deploy.Release, "chart"}
		for _, v := range set {
			args = append(args, "--set", v)
		}
		out, err := exec.Command(helm(t), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("%v: %v, want the error %q\n%s", set, err, want, out)
		}
	}
	refused(
		"migPublication=layout with dynamic MIG GPUs needs the webhook",
		dynamicGPU,
		layoutPub,
		"webhook.enabled=false",
	)
	refused(
		`webhook.enabled must be auto (the default: on where migPublication=layout needs it), `+
			`true or false; not "yes"`,
		"webhook.enabled=yes",
	)
	// The defragmenter with the layout acts on the planner's reservations
	// in the ledgers: --layout-namespace and a Role reading them.
	withDefrag := template(t, dynamicGPU, layoutPub, "defrag.enabled=true")
	found := false
	for _, d := range withDefrag.deployments {
		if strings.HasSuffix(d.Name, "-defrag") {
			found = slices.Contains(
				d.Spec.Template.Spec.Containers[0].Args,
				"--layout-namespace="+deploy.Namespace,
			)
		}
	}
	var defragLayoutRole bool
	for _, role := range withDefrag.roles {
		defragLayoutRole = defragLayoutRole || strings.HasSuffix(role.Name, "-defrag-layout") &&
			slices.Equal(
				rules(role.Namespace, role.Rules),
				[]string{
					deploy.Namespace + "//configmaps/get/*",
					deploy.Namespace + "//configmaps/list/*",
				},
			)
	}
	if !found || !defragLayoutRole {
		t.Errorf(
			"defrag.enabled with the layout: --layout-namespace %v, the Role reading the "+
				"ledgers %v",
			found,
			defragLayoutRole,
		)
	}
	if r := template(t, dynamicGPU, "defrag.enabled=true", "migPublication=placements"); len(
		r.deployments,
	) != 1 {
		t.Errorf(
			"the defragmenter with migPublication=placements: %d Deployments, want the "+
				"defragmenter's",
			len(r.deployments),
		)
	}
	for _, bad := range []string{"bogus", "Layout", ""} {
		refused(
			`migPublication must be placements (every placement with shared counters, `+
				`the default) or layout`,
			"migPublication="+bad,
		)
		refused(`not "`+bad+`"`, "migPublication="+bad)
	}
}

// TestChartLayoutCritical: with the layout, the webhook is a critical
// component: 2 replicas, a PodDisruptionBudget that keeps one (selecting
// exactly its pods), spread across nodes, a priority class, a drain
// (--drain) shorter than its grace period; the planner runs one
// leader-elected replica with a priority class. With replicas=1 there is
// no PDB (it would block every drain).
func TestChartLayoutCritical(t *testing.T) {
	r := template(t, dynamicGPU, layoutPub)
	var web, planner *appsv1.Deployment
	for _, d := range r.deployments {
		switch d.Name {
		case webhookName:
			web = d
		case deploy.DaemonSet + "-planner":
			planner = d
		}
	}
	if web == nil || planner == nil {
		t.Fatalf("webhook %v, planner %v", web != nil, planner != nil)
	}
	spec := web.Spec.Template.Spec
	if web.Spec.Replicas == nil || *web.Spec.Replicas != 2 {
		t.Errorf("webhook replicas %v, want 2", web.Spec.Replicas)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("webhook priority class %q", spec.PriorityClassName)
	}
	if len(spec.TopologySpreadConstraints) != 1 ||
		spec.TopologySpreadConstraints[0].TopologyKey != "kubernetes.io/hostname" ||
		!mapsContain(
			web.Spec.Template.Labels,
			spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels,
		) {
		t.Errorf("webhook spread %+v", spec.TopologySpreadConstraints)
	}
	if !slices.Contains(spec.Containers[0].Args, "--drain=5s") ||
		spec.TerminationGracePeriodSeconds == nil ||
		*spec.TerminationGracePeriodSeconds < 15 {
		t.Errorf(
			"webhook drain: args %v, grace %v",
			spec.Containers[0].Args,
			spec.TerminationGracePeriodSeconds,
		)
	}
	if len(r.pdbs) != 1 || r.pdbs[0].Spec.MinAvailable == nil ||
		r.pdbs[0].Spec.MinAvailable.IntValue() != 1 ||
		!maps.Equal(r.pdbs[0].Spec.Selector.MatchLabels, web.Spec.Selector.MatchLabels) {
		t.Errorf("webhook PDBs %+v, want one keeping 1 of the webhook's pods", r.pdbs)
	}
	if one := template(t, dynamicGPU, layoutPub, "webhook.replicas=1"); len(one.pdbs) != 0 {
		t.Errorf("webhook.replicas=1 renders %d PDBs", len(one.pdbs))
	}
	pspec := planner.Spec.Template.Spec
	if pspec.PriorityClassName != "system-cluster-critical" ||
		!slices.Contains(pspec.Containers[0].Args, "--lease-name="+deploy.DaemonSet+"-planner") ||
		!slices.Contains(pspec.Containers[0].Args, "planner") {
		t.Errorf("planner: priority %q, args %v", pspec.PriorityClassName, pspec.Containers[0].Args)
	}
}
