package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
	"github.com/drakit/drakit/topology"
)

// addFakeNode is cluster.AddFakeNode retried on write conflicts: a
// controller may touch the new node between its create and status update.
func addFakeNode(ctx context.Context, c *cluster.Cluster, name string, labels map[string]string, alloc corev1.ResourceList) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return c.AddFakeNode(ctx, name, labels, alloc) })
}

func runDrakit(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTopologyLabelsOffline(t *testing.T) {
	code, out, errs := runDrakit(t, "topology", "labels",
		"--from-labels", "topology.k8s.aws/network-node-layer-3=nn-3,topology.drakit.dev/block=mine,topology.k8s.aws/network-node-layer-2=nn-2",
		"--set", "interconnect-domain=nvl-4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := `node (labels):
  + topology.drakit.dev/rack=nn-3 (from topology.k8s.aws/network-node-layer-3)
  + topology.drakit.dev/interconnect-domain=nvl-4 (from fact)
  ! topology.drakit.dev/block=mine kept: not written by drakit; topology.k8s.aws/network-node-layer-2 says nn-2
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestTopologyLabelsOfflineJSON(t *testing.T) {
	code, out, errs := runDrakit(t, "topology", "labels", "-o", "json",
		"--map", "example.com/rack=rack", "--no-builtin",
		"--from-labels", "example.com/rack=r1,topology.k8s.aws/network-node-layer-2=nn-2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got []nodeResult
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	want := []nodeResult{{
		Node:    "(labels)",
		Changes: []topology.Change{{Op: topology.OpAdd, Key: topology.RackLabel, New: "r1", From: "example.com/rack"}},
		Owned:   []string{topology.RackLabel},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func TestTopologyUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"topology"}, "missing subcommand"},
		{"unknown subcommand", []string{"topology", "frob"}, `"frob"`},
		{"no nodes", []string{"topology", "labels"}, "name nodes"},
		{"nodes and --all", []string{"topology", "labels", "--all", "n1"}, "name nodes"},
		{"offline with --apply", []string{"topology", "labels", "--from-labels", "a=b", "--apply"}, "offline"},
		{"bad --set", []string{"topology", "labels", "--from-labels", "a=b", "--set", "rack"}, "LEVEL=VALUE"},
		{"fact for host", []string{"topology", "labels", "--from-labels", "a=b", "--set", "host=x"}, "host"},
		{"bad --map", []string{"topology", "labels", "--from-labels", "a=b", "--map", "example.com/r=pod"}, "pod"},
		{"bad output", []string{"topology", "labels", "--from-labels", "a=b", "-o", "xml"}, "xml"},
		{"bad --from-labels", []string{"topology", "labels", "--from-labels", "novalue"}, "novalue"},
		{"keys with args", []string{"topology", "keys", "x"}, "no arguments"},
		{"claim without requests", []string{"topology", "claim"}, "spec.devices.requests"},
		{"claim bad count", []string{"topology", "claim", "--request", "gpu=g:0"}, "count"},
		{"claim unknown request", []string{"topology", "claim", "--request", "gpu=g", "--same-pcie-root", "gpu,nic"}, `"nic"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runDrakit(t, tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (usage); stderr:\n%s", code, errs)
			}
			if !strings.Contains(errs, tt.want) {
				t.Errorf("stderr does not mention %q:\n%s", tt.want, errs)
			}
		})
	}
}

func TestTopologyKeys(t *testing.T) {
	code, out, errs := runDrakit(t, "topology", "keys")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, k := range topology.Hierarchy() {
		if !strings.Contains(out, k.Label) {
			t.Errorf("keys output lacks %s", k.Label)
		}
	}
	for _, m := range topology.Mappings() {
		if !strings.Contains(out, m.From) {
			t.Errorf("keys output lacks %s", m.From)
		}
	}
}

func TestTopologyClaim(t *testing.T) {
	code, out, errs := runDrakit(t, "topology", "claim", "--name", "pair", "--namespace", "ml", "--template",
		"--request", "gpu=gpu.example.com:2", "--request", "nic=nic.example.com",
		"--same-pcie-root", "gpu,nic", "--same-numa-node=")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got resourceapi.ResourceClaimTemplate
	if err := yaml.UnmarshalStrict([]byte(out), &got); err != nil {
		t.Fatalf("output is not a ResourceClaimTemplate: %v\n%s", err, out)
	}
	want, err := topology.ClaimSpec([]topology.Request{
		{Name: "gpu", DeviceClassName: "gpu.example.com", Count: 2},
		{Name: "nic", DeviceClassName: "nic.example.com"},
	}, topology.SamePCIeRoot("gpu", "nic"), topology.SameNUMANode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != "ResourceClaimTemplate" || got.Name != "pair" || got.Namespace != "ml" {
		t.Errorf("got %s %s/%s", got.Kind, got.Namespace, got.Name)
	}
	if diff := cmp.Diff(want, got.Spec.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

// TestTopologyLabelsOnCluster runs the command against a real API server:
// a dry run writes nothing, --apply writes and records ownership, and a
// label drakit does not own is reported, never changed.
func TestTopologyLabelsOnCluster(t *testing.T) {
	c := clustertest.Start(t)
	ctx := context.Background()
	nodes := map[string]map[string]string{
		"topo-cli-0": {"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s1", "pool": "gpu"},
		"topo-cli-1": {"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s2", "pool": "gpu",
			topology.RackLabel: "admin-rack"},
		"topo-cli-2": {"cloud.google.com/gce-topology-block": "b2", "pool": "cpu"},
	}
	for name, labels := range nodes {
		if err := addFakeNode(ctx, c, name, labels, nil); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := runDrakit(t, "topology", "labels", "--kubeconfig", c.Kubeconfig, "-l", "pool=gpu", "--set", "interconnect-domain=nvl-1")
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errs)
	}
	want := `node topo-cli-0:
  + topology.drakit.dev/block=b1 (from cloud.google.com/gce-topology-block)
  + topology.drakit.dev/rack=s1 (from cloud.google.com/gce-topology-subblock)
  + topology.drakit.dev/interconnect-domain=nvl-1 (from fact)
node topo-cli-1:
  + topology.drakit.dev/block=b1 (from cloud.google.com/gce-topology-block)
  + topology.drakit.dev/interconnect-domain=nvl-1 (from fact)
  ! topology.drakit.dev/rack=admin-rack kept: not written by drakit; cloud.google.com/gce-topology-subblock says s2
dry run: nothing written; run with --apply to write the labels
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("dry-run output (-want +got):\n%s", diff)
	}
	for name, labels := range nodes {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range n.Labels {
			if strings.HasPrefix(k, "topology.drakit.dev/") && labels[k] == "" {
				t.Errorf("dry run wrote %s on %s", k, name)
			}
		}
	}

	code, _, errs = runDrakit(t, "topology", "labels", "--kubeconfig", c.Kubeconfig, "--apply", "topo-cli-0", "topo-cli-1")
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errs)
	}
	wantLabels := map[string]map[string]string{
		"topo-cli-0": {topology.BlockLabel: "b1", topology.RackLabel: "s1"},
		"topo-cli-1": {topology.BlockLabel: "b1", topology.RackLabel: "admin-rack"},
	}
	wantOwned := map[string]string{
		"topo-cli-0": topology.BlockLabel + "," + topology.RackLabel,
		"topo-cli-1": topology.BlockLabel,
	}
	for name, want := range wantLabels {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if n.Labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", name, k, n.Labels[k], v)
			}
		}
		if got := n.Annotations[topology.OwnedLabelsAnnotation]; got != wantOwned[name] {
			t.Errorf("%s: owned annotation %q, want %q", name, got, wantOwned[name])
		}
	}

	// The source goes away: the owned label is removed, the admin's stays.
	for _, name := range []string{"topo-cli-0", "topo-cli-1"} {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(n.Labels, "cloud.google.com/gce-topology-subblock")
		if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs = runDrakit(t, "topology", "labels", "--kubeconfig", c.Kubeconfig, "--apply", "topo-cli-0", "topo-cli-1")
	if code != 0 {
		t.Fatalf("second apply: exit %d: %s", code, errs)
	}
	want = `node topo-cli-0:
  - topology.drakit.dev/rack, was s1 (no source left)
node topo-cli-1:
  up to date
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("second apply output (-want +got):\n%s", diff)
	}
	n1, err := c.Client.CoreV1().Nodes().Get(ctx, "topo-cli-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n1.Labels[topology.RackLabel] != "admin-rack" {
		t.Errorf("admin's rack label on topo-cli-1 became %q", n1.Labels[topology.RackLabel])
	}
	n0, err := c.Client.CoreV1().Nodes().Get(ctx, "topo-cli-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n0.Labels[topology.RackLabel]; ok {
		t.Errorf("owned rack label on topo-cli-0 kept (%q) after its source went", v)
	}
}
