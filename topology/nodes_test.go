package topology_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/topology"
)

func node(labels, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: annotations}}
}

func owned(keys ...string) map[string]string {
	return map[string]string{topology.OwnedLabelsAnnotation: strings.Join(keys, ",")}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name          string
		opts          []topology.LabelOption
		node          *corev1.Node
		want          []topology.Change
		wantConflicts []topology.Conflict
		wantLabels    map[string]string // node labels after ApplyTo
		wantOwned     string            // annotation after ApplyTo; "-" for none
	}{{
		name: "AWS network layers",
		node: node(map[string]string{
			"topology.k8s.aws/network-node-layer-1": "nn-1", "topology.k8s.aws/network-node-layer-2": "nn-2",
			"topology.k8s.aws/network-node-layer-3": "nn-3", topology.ZoneLabel: "us-east-1a",
		}, nil),
		want: []topology.Change{
			{Op: topology.OpAdd, Key: topology.SuperblockLabel, New: "nn-1", From: "topology.k8s.aws/network-node-layer-1"},
			{Op: topology.OpAdd, Key: topology.BlockLabel, New: "nn-2", From: "topology.k8s.aws/network-node-layer-2"},
			{Op: topology.OpAdd, Key: topology.RackLabel, New: "nn-3", From: "topology.k8s.aws/network-node-layer-3"},
		},
		wantLabels: map[string]string{
			"topology.k8s.aws/network-node-layer-1": "nn-1", "topology.k8s.aws/network-node-layer-2": "nn-2",
			"topology.k8s.aws/network-node-layer-3": "nn-3", topology.ZoneLabel: "us-east-1a",
			topology.SuperblockLabel: "nn-1", topology.BlockLabel: "nn-2", topology.RackLabel: "nn-3",
		},
		wantOwned: "topology.drakit.dev/block,topology.drakit.dev/rack,topology.drakit.dev/superblock",
	}, {
		name: "GKE blocks and deprecated zone label",
		node: node(map[string]string{
			"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s1",
			"cloud.google.com/gce-topology-host": "h1", "failure-domain.beta.kubernetes.io/zone": "us-central1-a",
		}, nil),
		want: []topology.Change{
			{Op: topology.OpAdd, Key: topology.ZoneLabel, New: "us-central1-a", From: "failure-domain.beta.kubernetes.io/zone"},
			{Op: topology.OpAdd, Key: topology.BlockLabel, New: "b1", From: "cloud.google.com/gce-topology-block"},
			{Op: topology.OpAdd, Key: topology.RackLabel, New: "s1", From: "cloud.google.com/gce-topology-subblock"},
		},
		wantLabels: map[string]string{
			"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s1",
			"cloud.google.com/gce-topology-host": "h1", "failure-domain.beta.kubernetes.io/zone": "us-central1-a",
			topology.ZoneLabel: "us-central1-a", topology.BlockLabel: "b1", topology.RackLabel: "s1",
		},
		wantOwned: "topology.drakit.dev/block,topology.drakit.dev/rack,topology.kubernetes.io/zone",
	}, {
		name: "Nebius tiers; the fabric ID is not mapped",
		node: node(map[string]string{
			"topology.nebius.com/tier-0": "nvl-1", "topology.nebius.com/tier-1": "leaf-1",
			"topology.nebius.com/tier-2": "spine-1", "topology.nebius.com/gpu-cluster-id": "fabric-1",
		}, nil),
		want: []topology.Change{
			{Op: topology.OpAdd, Key: topology.BlockLabel, New: "spine-1", From: "topology.nebius.com/tier-2"},
			{Op: topology.OpAdd, Key: topology.RackLabel, New: "leaf-1", From: "topology.nebius.com/tier-1"},
			{Op: topology.OpAdd, Key: topology.InterconnectDomainLabel, New: "nvl-1", From: "topology.nebius.com/tier-0"},
		},
		wantLabels: map[string]string{
			"topology.nebius.com/tier-0": "nvl-1", "topology.nebius.com/tier-1": "leaf-1",
			"topology.nebius.com/tier-2": "spine-1", "topology.nebius.com/gpu-cluster-id": "fabric-1",
			topology.BlockLabel: "spine-1", topology.RackLabel: "leaf-1", topology.InterconnectDomainLabel: "nvl-1",
		},
		wantOwned: "topology.drakit.dev/block,topology.drakit.dev/interconnect-domain,topology.drakit.dev/rack",
	}, {
		name: "NVIDIA clique beats Topograph; a fact beats both",
		opts: []topology.LabelOption{topology.WithFact(topology.LevelRack, "r7")},
		node: node(map[string]string{
			"accelerator.topograph.run/domain": "topo", "nvidia.com/gpu.clique": "9f2c0d5e-1111-2222-3333-444455556666.3",
			"fabric.topograph.run/tier-0": "leaf-1",
		}, nil),
		want: []topology.Change{
			{Op: topology.OpAdd, Key: topology.RackLabel, New: "r7", From: "fact"},
			{Op: topology.OpAdd, Key: topology.InterconnectDomainLabel, New: "9f2c0d5e-1111-2222-3333-444455556666.3", From: "nvidia.com/gpu.clique"},
		},
		wantLabels: map[string]string{
			"accelerator.topograph.run/domain": "topo", "nvidia.com/gpu.clique": "9f2c0d5e-1111-2222-3333-444455556666.3",
			"fabric.topograph.run/tier-0": "leaf-1",
			topology.RackLabel:            "r7", topology.InterconnectDomainLabel: "9f2c0d5e-1111-2222-3333-444455556666.3",
		},
		wantOwned: "topology.drakit.dev/interconnect-domain,topology.drakit.dev/rack",
	}, {
		name: "own mapping beats the built-in table",
		opts: []topology.LabelOption{topology.WithMapping(topology.Mapping{From: "example.com/rack", Level: topology.LevelRack})},
		node: node(map[string]string{"example.com/rack": "mine", "topology.k8s.aws/network-node-layer-3": "nn-3"}, nil),
		want: []topology.Change{
			{Op: topology.OpAdd, Key: topology.RackLabel, New: "mine", From: "example.com/rack"},
		},
		wantLabels: map[string]string{"example.com/rack": "mine", "topology.k8s.aws/network-node-layer-3": "nn-3", topology.RackLabel: "mine"},
		wantOwned:  "topology.drakit.dev/rack",
	}, {
		name: "owned label follows its source; unowned one does not",
		node: node(map[string]string{
			"topology.k8s.aws/network-node-layer-3": "new", "topology.k8s.aws/network-node-layer-2": "b-new",
			topology.RackLabel: "old", topology.BlockLabel: "admin-set",
		}, owned(topology.RackLabel)),
		want: []topology.Change{
			{Op: topology.OpUpdate, Key: topology.RackLabel, Old: "old", New: "new", From: "topology.k8s.aws/network-node-layer-3"},
		},
		wantConflicts: []topology.Conflict{
			{Key: topology.BlockLabel, Existing: "admin-set", Wanted: "b-new", From: "topology.k8s.aws/network-node-layer-2"},
		},
		wantLabels: map[string]string{
			"topology.k8s.aws/network-node-layer-3": "new", "topology.k8s.aws/network-node-layer-2": "b-new",
			topology.RackLabel: "new", topology.BlockLabel: "admin-set",
		},
		wantOwned: "topology.drakit.dev/rack",
	}, {
		name: "owned label with no source left is removed, unowned one stays",
		node: node(map[string]string{topology.RackLabel: "r1", topology.BlockLabel: "b1", "other": "x"},
			map[string]string{topology.OwnedLabelsAnnotation: topology.RackLabel, "keep": "me"}),
		want: []topology.Change{
			{Op: topology.OpRemove, Key: topology.RackLabel, Old: "r1"},
		},
		wantLabels: map[string]string{topology.BlockLabel: "b1", "other": "x"},
		wantOwned:  "-",
	}, {
		name:       "equal unowned label is left unowned",
		node:       node(map[string]string{topology.RackLabel: "nn-3", "topology.k8s.aws/network-node-layer-3": "nn-3"}, nil),
		wantLabels: map[string]string{topology.RackLabel: "nn-3", "topology.k8s.aws/network-node-layer-3": "nn-3"},
		wantOwned:  "-",
	}, {
		name: "annotation cannot make drakit own labels it never writes",
		node: node(map[string]string{topology.HostLabel: "n", "app": "x"},
			owned(topology.HostLabel, "app", " ")),
		wantLabels: map[string]string{topology.HostLabel: "n", "app": "x"},
		wantOwned:  "-",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := topology.NewLabeler(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			p := l.Plan(tt.node)
			if diff := cmp.Diff(tt.want, p.Changes, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantConflicts, p.Conflicts, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("conflicts (-want +got):\n%s", diff)
			}
			n := tt.node.DeepCopy()
			p.ApplyTo(n)
			if diff := cmp.Diff(tt.wantLabels, n.Labels, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("labels after ApplyTo (-want +got):\n%s", diff)
			}
			gotOwned, ok := n.Annotations[topology.OwnedLabelsAnnotation]
			if !ok {
				gotOwned = "-"
			}
			if gotOwned != tt.wantOwned {
				t.Errorf("owned annotation after ApplyTo = %q, want %q", gotOwned, tt.wantOwned)
			}
			for k, v := range tt.node.Annotations {
				if k != topology.OwnedLabelsAnnotation && n.Annotations[k] != v {
					t.Errorf("annotation %s changed to %q", k, n.Annotations[k])
				}
			}
			// A second pass over the result has nothing left to do.
			if again := l.Plan(n); !again.Empty() {
				t.Errorf("plan after ApplyTo is not empty: %+v", again)
			}
		})
	}
}

func TestPlanEmptyTracksAnnotation(t *testing.T) {
	l, err := topology.NewLabeler()
	if err != nil {
		t.Fatal(err)
	}
	// The labels are right but the annotation is stale: not empty.
	n := node(map[string]string{topology.RackLabel: "x"}, owned(topology.RackLabel+",app"))
	n.Labels["topology.k8s.aws/network-node-layer-3"] = "x"
	if p := l.Plan(n); p.Empty() {
		t.Errorf("plan for a stale annotation is empty: %+v", p)
	}
}

func TestLabelOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  topology.LabelOption
		want string
	}{
		{"fact for host", topology.WithFact(topology.LevelHost, "x"), "host"},
		{"fact for unknown level", topology.WithFact("pod", "x"), "unknown topology level"},
		{"empty fact", topology.WithFact(topology.LevelRack, ""), "empty"},
		{"fact not a label value", topology.WithFact(topology.LevelRack, "a b"), `"a b"`},
		{"fact too long", topology.WithFact(topology.LevelRack, strings.Repeat("a", 64)), "63"},
		{"mapping from bad key", topology.WithMapping(topology.Mapping{From: "bad key", Level: topology.LevelRack}), `"bad key"`},
		{"mapping to host", topology.WithMapping(topology.Mapping{From: "example.com/h", Level: topology.LevelHost}), "host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topology.NewLabeler(tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewLabeler: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestWithoutBuiltinMappings(t *testing.T) {
	l, err := topology.NewLabeler(topology.WithoutBuiltinMappings())
	if err != nil {
		t.Fatal(err)
	}
	if p := l.Plan(node(map[string]string{"topology.k8s.aws/network-node-layer-3": "x"}, nil)); !p.Empty() {
		t.Errorf("plan without mappings = %+v, want empty", p)
	}
}

func TestPodGroupTopology(t *testing.T) {
	c, err := topology.PodGroupTopology(topology.LevelRack)
	if err != nil || c.Key != topology.RackLabel {
		t.Errorf("PodGroupTopology(rack) = %+v, %v", c, err)
	}
	if _, err := topology.PodGroupTopology("pod"); err == nil {
		t.Error("PodGroupTopology(pod): no error")
	}
}

func TestPodGroup(t *testing.T) {
	pg, err := topology.PodGroup("ml", "train", 8, topology.LevelInterconnectDomain)
	if err != nil {
		t.Fatal(err)
	}
	out, err := topology.YAML(pg)
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata:
  name: train
  namespace: ml
spec:
  schedulingConstraints:
    topology:
    - key: topology.drakit.dev/interconnect-domain
  schedulingPolicy:
    gang:
      minCount: 8
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("PodGroup YAML (-want +got):\n%s", diff)
	}
	for _, bad := range []struct {
		name  string
		count int32
		level topology.Level
	}{{"Train", 1, topology.LevelRack}, {"t", 0, topology.LevelRack}, {"t", 1, "pod"}} {
		if _, err := topology.PodGroup("ml", bad.name, bad.count, bad.level); err == nil {
			t.Errorf("PodGroup(%q, %d, %q): no error", bad.name, bad.count, bad.level)
		}
	}
}

// TestMappingTableIsDocumented keeps the package doc's table and the code
// in step.
func TestMappingTableIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range topology.Hierarchy() {
		if !strings.Contains(string(doc), k.Label) {
			t.Errorf("doc.go does not show hierarchy label %s", k.Label)
		}
	}
	for _, m := range topology.Mappings() {
		line := m.From + " "
		found := false
		for _, l := range strings.Split(string(doc), "\n") {
			if strings.Contains(l, line) && strings.Contains(l, string(m.Level)) {
				found = true
			}
		}
		if !found {
			t.Errorf("doc.go has no table row mapping %s to %s", m.From, m.Level)
		}
	}
}
