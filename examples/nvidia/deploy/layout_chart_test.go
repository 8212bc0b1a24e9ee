package deploy_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregv1 "k8s.io/api/admissionregistration/v1"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// layoutPolicy is the name of the layout publication's
// ValidatingAdmissionPolicy and of its binding.
const layoutPolicy = deploy.DaemonSet + "-layout-allocations"

// TestChartLayoutPublication: migPublication=layout gives the driver
// --mig-publication=layout and installs the ValidatingAdmissionPolicy
// that refuses allocations from an older publication of a layout: on
// UPDATE of resourceclaims/status, only for writes that allocate a device
// of this driver (matchConditions), once per ResourceSlice (paramKind
// ResourceSlice, a binding selecting every slice, no slice: allowed),
// failing closed, denying. The default (placements) leaves the driver's
// arguments as they were and installs no such policy; any other value is
// refused with a message. The policy's CEL runs on an API server in
// TestLayoutPolicy.
func TestChartLayoutPublication(t *testing.T) {
	args := func(r rendered) []string {
		t.Helper()
		if len(r.ds) != 1 || len(r.ds[0].Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%d DaemonSets", len(r.ds))
		}
		return r.ds[0].Spec.Template.Spec.Containers[0].Args
	}
	layoutObjects := func(r rendered) (*admissionregv1.ValidatingAdmissionPolicy, *admissionregv1.ValidatingAdmissionPolicyBinding) {
		var p *admissionregv1.ValidatingAdmissionPolicy
		var b *admissionregv1.ValidatingAdmissionPolicyBinding
		for _, o := range r.policies {
			if o.Name == layoutPolicy {
				p = o
			}
		}
		for _, o := range r.bindings {
			if o.Name == layoutPolicy {
				b = o
			}
		}
		return p, b
	}

	def := template(t)
	if p, b := layoutObjects(def); p != nil || b != nil {
		t.Errorf("default values render the layout policy (%v) or its binding (%v)", p != nil, b != nil)
	}
	defArgs := args(def)
	if slices.ContainsFunc(defArgs, func(a string) bool { return strings.Contains(a, "mig-publication") }) {
		t.Errorf("default args %v name a MIG publication", defArgs)
	}
	if diff := cmp.Diff(defArgs, args(template(t, "migPublication=placements"))); diff != "" {
		t.Errorf("migPublication=placements changes the args (-default +placements):\n%s", diff)
	}

	r := template(t, "migPublication=layout")
	la := args(r)
	var rest []string
	n := 0
	for _, a := range la {
		if a == "--mig-publication=layout" {
			n++
			continue
		}
		rest = append(rest, a)
	}
	if n != 1 {
		t.Errorf("migPublication=layout: args %v, want --mig-publication=layout once", la)
	}
	if diff := cmp.Diff(defArgs, rest); diff != "" {
		t.Errorf("migPublication=layout changes other args (-default +layout):\n%s", diff)
	}

	p, b := layoutObjects(r)
	if p == nil || b == nil {
		t.Fatalf("migPublication=layout: policy %v, binding %v; want both named %s", p != nil, b != nil, layoutPolicy)
	}
	s := p.Spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionregv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", s.FailurePolicy)
	}
	if s.ParamKind == nil || s.ParamKind.APIVersion != "resource.k8s.io/v1" || s.ParamKind.Kind != "ResourceSlice" {
		t.Errorf("paramKind %+v, want resource.k8s.io/v1 ResourceSlice", s.ParamKind)
	}
	var rules []string
	if s.MatchConstraints != nil {
		for _, rr := range s.MatchConstraints.ResourceRules {
			for _, res := range rr.Resources {
				for _, op := range rr.Operations {
					rules = append(rules, strings.Join(rr.APIGroups, ",")+"/"+strings.Join(rr.APIVersions, ",")+"/"+res+"/"+string(op))
				}
			}
		}
	}
	if diff := cmp.Diff([]string{"resource.k8s.io/*/resourceclaims/status/UPDATE"}, rules); diff != "" {
		t.Errorf("matchConstraints (-want +got):\n%s", diff)
	}
	var conds []string
	for _, c := range s.MatchConditions {
		conds = append(conds, c.Expression)
	}
	all := strings.Join(conds, " && ")
	if !strings.Contains(all, "oldObject.status.allocation") || !strings.Contains(all, `r.driver == "`+nvdriver.DriverName+`"`) {
		t.Errorf("matchConditions %q: want only writes that allocate a device of %s", conds, nvdriver.DriverName)
	}
	if len(s.Validations) != 1 || s.Validations[0].MessageExpression == "" {
		t.Errorf("validations %+v, want one with a messageExpression", s.Validations)
	}
	if p.Labels["app.kubernetes.io/instance"] != deploy.Release || b.Labels["app.kubernetes.io/instance"] != deploy.Release {
		t.Errorf("labels %v, %v: want the chart's", p.Labels, b.Labels)
	}
	bs := b.Spec
	if bs.PolicyName != layoutPolicy || !slices.Equal(bs.ValidationActions, []admissionregv1.ValidationAction{admissionregv1.Deny}) {
		t.Errorf("binding %s to %s with %v, want Deny through %s", b.Name, bs.PolicyName, bs.ValidationActions, layoutPolicy)
	}
	if pr := bs.ParamRef; pr == nil || pr.Name != "" || pr.Selector == nil || len(pr.Selector.MatchLabels) != 0 || len(pr.Selector.MatchExpressions) != 0 ||
		pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction != admissionregv1.AllowAction {
		t.Errorf("paramRef %+v, want selector {} (every slice) and parameterNotFoundAction Allow", pr)
	}
	if bs.MatchResources != nil {
		t.Errorf("binding matchResources %+v, want every namespace", bs.MatchResources)
	}

	for _, bad := range []string{"bogus", "Layout", ""} {
		out, err := exec.Command(helm(t), "template", deploy.Release, "chart", "--set", "migPublication="+bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "migPublication must be placements") || !strings.Contains(string(out), `not "`+bad+`"`) {
			t.Errorf("migPublication=%q: %v\n%s", bad, err, out)
		}
	}
}
