package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/testenv"
)

var update = flag.Bool("update", false, "rewrite manifests/ from the chart")

// helm returns the helm binary drakit setup builds; without it the test
// fails (skips under -short), saying how to install it.
func helm(t testing.TB) string {
	t.Helper()
	p, err := testenv.Helm()
	if err != nil {
		if testing.Short() {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return p
}

func runHelm(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// manifestArgs render the plain manifests: the chart's default values
// plus the Namespace object.
var manifestArgs = []string{
	"template",
	deploy.Release,
	"chart",
	"--namespace",
	deploy.Namespace,
	"--set",
	"namespace.create=true",
}

const manifestFile = "manifests/nvidia-dra-driver.yaml"

func TestHelmLint(t *testing.T) {
	out := runHelm(t, "lint", "--strict", "chart")
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint:\n%s", out)
	}
	// The values the local cluster and the simulator use lint too.
	args := []string{"lint", "--strict", "chart"}
	for _, v := range append(
		deploy.LocalClusterValues("/tmp/k/kubelet", "/tmp/k/cdi", "6443", "/tmp/k/sim", 8443),
		deploy.SimulatorValues()...,
	) {
		args = append(args, "--set", v)
	}
	runHelm(t, args...)
}

// objects decodes a multi-document YAML stream into typed objects.
func objects(t testing.TB, manifest string) []runtime.Object {
	t.Helper()
	dec := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var out []runtime.Object
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read manifest: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		out = append(out, obj)
	}
}

func stripComments(doc []byte) []byte {
	var keep [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			keep = append(keep, l)
		}
	}
	return bytes.Join(keep, []byte("\n"))
}

// rendered are the chart's objects by kind.
type rendered struct {
	ds           []*appsv1.DaemonSet
	sas          []*corev1.ServiceAccount
	namespaces   []*corev1.Namespace
	clusterRoles []*rbacv1.ClusterRole
	crbs         []*rbacv1.ClusterRoleBinding
	roles        []*rbacv1.Role
	rbs          []*rbacv1.RoleBinding
	classes      []*resourceapi.DeviceClass
	policies     []*admissionv1.ValidatingAdmissionPolicy
	bindings     []*admissionv1.ValidatingAdmissionPolicyBinding
	deployments  []*appsv1.Deployment
	// The chart's operating objects (operations_chart_test.go).
	services []*corev1.Service
	configs  []*corev1.ConfigMap
	secrets  []*corev1.Secret
	webhooks []*admissionv1.ValidatingWebhookConfiguration
	pdbs     []*policyv1.PodDisruptionBudget
}

func render(t testing.TB, args ...string) rendered {
	t.Helper()
	var r rendered
	for _, o := range objects(t, runHelm(t, args...)) {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			r.ds = append(r.ds, o)
		case *corev1.ServiceAccount:
			r.sas = append(r.sas, o)
		case *corev1.Namespace:
			r.namespaces = append(r.namespaces, o)
		case *rbacv1.ClusterRole:
			r.clusterRoles = append(r.clusterRoles, o)
		case *rbacv1.ClusterRoleBinding:
			r.crbs = append(r.crbs, o)
		case *rbacv1.Role:
			r.roles = append(r.roles, o)
		case *rbacv1.RoleBinding:
			r.rbs = append(r.rbs, o)
		case *resourceapi.DeviceClass:
			r.classes = append(r.classes, o)
		case *admissionv1.ValidatingAdmissionPolicy:
			r.policies = append(r.policies, o)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			r.bindings = append(r.bindings, o)
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, o)
		case *corev1.Service:
			r.services = append(r.services, o)
		case *corev1.ConfigMap:
			r.configs = append(r.configs, o)
		case *corev1.Secret:
			r.secrets = append(r.secrets, o)
		case *admissionv1.ValidatingWebhookConfiguration:
			r.webhooks = append(r.webhooks, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		default:
			t.Errorf("the chart renders an unexpected %T", o)
		}
	}
	return r
}

// grant is one (group, resource, verb) permission.
type grant struct{ group, resource, verb, namespace string }

func grants(t *testing.T, rules []rbacv1.PolicyRule, ns string) []grant {
	t.Helper()
	var out []grant
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						t.Errorf("wildcard in rule %+v", r)
					}
					out = append(out, grant{g, res, v, ns})
				}
			}
		}
	}
	return out
}

// TestChartObjects renders the chart and checks what it grants and how
// the driver's pod reaches the kubelet: the RBAC is exactly what the
// driver calls (the kubelet plugin helper's ResourceSlice controller,
// claim reads at prepare, the Node that owns the slices, warning Events),
// the ServiceAccount is bound, and every hostPath folder is mounted at
// its own path, so the socket paths the driver registers are the
// kubelet's; the driver root alone is mounted elsewhere, read-only.
func TestChartObjects(t *testing.T) {
	r := render(t, "template", deploy.Release, "chart", "--namespace", deploy.Namespace)
	if len(r.ds) != 1 || len(r.sas) != 1 || len(r.clusterRoles) != 1 || len(r.crbs) != 1 ||
		len(r.roles) != 0 ||
		len(r.rbs) != 0 ||
		len(r.namespaces) != 0 ||
		len(r.policies) != 1 ||
		len(r.bindings) != 1 ||
		len(r.deployments) != 0 {
		t.Fatalf(
			"objects: %d DaemonSets, %d ServiceAccounts, %d ClusterRoles, %d "+
				"ClusterRoleBindings, %d Roles, %d RoleBindings, %d Namespaces, %d "+
				"ValidatingAdmissionPolicies, %d bindings",
			len(
				r.ds,
			),
			len(r.sas),
			len(r.clusterRoles),
			len(r.crbs),
			len(r.roles),
			len(r.rbs),
			len(r.namespaces),
			len(r.policies),
			len(r.bindings),
		)
	}
	sa := r.sas[0]
	var got []grant
	got = append(got, grants(t, r.clusterRoles[0].Rules, "")...)
	want := []grant{
		{
			"resource.k8s.io",
			"resourceslices",
			"get",
			"",
		}, {"resource.k8s.io", "resourceslices", "list", ""},
		{
			"resource.k8s.io",
			"resourceslices",
			"watch",
			"",
		}, {"resource.k8s.io", "resourceslices", "create", ""},
		{
			"resource.k8s.io",
			"resourceslices",
			"update",
			"",
		}, {"resource.k8s.io", "resourceslices", "delete", ""},
		{"resource.k8s.io", "resourceclaims", "get", ""},
		{"", "nodes", "get", ""},
		{
			"",
			"events",
			"create",
			"",
			// every namespace: pods' events; patch: the event recorder counts repeats
		}, {"", "events", "patch", ""},
	}
	less := func(a, b grant) int {
		return strings.Compare(
			a.group+a.resource+a.verb+a.namespace,
			b.group+b.resource+b.verb+b.namespace,
		)
	}
	slices.SortFunc(got, less)
	slices.SortFunc(want, less)
	if !slices.Equal(got, want) {
		t.Errorf("RBAC grants\n%v\nwant exactly\n%v", got, want)
	}
	for _, b := range []struct {
		kind, role string
		ref        rbacv1.RoleRef
		subjects   []rbacv1.Subject
	}{{"ClusterRoleBinding", r.clusterRoles[0].Name, r.crbs[0].RoleRef, r.crbs[0].Subjects}} {
		if b.ref.Name != b.role || len(b.subjects) != 1 || b.subjects[0].Kind != "ServiceAccount" ||
			b.subjects[0].Name != sa.Name ||
			b.subjects[0].Namespace != deploy.Namespace {
			t.Errorf(
				"%s binds %+v to %+v, want role %s to ServiceAccount %s/%s",
				b.kind,
				b.ref,
				b.subjects,
				b.role,
				deploy.Namespace,
				sa.Name,
			)
		}
	}
	// The admission policy narrows the ClusterRole's slice writes to the
	// ServiceAccount's own node (TestResourceSlicePolicy runs it).
	pol, bind := r.policies[0], r.bindings[0]
	if bind.Spec.PolicyName != pol.Name ||
		!slices.Equal(
			bind.Spec.ValidationActions,
			[]admissionv1.ValidationAction{admissionv1.Deny},
		) {
		t.Errorf("binding %+v does not deny through policy %s", bind.Spec, pol.Name)
	}
	if mc := pol.Spec.MatchConditions; len(mc) != 1 ||
		!strings.Contains(
			mc[0].Expression,
			`"system:serviceaccount:`+deploy.Namespace+":"+sa.Name+`"`,
		) {
		t.Errorf("policy matches %+v, want the driver's ServiceAccount", mc)
	}

	ds := r.ds[0]
	if ds.Name != deploy.DaemonSet || ds.Namespace != deploy.Namespace {
		t.Errorf("DaemonSet %s/%s", ds.Namespace, ds.Name)
	}
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name {
		t.Errorf(
			"DaemonSet runs as %q, the chart's ServiceAccount is %q",
			spec.ServiceAccountName,
			sa.Name,
		)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != deploy.Image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s (%s), want %s (IfNotPresent)", c.Image, c.ImagePullPolicy, deploy.Image)
	}
	// Real GPUs by default: only on GPU nodes, privileged (device nodes,
	// MIG), the driver root mounted read-only, no simulator.
	if got := gpuNodeTerms(spec.Affinity); got != "nvidia.com/gpu.present In [true]" {
		t.Errorf("default node affinity %q, want nvidia.com/gpu.present In [true]", got)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("the driver on real GPUs is not privileged: %+v", sc)
	}
	mounts := checkMounts(t, spec, c)
	if m, ok := mounts["/driver-root"]; !ok || !m.ReadOnly || hostPath(spec, m.Name) != "/" {
		t.Errorf(
			"driver root: mount %+v (host %q), want / read-only at /driver-root",
			m,
			hostPath(spec, m.Name),
		)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{
		"--registrar-dir=/var/lib/kubelet/plugins_registry",
		"--plugin-data-dir=/var/lib/kubelet/plugins/gpu.nvidia.drakit.dev",
		"--cdi-dir=/var/run/cdi",
		"--state-dir=/run/nvidia-dra-driver",
		"--driver-root=/",
		"--container-driver-root=/driver-root",
		"--nvidia-cdi-hook-path=/var/lib/kubelet/plugins/gpu.nvidia.drakit.dev/nvidia-cdi-hook",
		"--nvidia-cdi-hook-from=" + deploy.ImageHookPath,
	} {
		if !strings.Contains(args, want) {
			t.Errorf("driver args %q lack %s", args, want)
		}
		_, path, _ := strings.Cut(want, "=")
		if strings.HasPrefix(path, "/") && !strings.Contains(want, "driver-root") &&
			!strings.Contains(want, "nvidia-cdi-hook") {
			if _, ok := mounts[path]; !ok {
				t.Errorf("%s is not mounted from the host (mounts %v)", path, mounts)
			}
		}
	}
	if strings.Contains(args, "nvml-sim") {
		t.Errorf("default values run the simulator: %s", args)
	}
	// The driver root follows the host's mounts (a GPU Operator driver
	// upgrade); the node's own hook where the values name one.
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/driver-root" &&
			(m.MountPropagation == nil ||
				*m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("driver root mount %+v: want mountPropagation HostToContainer", m)
		}
	}
	hargs := strings.Join(
		render(t, "template", deploy.Release, "chart", "--namespace", deploy.Namespace,
			"--set",
			"cdiHook.path=/usr/local/nvidia/toolkit/"+
				"nvidia-cdi-hook").ds[0].Spec.Template.Spec.Containers[0].Args,
		" ",
	)
	if !strings.Contains(
		hargs,
		"--nvidia-cdi-hook-path=/usr/local/nvidia/toolkit/nvidia-cdi-hook",
	) ||
		strings.Contains(hargs, "nvidia-cdi-hook-from") {
		t.Errorf("cdiHook.path set: args %q, want the node's hook and no copy", hargs)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if e.Name == "NODE_NAME" &&
			(e.ValueFrom == nil || e.ValueFrom.FieldRef == nil ||
				e.ValueFrom.FieldRef.FieldPath != "spec.nodeName") {
			t.Errorf("NODE_NAME is not the pod's node: %+v", e)
		}
	}
	if !env["NODE_NAME"] || env["KUBERNETES_SERVICE_HOST"] {
		t.Errorf("env %v: want NODE_NAME, and the service address untouched by default", env)
	}

	// The local cluster's values and the simulator's: its folders, the
	// API server on the node, every node, unprivileged, no driver root.
	local := []string{"template", deploy.Release, "chart", "--namespace", deploy.Namespace}
	for _, v := range append(
		deploy.LocalClusterValues("/tmp/k/kubelet", "/tmp/k/cdi", "6443", "/tmp/k/sim", 8443),
		deploy.SimulatorValues()...,
	) {
		local = append(local, "--set", v)
	}
	lspec := render(t, local...).ds[0].Spec.Template.Spec
	lc := lspec.Containers[0]
	largs := strings.Join(lc.Args, " ")
	for _, want := range []string{
		"--registrar-dir=/tmp/k/kubelet/plugins_registry",
		"--plugin-data-dir=/tmp/k/kubelet/plugins/gpu.nvidia.drakit.dev",
		"--cdi-dir=/tmp/k/cdi",
		"--nvml-sim=dgx-h200",
		"--nvml-sim-state=/tmp/k/sim/state.json",
		"--state-dir=/tmp/k/sim/driver",
		"--nvml-sim-mig-gpus=2-7",
		"--nvml-sim-instances=2:4g.71gb@0,2:3g.71gb@4,3:3g.71gb@0,3:2g.35gb@4,3:1g.18gb@6",
	} {
		if !strings.Contains(largs, want) {
			t.Errorf("simulator values: args %q lack %s", largs, want)
		}
	}
	if strings.Contains(largs, "driver-root") || strings.Contains(largs, "nvidia-cdi-hook") {
		t.Errorf("simulator values: args %q name a driver root", largs)
	}
	lmounts := checkMounts(t, lspec, lc)
	if _, ok := lmounts["/tmp/k/sim"]; !ok {
		t.Errorf("simulator values: the simulator's state is not mounted (mounts %v)", lmounts)
	}
	if sc := lc.SecurityContext; sc == nil || (sc.Privileged != nil && *sc.Privileged) ||
		sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation {
		t.Errorf("the simulated driver runs privileged or may escalate: %+v", sc)
	}
	if lspec.Affinity != nil {
		t.Errorf("simulator values: node affinity %+v, want every node", lspec.Affinity)
	}
	lenv := map[string]string{}
	for _, e := range lc.Env {
		lenv[e.Name] = e.Value
	}
	if lenv["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" ||
		lenv["KUBERNETES_SERVICE_PORT"] != "6443" ||
		lc.ImagePullPolicy != corev1.PullNever {
		t.Errorf("local values: env %v, pull policy %s", lenv, lc.ImagePullPolicy)
	}

	// Which GPUs are dynamic MIG GPUs: the recorded decision by default,
	// the administrator's when set.
	if args := strings.Join(c.Args, " "); strings.Contains(args, "dynamic-mig-gpus") {
		t.Errorf("default values: args %q decide the dynamic MIG GPUs", args)
	}
	dyn := render(
		t,
		"template",
		deploy.Release,
		"chart",
		"--namespace",
		deploy.Namespace,
		"--set",
		"dynamicMIGGPUs=4\\,5",
		"--set",
		"featureGates.DynamicMIG=true",
	)
	if args := strings.Join(
		dyn.ds[0].Spec.Template.Spec.Containers[0].Args, " ",
	); !strings.Contains(
		args,
		"--dynamic-mig-gpus=4,5",
	) {
		t.Errorf("dynamicMIGGPUs=4,5: args %q", args)
	}
	// Dynamic MIG is alpha and off by default: GPUs named without the
	// gate are refused (the driver would refuse them at start), and with
	// the gate set off they are not passed.
	out, err := exec.Command(
		helm(t), "template", deploy.Release, "chart", "--set", "dynamicMIGGPUs=4\\,5",
	).
		CombinedOutput()
	if want := "dynamicMIGGPUs=4,5 needs featureGates.DynamicMIG=true"; err == nil ||
		!strings.Contains(string(out), want) {
		t.Errorf("dynamicMIGGPUs=4,5 without the gate: %v, want the error %q\n%s", err, want, out)
	}
	off := render(
		t,
		"template",
		deploy.Release,
		"chart",
		"--namespace",
		deploy.Namespace,
		"--set",
		"dynamicMIGGPUs=4\\,5",
		"--set",
		"featureGates.DynamicMIG=false",
	)
	if args := strings.Join(off.ds[0].Spec.Template.Spec.Containers[0].Args, " "); strings.Contains(
		args,
		"dynamic-mig-gpus",
	) {
		t.Errorf("dynamicMIGGPUs=4,5 with DynamicMIG=false: args %q name dynamic GPUs", args)
	}

	// An administrator's own GPU label.
	own := render(
		t,
		"template",
		deploy.Release,
		"chart",
		"--namespace",
		deploy.Namespace,
		"--set",
		"gpuNodeLabel=example.com/has-gpu",
	)
	if got := gpuNodeTerms(
		own.ds[0].Spec.Template.Spec.Affinity,
	); got != "example.com/has-gpu In [true]" {
		t.Errorf("gpuNodeLabel=example.com/has-gpu: node affinity %q", got)
	}
}

// gpuNodeTerms is a required node affinity as "key op [values]".
func gpuNodeTerms(a *corev1.Affinity) string {
	if a == nil || a.NodeAffinity == nil ||
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.
		NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			out = append(out, fmt.Sprintf("%s %s %v", e.Key, e.Operator, e.Values))
		}
	}
	return strings.Join(out, " | ")
}

func hostPath(spec corev1.PodSpec, volume string) string {
	for _, v := range spec.Volumes {
		if v.Name == volume && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

// checkMounts checks that every volume is a hostPath mounted at its own
// path (or /tmp's emptyDir, or the driver root, read-only at
// /driver-root) and returns the mounts by path.
func checkMounts(
	t *testing.T,
	spec corev1.PodSpec,
	c corev1.Container,
) map[string]corev1.VolumeMount {
	t.Helper()
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Name == "tmp" && v.EmptyDir != nil {
			hostPaths[v.Name] = "/tmp" // the read-only root's only writable folder
			continue
		}
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath", v.Name)
			continue
		}
		hostPaths[v.Name] = v.HostPath.Path
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if m.Name == "driver-root" {
			if m.MountPath != "/driver-root" || !m.ReadOnly {
				t.Errorf("driver root mounted %+v, want read-only at /driver-root", m)
			}
		} else if hostPaths[m.Name] != m.MountPath {
			t.Errorf(
				"volume %s: host %s mounted at %s; the driver's paths must be the host's",
				m.Name,
				hostPaths[m.Name],
				m.MountPath,
			)
		}
		mounts[m.MountPath] = m
	}
	return mounts
}

// TestManifestsCurrent checks that manifests/ is what the chart renders
// (go test -run TestManifestsCurrent -update rewrites it), and that it
// holds the Namespace the chart leaves to helm --create-namespace.
func TestManifestsCurrent(t *testing.T) {
	want := "# Generated from chart/ by: helm " + strings.Join(manifestArgs, " ") + "\n" +
		"# (go test ./examples/nvidia/deploy -run TestManifestsCurrent -update). Do not edit.\n" +
		runHelm(t, manifestArgs...)
	if *update {
		if err := os.MkdirAll(filepath.Dir(manifestFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(manifestFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatalf("%v (go test -run TestManifestsCurrent -update writes it)", err)
	}
	if string(got) != want {
		t.Errorf(
			"%s is not what the chart renders; run: go test ./examples/nvidia/deploy -run "+
				"TestManifestsCurrent -update",
			manifestFile,
		)
	}
	r := render(t, manifestArgs...)
	if len(r.namespaces) != 1 || r.namespaces[0].Name != deploy.Namespace {
		t.Errorf("manifests hold namespaces %v, want %s", r.namespaces, deploy.Namespace)
	}
}

// TestChartDeviceClasses checks that the chart's DeviceClasses are the
// driver's own, driver.DeviceClasses, field for field (names, CEL
// selectors, extended resource names): by default the two generic
// classes without extended resource names (the device plugin may serve
// nvidia.com/gpu on the same nodes); per-profile classes for the
// profiles the driver is told to advertise (migProfiles) or an own list;
// the extended resource names only when asked for.
func TestChartDeviceClasses(t *testing.T) {
	p, err := mig.Lookup("H200-141GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		set      []string
		profiles []string
		extended bool
	}{
		{"default values: no per-profile classes, no extended resources", nil, nil, false},
		{
			"simulator values: every H200 profile, extended resources",
			deploy.SimulatorValues(),
			p.ProfileNames(),
			true,
		},
		{
			"the profiles the driver advertises",
			[]string{"migProfiles={1g.18gb,3g.71gb}"},
			[]string{"1g.18gb", "3g.71gb"},
			false,
		},
		{
			"a list of classes of its own",
			[]string{
				"migProfiles={1g.18gb}",
				"deviceClasses.migProfiles={2g.35gb,1g.18gb+me}",
				"deviceClasses.extendedResources=true",
			},
			[]string{"2g.35gb", "1g.18gb+me"},
			true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", deploy.Release, "chart", "--namespace", deploy.Namespace}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			got := render(t, args...).classes
			want := nvdriver.DeviceClasses(tc.profiles)
			if !tc.extended {
				for _, c := range want {
					c.Spec.ExtendedResourceName = nil
				}
			}
			if len(got) != len(want) {
				t.Fatalf(
					"the chart has %d DeviceClasses, driver.DeviceClasses %d",
					len(got),
					len(want),
				)
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.Name != w.Name || !equality.Semantic.DeepEqual(g.Spec, w.Spec) {
					t.Errorf(
						"class %d: chart\n%s %+v\nGo\n%s %+v",
						i,
						g.Name,
						spec(g),
						w.Name,
						spec(w),
					)
				}
			}
		})
	}
}

func spec(c *resourceapi.DeviceClass) string {
	var sel []string
	for _, s := range c.Spec.Selectors {
		if s.CEL != nil {
			sel = append(sel, s.CEL.Expression)
		}
	}
	return fmt.Sprintf(
		"selectors %q extendedResourceName %v",
		sel,
		ptrString(c.Spec.ExtendedResourceName),
	)
}

func ptrString(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
