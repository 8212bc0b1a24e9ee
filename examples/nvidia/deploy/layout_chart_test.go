package deploy_test

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// webhookName is the name of the chart's webhook: its Deployment,
// Service, ServiceAccount and roles.
const webhookName = "nvidia-dra-driver-webhook"

// TestChartLayoutPublication: migPublication=layout gives the driver
// --mig-publication=layout and needs the webhook (without it the render
// fails with a message); the webhook then runs with --layout-allocations
// (its other arguments unchanged), its configuration gets a second entry
// equal to admission.LayoutWebhook (UPDATE of resourceclaims/status at
// admission.LayoutPath, only writes that allocate a device of this
// driver, failurePolicy webhook.layoutFailurePolicy, Fail by default),
// beside the configuration check unchanged, and its ServiceAccount may
// get, list and watch ResourceSlices, nothing more. No
// ValidatingAdmissionPolicy is installed (the one that did this before
// was evaluated once per ResourceSlice in the cluster). The default
// (placements) leaves the driver's and the webhook's arguments and the
// webhook's configuration as they were; any other value is refused with
// a message. The webhook's behaviour on an API server is
// admission.TestLayoutOnAPIServer's.
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
			if len(b.Subjects) == 1 && b.Subjects[0].Name == webhookName && b.Subjects[0].Namespace == deploy.Namespace {
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
			Namespace: deploy.Namespace, Name: webhookName, Path: ptr.To(path), Port: ptr.To[int32](443)}}
	}

	def := template(t, "webhook.enabled=true")
	for _, p := range def.policies {
		if strings.Contains(p.Name, "layout") {
			t.Errorf("default values render the policy %s", p.Name)
		}
	}
	defArgs := args(def)
	if slices.ContainsFunc(defArgs, func(a string) bool { return strings.Contains(a, "mig-publication") }) {
		t.Errorf("default args %v name a MIG publication", defArgs)
	}
	if slices.Contains(webhookArgs(def), "--layout-allocations") {
		t.Errorf("default webhook args %v check layout allocations", webhookArgs(def))
	}
	if len(def.webhooks) != 1 || len(def.webhooks[0].Webhooks) != 1 {
		t.Errorf("default: %d webhook configurations, want one of one webhook", len(def.webhooks))
	}
	placements := template(t, "webhook.enabled=true", "migPublication=placements")
	if diff := cmp.Diff(defArgs, args(placements)); diff != "" {
		t.Errorf("migPublication=placements changes the args (-default +placements):\n%s", diff)
	}
	if diff := cmp.Diff(def.webhooks, placements.webhooks); diff != "" {
		t.Errorf("migPublication=placements changes the webhooks (-default +placements):\n%s", diff)
	}

	r := template(t, "webhook.enabled=true", "migPublication=layout")
	rest, n := without(args(r), "--mig-publication=layout")
	if n != 1 {
		t.Errorf("migPublication=layout: args %v, want --mig-publication=layout once", args(r))
	}
	if diff := cmp.Diff(defArgs, rest); diff != "" {
		t.Errorf("migPublication=layout changes other args (-default +layout):\n%s", diff)
	}
	rest, n = without(webhookArgs(r), "--layout-allocations")
	if n != 1 {
		t.Errorf("migPublication=layout: webhook args %v, want --layout-allocations once", webhookArgs(r))
	}
	if diff := cmp.Diff(webhookArgs(def), rest); diff != "" {
		t.Errorf("migPublication=layout changes the webhook's other args (-default +layout):\n%s", diff)
	}
	for _, p := range r.policies {
		if strings.Contains(p.Name, "layout") {
			t.Errorf("migPublication=layout renders the policy %s; the webhook does its work", p.Name)
		}
	}
	if len(r.webhooks) != 1 || len(r.webhooks[0].Webhooks) != 2 {
		t.Fatalf("migPublication=layout: %d webhook configurations, want one of two webhooks", len(r.webhooks))
	}
	ws := r.webhooks[0].Webhooks
	if diff := cmp.Diff(def.webhooks[0].Webhooks[0], ws[0]); diff != "" {
		t.Errorf("migPublication=layout changes the configuration check (-default +layout):\n%s", diff)
	}
	want := admission.LayoutWebhook(nvdriver.DriverName, service(admission.LayoutPath), admissionregv1.Fail)
	if diff := cmp.Diff(want, ws[1]); diff != "" {
		t.Errorf("the chart's layout webhook differs from admission.LayoutWebhook (-want +got):\n%s", diff)
	}
	wantGrants := append(grants(def), "/resource.k8s.io/resourceslices/get/*", "/resource.k8s.io/resourceslices/list/*", "/resource.k8s.io/resourceslices/watch/*")
	sort.Strings(wantGrants)
	if diff := cmp.Diff(wantGrants, grants(r)); diff != "" {
		t.Errorf("the webhook's cluster grants with migPublication=layout (-want +got):\n%s", diff)
	}

	// The failure policy is a value; by URL, the guard's path.
	ignore := template(t, "webhook.enabled=true", "migPublication=layout", "webhook.layoutFailurePolicy=Ignore",
		"webhook.url=https://127.0.0.1:8443/", "webhook.hostNetwork=true")
	want = admission.LayoutWebhook(nvdriver.DriverName, admissionregv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:8443" + admission.LayoutPath)}, admissionregv1.Ignore)
	if len(ignore.webhooks) != 1 || len(ignore.webhooks[0].Webhooks) != 2 {
		t.Fatalf("layoutFailurePolicy=Ignore, url: %d configurations", len(ignore.webhooks))
	}
	if diff := cmp.Diff(want, ignore.webhooks[0].Webhooks[1]); diff != "" {
		t.Errorf("layoutFailurePolicy=Ignore, url (-want +got):\n%s", diff)
	}
	// With cert-manager's certificates (not decodable here: read as
	// text), the same role and its binding to the webhook.
	cm := runHelm(t, "template", deploy.Release, "chart", "--namespace", deploy.Namespace, "--set", "webhook.enabled=true",
		"--set", "migPublication=layout", "--set", "webhook.certManager.enabled=true")
	if strings.Count(cm, "name: "+webhookName+"-layout\n") != 3 || !strings.Contains(cm, "resources: [resourceslices]\n    verbs: [get, list, watch]") ||
		!strings.Contains(cm, "- --layout-allocations") {
		t.Errorf("with cert-manager: the webhook's ClusterRole %s-layout, its binding or --layout-allocations missing", webhookName)
	}

	out, err := exec.Command(helm(t), "template", deploy.Release, "chart", "--set", "migPublication=layout").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "migPublication=layout needs the webhook (webhook.enabled=true)") {
		t.Errorf("migPublication=layout without the webhook: %v\n%s", err, out)
	}
	for _, bad := range []string{"bogus", "Layout", ""} {
		out, err := exec.Command(helm(t), "template", deploy.Release, "chart", "--set", "webhook.enabled=true", "--set", "migPublication="+bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "migPublication must be placements") || !strings.Contains(string(out), `not "`+bad+`"`) {
			t.Errorf("migPublication=%q: %v\n%s", bad, err, out)
		}
	}
}
