package deploy_test

import (
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

// template renders the chart with set values.
func template(t testing.TB, set ...string) rendered {
	t.Helper()
	args := []string{"template", deploy.Release, "chart", "--namespace", deploy.Namespace}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	return render(t, args...)
}

// TestChartRollingUpdate: the DaemonSet upgrades without a gap, the
// kubelet's seamless plugin upgrade: a new pod beside the old one
// (maxSurge 1, maxUnavailable 0), the driver told its pod's UID
// (driver.WithRollingUpdate) and its DaemonSet (the owner that pairs
// the two pods), no host port that would keep the new pod off the node,
// and exec probes through the pod's own probe socket.
func TestChartRollingUpdate(t *testing.T) {
	ds := template(t).ds[0]
	u := ds.Spec.UpdateStrategy
	if u.Type != "RollingUpdate" || u.RollingUpdate == nil || u.RollingUpdate.MaxSurge == nil ||
		*u.RollingUpdate.MaxSurge != intstr.FromInt32(1) ||
		u.RollingUpdate.MaxUnavailable == nil ||
		*u.RollingUpdate.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("update strategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", u)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if len(c.Ports) != 0 {
		t.Errorf(
			"container ports %+v: on the host's network they are host ports, and the surge pod "+
				"could not be scheduled",
			c.Ports,
		)
	}
	if !slices.Contains(c.Args, "--pod-uid=$(POD_UID)") ||
		!slices.Contains(c.Args, "--probe-socket=/tmp/probe.sock") {
		t.Errorf("args %v lack --pod-uid=$(POD_UID) or --probe-socket=/tmp/probe.sock", c.Args)
	}
	// The owner the driver's instance locks pair its pods by: this
	// DaemonSet, so that another release's pods are refused.
	if owner := "--rolling-update-owner=" + ds.Namespace + "/" + ds.Name; ds.Namespace == "" ||
		!slices.Contains(c.Args, owner) {
		t.Errorf("args %v lack %s", c.Args, owner)
	}
	uid := false
	for _, e := range c.Env {
		uid = uid ||
			e.Name == "POD_UID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
				e.ValueFrom.FieldRef.FieldPath == "metadata.uid"
	}
	if !uid {
		t.Errorf("env %+v lacks POD_UID from metadata.uid", c.Env)
	}
	for name, p := range map[string]*corev1.Probe{
		"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe,
	} {
		want := []string{
			"/nvidia-dra-driver",
			drivercmd.ProbeCommand,
			"--socket=/tmp/probe.sock",
			name,
		}
		if p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, want) {
			t.Errorf("probe of %s: %+v, want exec %v", name, p, want)
		}
	}
	tmp := false
	for _, v := range spec.Volumes {
		tmp = tmp || v.Name == "tmp" && v.EmptyDir != nil
	}
	if !tmp ||
		!slices.ContainsFunc(
			c.VolumeMounts,
			func(m corev1.VolumeMount) bool { return m.Name == "tmp" && m.MountPath == "/tmp" },
		) {
		t.Error("the probe socket's /tmp is not the pod's own emptyDir")
	}
}

// TestChartLoggingAndGates: logging.format, logVerbosity and featureGates
// reach every component; the defragmenter is deployed when its gate is
// on (featureGates.MIGDefragmenter, else defrag.enabled) and not when it
// is off; the values document every gate the driver has.
func TestChartLoggingAndGates(t *testing.T) {
	args := func(r rendered) []string { return r.ds[0].Spec.Template.Spec.Containers[0].Args }
	def := template(t)
	if a := args(def); !slices.Contains(a, "--logging-format=text") ||
		!slices.Contains(a, "-v=0") ||
		slices.ContainsFunc(
			a, func(s string) bool { return strings.HasPrefix(s, "--feature-gates") },
		) {
		t.Errorf("default args %v: want text logs at -v=0 and no gates set", a)
	}
	r := template(
		t,
		"logging.format=json",
		"logVerbosity=4",
		"featureGates.DynamicMIG=false",
		"featureGates.DynamicMIGWholeGPU=true",
		"webhook.enabled=true",
	)
	want := []string{
		"--logging-format=json",
		"-v=4",
		"--feature-gates=DynamicMIG=false,DynamicMIGWholeGPU=true",
	}
	if a := args(r); !containsAll(a, want) {
		t.Errorf("driver args %v lack %v", a, want)
	}
	for _, d := range r.deployments {
		if a := d.Spec.Template.Spec.Containers[0].Args; !containsAll(a, want) {
			t.Errorf("%s args %v lack %v", d.Name, a, want)
		}
	}

	defrag := func(r rendered) []string {
		for _, d := range r.deployments {
			if strings.HasSuffix(d.Name, "-defrag") {
				return d.Spec.Template.Spec.Containers[0].Args
			}
		}
		return nil
	}
	for _, tc := range []struct {
		set  []string
		want string // the defragmenter's gates; "" not deployed
	}{
		{nil, ""},
		{[]string{"defrag.enabled=true"}, "--feature-gates=MIGDefragmenter=true"},
		{[]string{"featureGates.MIGDefragmenter=true"}, "--feature-gates=MIGDefragmenter=true"},
		{[]string{"defrag.enabled=true", "featureGates.MIGDefragmenter=false"}, ""},
	} {
		a := defrag(template(t, tc.set...))
		switch {
		case tc.want == "" && a != nil:
			t.Errorf("%v: the defragmenter is deployed (%v)", tc.set, a)
		case tc.want != "" && !slices.Contains(a, tc.want):
			t.Errorf("%v: defragmenter args %v, want %s", tc.set, a, tc.want)
		}
	}

	values, err := fs.ReadFile(deploy.Chart(), "values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for gate, spec := range drivercmd.FeatureGates() {
		doc := fmt.Sprintf(
			"%s %s, %s",
			gate,
			strings.ToLower(string(spec.PreRelease)),
			map[bool]string{true: "on", false: "off"}[spec.Default],
		)
		if !strings.Contains(strings.Join(strings.Fields(string(values)), " "), doc) {
			t.Errorf("values.yaml does not document %q", doc)
		}
	}
}

func containsAll(s, want []string) bool {
	for _, w := range want {
		if !slices.Contains(s, w) {
			return false
		}
	}
	return true
}

// TestChartWebhook: webhook.enabled deploys the admission webhook: its
// ValidatingWebhookConfiguration is admission.Webhook for the driver
// (rules, match condition, policies) with the chart's client config and
// failure policy; the webhook keeps its certificate in the chart's empty
// Secret, for the Service's names, and may touch nothing but that Secret
// and that configuration. With webhook.url (drakit's local cluster) the
// API server calls the URL, whose IP is in the certificate.
func TestChartWebhook(t *testing.T) {
	if r := template(t); len(r.webhooks) != 0 || len(r.secrets) != 0 {
		t.Fatalf("the webhook is deployed by default: %d configurations", len(r.webhooks))
	}
	r := template(t, "webhook.enabled=true")
	if len(r.webhooks) != 1 || len(r.secrets) != 1 {
		t.Fatalf(
			"%d ValidatingWebhookConfigurations, %d Secrets; want one of each",
			len(r.webhooks),
			len(r.secrets),
		)
	}
	cfg, secret := r.webhooks[0], r.secrets[0]
	const name, path = "nvidia-dra-driver-webhook", admission.Path
	want := admission.Webhook(
		nvdriver.DriverName,
		admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{
			Namespace: deploy.Namespace, Name: name, Path: ptr.To(path), Port: ptr.To[int32](443)}},
		admissionregv1.Ignore,
	)
	if len(cfg.Webhooks) != 1 {
		t.Fatalf("webhooks %+v", cfg.Webhooks)
	}
	if d := cmp.Diff(want, cfg.Webhooks[0]); d != "" {
		t.Errorf("the chart's webhook differs from admission.Webhook (-want +got):\n%s", d)
	}
	if len(secret.Data) != 0 || secret.Name != name+"-tls" {
		t.Errorf(
			"Secret %s with %d keys, want an empty %s-tls",
			secret.Name,
			len(secret.Data),
			name,
		)
	}
	var svc *corev1.Service
	for _, s := range r.services {
		if s.Name == name {
			svc = s
		}
	}
	if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 {
		t.Fatalf("no Service %s on port 443: %+v", name, r.services)
	}
	var dep *corev1.PodSpec
	for _, d := range r.deployments {
		if d.Name == name {
			dep = &d.Spec.Template.Spec
			if !mapsContain(d.Spec.Template.Labels, svc.Spec.Selector) {
				t.Errorf(
					"the Service selects %v, the webhook's pods are %v",
					svc.Spec.Selector,
					d.Spec.Template.Labels,
				)
			}
		}
	}
	if dep == nil {
		t.Fatal("no webhook Deployment")
	}
	args := dep.Containers[0].Args
	for _, w := range []string{
		drivercmd.WebhookCommand,
		"--address=:8443",
		"--self-signed-secret=" + deploy.Namespace + "/" + secret.Name,
		"--webhook-configuration=" + cfg.Name,
		fmt.Sprintf("--dns-names=%[1]s,%[1]s.%[2]s,%[1]s.%[2]s.svc", name, deploy.Namespace),
	} {
		if !slices.Contains(args, w) {
			t.Errorf("webhook args %v lack %s", args, w)
		}
	}
	if args[0] != drivercmd.WebhookCommand || dep.ServiceAccountName != name || dep.HostNetwork {
		t.Errorf(
			"webhook pod: args %v, ServiceAccount %s, hostNetwork %v",
			args,
			dep.ServiceAccountName,
			dep.HostNetwork,
		)
	}
	// Exactly its Secret and its configuration, by name.
	var got []string
	for _, role := range r.roles {
		if role.Name == name {
			got = append(got, rules(role.Namespace, role.Rules)...)
		}
	}
	for _, role := range r.clusterRoles {
		if role.Name == name {
			got = append(got, rules("", role.Rules)...)
		}
	}
	sort.Strings(got)
	wantRules := []string{
		"/admissionregistration.k8s.io/validatingwebhookconfigurations/get/" + cfg.Name,
		"/admissionregistration.k8s.io/validatingwebhookconfigurations/update/" + cfg.Name,
		deploy.Namespace + "//secrets/get/" + secret.Name,
		deploy.Namespace + "//secrets/update/" + secret.Name,
	}
	if d := cmp.Diff(wantRules, got); d != "" {
		t.Errorf("the webhook's grants (-want +got):\n%s", d)
	}
	bound := 0
	for _, b := range r.rbs {
		if b.RoleRef.Name == name && len(b.Subjects) == 1 && b.Subjects[0].Name == name {
			bound++
		}
	}
	for _, b := range r.crbs {
		if b.RoleRef.Name == name && len(b.Subjects) == 1 && b.Subjects[0].Name == name {
			bound++
		}
	}
	if bound != 2 {
		t.Errorf("the webhook's ServiceAccount is bound to %d of its two roles", bound)
	}

	// The local cluster: by URL, on the host's network, the replicas
	// sharing the port (--reuse-port) and rolling with a surge.
	local := template(
		t,
		"webhook.enabled=true",
		"webhook.url=https://127.0.0.1:8443",
		"webhook.hostNetwork=true",
		"webhook.failurePolicy=Fail",
	)
	lw := local.webhooks[0].Webhooks[0]
	if lw.ClientConfig.URL == nil || *lw.ClientConfig.URL != "https://127.0.0.1:8443"+path ||
		lw.ClientConfig.Service != nil ||
		*lw.FailurePolicy != admissionregv1.Fail {
		t.Errorf(
			"webhook.url: client config %+v, failure policy %s",
			lw.ClientConfig,
			*lw.FailurePolicy,
		)
	}
	for _, d := range local.deployments {
		c := d.Spec.Template.Spec.Containers[0]
		if d.Name == name &&
			(!d.Spec.Template.Spec.HostNetwork || d.Spec.Strategy.Type != "RollingUpdate" ||
				!slices.Contains(c.Args, "--ip-addresses=127.0.0.1") ||
				!slices.Contains(c.Args, "--reuse-port") || len(c.Ports) != 0) {
			t.Errorf(
				"webhook.url, hostNetwork: %+v %v",
				d.Spec.Strategy,
				d.Spec.Template.Spec.Containers[0].Args,
			)
		}
	}
}

func rules(ns string, rs []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rs {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range r.ResourceNames {
						out = append(out, ns+"/"+g+"/"+res+"/"+v+"/"+n)
					}
					if len(r.ResourceNames) == 0 {
						out = append(out, ns+"/"+g+"/"+res+"/"+v+"/*")
					}
				}
			}
		}
	}
	return out
}

func mapsContain(m, sub map[string]string) bool {
	for k, v := range sub {
		if m[k] != v {
			return false
		}
	}
	return len(sub) > 0
}

// TestChartWebhookCertManager: with cert-manager the chart makes a
// self-signed authority, its issuer and the webhook's Certificate into the
// Secret the webhook mounts, and cert-manager injects the caBundle; the
// webhook then needs no rights at all.
func TestChartWebhookCertManager(t *testing.T) {
	out := runHelm(
		t,
		"template",
		deploy.Release,
		"chart",
		"--namespace",
		deploy.Namespace,
		"--set",
		"webhook.enabled=true",
		"--set",
		"webhook.certManager.enabled=true",
	)
	kinds := map[string][]map[string]any{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if k, ok := obj["kind"].(string); ok {
			kinds[k] = append(kinds[k], obj)
		}
	}
	if len(kinds["Issuer"]) != 2 || len(kinds["Certificate"]) != 2 || len(kinds["Secret"]) != 0 {
		t.Errorf(
			"%d Issuers, %d Certificates, %d Secrets; want 2, 2, 0",
			len(kinds["Issuer"]),
			len(kinds["Certificate"]),
			len(kinds["Secret"]),
		)
	}
	var serving map[string]any
	for _, c := range kinds["Certificate"] {
		if c["metadata"].(map[string]any)["name"] == "nvidia-dra-driver-webhook" {
			serving = c
		}
	}
	if serving == nil ||
		serving["spec"].(map[string]any)["secretName"] != "nvidia-dra-driver-webhook-tls" {
		t.Errorf("serving Certificate %v", serving)
	}
	for _, c := range kinds["ValidatingWebhookConfiguration"] {
		if a := c["metadata"].(map[string]any)["annotations"]; a == nil ||
			a.(map[string]any)["cert-manager.io/inject-ca-from"] != deploy.Namespace+
				"/nvidia-dra-driver-webhook" {
			t.Errorf(
				"the webhook configuration's annotations %v lack cert-manager's CA injection",
				a,
			)
		}
	}
	for _, k := range []string{"Role", "ClusterRole"} {
		for _, r := range kinds[k] {
			if r["metadata"].(map[string]any)["name"] == "nvidia-dra-driver-webhook" {
				t.Errorf("with cert-manager the webhook still gets a %s", k)
			}
		}
	}
	if !strings.Contains(out, "--tls-cert-file=/tls/tls.crt") ||
		strings.Contains(out, "--self-signed-secret") {
		t.Error("with cert-manager the webhook does not serve the mounted certificate")
	}
}

// TestChartMetrics: a headless Service over the driver's pods with the
// port "metrics" (for a ServiceMonitor), and the dashboard in a ConfigMap
// for Grafana's sidecar, the chart's file unchanged.
func TestChartMetrics(t *testing.T) {
	r := template(t, "metrics.service.labels.release=prom", "metrics.serviceMonitor.enabled=false")
	ds := r.ds[0]
	var svc *corev1.Service
	for _, s := range r.services {
		if s.Name == "nvidia-dra-driver-metrics" {
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("no metrics Service")
	}
	if svc.Spec.ClusterIP != "None" || len(svc.Spec.Ports) != 1 ||
		svc.Spec.Ports[0].Name != "metrics" ||
		svc.Spec.Ports[0].TargetPort != intstr.FromInt32(51589) ||
		!mapsContain(ds.Spec.Template.Labels, svc.Spec.Selector) ||
		svc.Labels["release"] != "prom" ||
		svc.Labels["app.kubernetes.io/component"] != "metrics" {
		t.Errorf("metrics Service %+v, labels %v", svc.Spec, svc.Labels)
	}
	if len(r.configs) != 1 || r.configs[0].Labels["grafana_dashboard"] != "1" {
		t.Fatalf("dashboard ConfigMaps %+v", r.configs)
	}
	file, err := fs.ReadFile(deploy.Chart(), "dashboards/nvidia-dra-driver.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.configs[0].Data["nvidia-dra-driver.json"]; strings.TrimSpace(
		got,
	) != strings.TrimSpace(
		string(file),
	) {
		t.Error("the ConfigMap's dashboard is not the chart's file")
	}
	out := runHelm(
		t,
		"template",
		deploy.Release,
		"chart",
		"--namespace",
		deploy.Namespace,
		"--set",
		"metrics.serviceMonitor.enabled=true",
	)
	if !strings.Contains(out, "kind: ServiceMonitor") || !strings.Contains(out, "port: metrics") {
		t.Error("metrics.serviceMonitor.enabled renders no ServiceMonitor on the metrics port")
	}
}
