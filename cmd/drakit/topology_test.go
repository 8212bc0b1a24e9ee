package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/topology"
)

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
