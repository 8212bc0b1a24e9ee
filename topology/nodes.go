package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Level is one level of the node topology hierarchy.
type Level string

// The levels, from the widest to the narrowest.
const (
	// LevelRegion is a cloud region or a site.
	LevelRegion Level = "region"
	// LevelZone is an availability zone: a failure domain within a region.
	LevelZone Level = "zone"
	// LevelSuperblock is the hosts under one third-tier (core or
	// super-spine) network switch layer: the widest network grouping below
	// a zone.
	LevelSuperblock Level = "superblock"
	// LevelBlock is the hosts under one second-tier (spine or aggregation)
	// switch layer.
	LevelBlock Level = "block"
	// LevelRack is the hosts under one first-tier (leaf or top-of-rack)
	// switch: the closest network neighbours.
	LevelRack Level = "rack"
	// LevelInterconnectDomain is the hosts whose accelerators share a
	// scale-up fabric, such as one multi-node NVLink domain or clique.
	// Accelerators talk across hosts without the network inside it.
	LevelInterconnectDomain Level = "interconnect-domain"
	// LevelHost is one node.
	LevelHost Level = "host"
)

// The node label keys of the hierarchy. Region, zone and host are the
// well-known Kubernetes labels; the others are drakit's.
const (
	// RegionLabel is the Kubernetes well-known region label.
	RegionLabel = corev1.LabelTopologyRegion
	// ZoneLabel is the Kubernetes well-known zone label.
	ZoneLabel = corev1.LabelTopologyZone
	// SuperblockLabel holds the node's superblock ID.
	SuperblockLabel = "topology.drakit.dev/superblock"
	// BlockLabel holds the node's block ID.
	BlockLabel = "topology.drakit.dev/block"
	// RackLabel holds the node's rack ID.
	RackLabel = "topology.drakit.dev/rack"
	// InterconnectDomainLabel holds the ID of the node's accelerator
	// interconnect domain.
	InterconnectDomainLabel = "topology.drakit.dev/interconnect-domain"
	// HostLabel is the Kubernetes well-known hostname label. The kubelet
	// owns it; drakit never writes it.
	HostLabel = corev1.LabelHostname

	// OwnedLabelsAnnotation lists, comma-separated, the labels of a node
	// that drakit wrote and may therefore change or remove. drakit never
	// changes or removes a label that is not listed there.
	OwnedLabelsAnnotation = "topology.drakit.dev/owned-labels"
)

// Key describes one level of the hierarchy.
type Key struct {
	// Level is the level.
	Level Level
	// Label is the node label key that holds the node's ID at this level.
	Label string
	// Writable tells whether the labeler may write the label (all but
	// host).
	Writable bool
	// Meaning says which nodes share a value.
	Meaning string
}

var hierarchy = []Key{
	{LevelRegion, RegionLabel, true, "nodes in one region or site"},
	{LevelZone, ZoneLabel, true, "nodes in one availability zone"},
	{LevelSuperblock, SuperblockLabel, true, "nodes under one third-tier (core / super-spine) switch layer"},
	{LevelBlock, BlockLabel, true, "nodes under one second-tier (spine / aggregation) switch layer"},
	{LevelRack, RackLabel, true, "nodes under one first-tier (leaf / top-of-rack) switch"},
	{LevelInterconnectDomain, InterconnectDomainLabel, true, "nodes whose accelerators share a scale-up fabric (e.g. one NVLink domain)"},
	{LevelHost, HostLabel, false, "one node (set by the kubelet)"},
}

// Hierarchy returns the levels from the widest to the narrowest. The slice
// is a copy.
func Hierarchy() []Key { return slices.Clone(hierarchy) }

// LabelFor returns the node label key of level, or an error for an
// unknown level.
func LabelFor(level Level) (string, error) {
	for _, k := range hierarchy {
		if k.Level == level {
			return k.Label, nil
		}
	}
	return "", fmt.Errorf("look up level %q: %w", level, ErrUnknownLevel)
}

// ErrUnknownLevel is returned (wrapped) for a Level not in Hierarchy.
var ErrUnknownLevel = errors.New("unknown topology level")

// PodGroupTopology returns the PodGroup topology constraint (scheduling.k8s.io
// v1beta1 schedulingConstraints.topology) that keeps a gang within one
// domain of level, e.g. LevelRack.
func PodGroupTopology(level Level) (schedulingv1beta1.TopologyConstraint, error) {
	label, err := LabelFor(level)
	if err != nil {
		return schedulingv1beta1.TopologyConstraint{}, fmt.Errorf("build PodGroup topology: %w", err)
	}
	return schedulingv1beta1.TopologyConstraint{Key: label}, nil
}

// Mapping maps a node label that a cloud or vendor sets to a level: a node
// with label From gets the level's label with the same value.
type Mapping struct {
	// From is the source label key.
	From string
	// Level is the level it denotes.
	Level Level
	// Source names who sets From.
	Source string
	// Note qualifies the mapping; may be empty.
	Note string
}

// builtinMappings is the table in the package documentation; keep the two
// in sync (TestMappingTableIsDocumented checks it). Order is priority:
// for a level, the first mapping whose label a node has wins.
var builtinMappings = []Mapping{
	{"failure-domain.beta.kubernetes.io/region", LevelRegion, "Kubernetes (deprecated beta label)", ""},
	{"failure-domain.beta.kubernetes.io/zone", LevelZone, "Kubernetes (deprecated beta label)", ""},
	{"topology.k8s.aws/network-node-layer-1", LevelSuperblock, "AWS (EKS)", "top of the EC2 network hierarchy"},
	{"topology.k8s.aws/network-node-layer-2", LevelBlock, "AWS (EKS)", "middle layer"},
	{"topology.k8s.aws/network-node-layer-3", LevelRack, "AWS (EKS)", "bottom layer on 3-layer instance types; layer-4 (4-layer types only) is finer and not mapped"},
	{"cloud.google.com/gce-topology-block", LevelBlock, "Google Cloud (GKE)", "reservation block"},
	{"cloud.google.com/gce-topology-subblock", LevelRack, "Google Cloud (GKE)", "sub-block within a block"},
	{"nvidia.com/gpu.clique", LevelInterconnectDomain, "NVIDIA GPU feature discovery / DRA driver", "multi-node NVLink clique, <cluster UUID>.<clique ID>"},
	{"accelerator.topograph.run/domain", LevelInterconnectDomain, "NVIDIA Topograph (v1)", ""},
	{"fabric.topograph.run/tier-0", LevelRack, "NVIDIA Topograph (v1)", "switch tier closest to the node"},
	{"fabric.topograph.run/tier-1", LevelBlock, "NVIDIA Topograph (v1)", ""},
	{"fabric.topograph.run/tier-2", LevelSuperblock, "NVIDIA Topograph (v1)", ""},
	{"topology.nebius.com/tier-0", LevelInterconnectDomain, "Nebius AI Cloud (Managed Kubernetes)", "direct accelerator interconnect such as multi-node NVLink; only on nodes that have one"},
	{"topology.nebius.com/tier-1", LevelRack, "Nebius AI Cloud (Managed Kubernetes)", "rack-level (leaf) InfiniBand switches"},
	{"topology.nebius.com/tier-2", LevelBlock, "Nebius AI Cloud (Managed Kubernetes)", "spine-level switches joining blocks in a data center"},
	{"network.topology.nvidia.com/accelerator", LevelInterconnectDomain, "NVIDIA Topograph (before v1)", ""},
	{"network.topology.nvidia.com/leaf", LevelRack, "NVIDIA Topograph (before v1)", ""},
	{"network.topology.nvidia.com/spine", LevelBlock, "NVIDIA Topograph (before v1)", ""},
	{"network.topology.nvidia.com/core", LevelSuperblock, "NVIDIA Topograph (before v1)", ""},
}

// Mappings returns the built-in mapping table in priority order. The slice
// is a copy.
func Mappings() []Mapping { return slices.Clone(builtinMappings) }

// LabelOption configures a Labeler.
type LabelOption func(*labelOptions) error

type labelOptions struct {
	facts    map[Level]string
	extra    []Mapping
	builtins bool
}

// WithFact sets the value of level for the node outright, as a driver or
// admin knows it (e.g. the NVLink domain a GPU driver discovered). A fact
// wins over every mapping. The value must be a valid label value and the
// level writable (not host).
func WithFact(level Level, value string) LabelOption {
	return func(o *labelOptions) error {
		if err := checkWritable(level); err != nil {
			return fmt.Errorf("fact %s: %w", level, err)
		}
		if value == "" {
			return fmt.Errorf("fact %s: value must not be empty", level)
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return fmt.Errorf("fact %s: value %q: %s", level, value, strings.Join(errs, "; "))
		}
		o.facts[level] = value
		return nil
	}
}

// WithMapping adds mappings that take priority over the built-in table, in
// the order given (a site's own rack label, say). From must be a valid
// label key and Level writable.
func WithMapping(m ...Mapping) LabelOption {
	return func(o *labelOptions) error {
		for _, x := range m {
			if errs := validation.IsQualifiedName(x.From); len(errs) > 0 {
				return fmt.Errorf("mapping from %q: %s", x.From, strings.Join(errs, "; "))
			}
			if err := checkWritable(x.Level); err != nil {
				return fmt.Errorf("mapping from %q: %w", x.From, err)
			}
		}
		o.extra = append(o.extra, m...)
		return nil
	}
}

// WithoutBuiltinMappings turns the built-in table off: only WithMapping
// mappings and facts are used.
func WithoutBuiltinMappings() LabelOption {
	return func(o *labelOptions) error { o.builtins = false; return nil }
}

func checkWritable(level Level) error {
	for _, k := range hierarchy {
		if k.Level == level {
			if !k.Writable {
				return fmt.Errorf("level %s is not written by drakit", level)
			}
			return nil
		}
	}
	return fmt.Errorf("%w %q", ErrUnknownLevel, level)
}

// Labeler computes the standard topology labels of nodes.
type Labeler struct {
	facts    map[Level]string
	mappings []Mapping
}

// NewLabeler returns a Labeler with the built-in mappings plus opts.
func NewLabeler(opts ...LabelOption) (*Labeler, error) {
	o := labelOptions{facts: map[Level]string{}, builtins: true}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("create labeler: %w", err)
		}
	}
	l := &Labeler{facts: o.facts, mappings: slices.Clone(o.extra)}
	if o.builtins {
		l.mappings = append(l.mappings, builtinMappings...)
	}
	return l, nil
}

// Op is what a Change does.
type Op string

// The operations of a Change.
const (
	// OpAdd adds a label the node lacks.
	OpAdd Op = "add"
	// OpUpdate changes the value of a label drakit owns.
	OpUpdate Op = "update"
	// OpRemove removes a label drakit owns and no longer has a source for.
	OpRemove Op = "remove"
)

// Change is one label change of a Plan.
type Change struct {
	// Op is the operation.
	Op Op
	// Key is the label key.
	Key string
	// Old is the current value ("" for OpAdd).
	Old string
	// New is the new value ("" for OpRemove).
	New string
	// From says where New comes from: "fact" or the source label key.
	From string
}

// Conflict is a label the node has, that drakit does not own, whose value
// differs from what the sources say. It is left alone.
type Conflict struct {
	// Key is the label key.
	Key string
	// Existing is the node's value, kept.
	Existing string
	// Wanted is the value the sources give.
	Wanted string
	// From says where Wanted comes from.
	From string
}

// Plan is what labelling one node does.
type Plan struct {
	// Changes are the label changes, in hierarchy order.
	Changes []Change
	// Conflicts are the labels left alone although sources disagree.
	Conflicts []Conflict
	// Owned is the sorted list of labels drakit owns after the changes;
	// it goes in OwnedLabelsAnnotation.
	Owned []string
	// ownedBefore is the annotation as found (normalized).
	ownedBefore string
}

// Empty tells whether applying the plan changes nothing on the node.
func (p Plan) Empty() bool {
	return len(p.Changes) == 0 && strings.Join(p.Owned, ",") == p.ownedBefore
}

// Plan computes the labels node should have: for each writable level, the
// fact given, else the value of the first mapping whose label the node
// has. A label the node lacks is added and becomes owned; an owned label is
// updated or, with no source left, removed; a label not owned is never
// changed or removed (a different value is reported as a Conflict). An
// equal label that is not owned stays not owned. The owned set comes from
// OwnedLabelsAnnotation; entries in it that drakit cannot write are ignored.
func (l *Labeler) Plan(node *corev1.Node) Plan {
	labels := node.Labels
	owned := map[string]bool{}
	writable := map[string]bool{}
	for _, k := range hierarchy {
		if k.Writable {
			writable[k.Label] = true
		}
	}
	var before []string
	for _, k := range strings.Split(node.Annotations[OwnedLabelsAnnotation], ",") {
		k = strings.TrimSpace(k)
		if writable[k] && !owned[k] {
			owned[k] = true
			before = append(before, k)
		}
	}
	slices.Sort(before)
	p := Plan{ownedBefore: strings.Join(before, ",")}
	if raw, ok := node.Annotations[OwnedLabelsAnnotation]; ok && raw != p.ownedBefore {
		p.ownedBefore = "\x00" + raw // force a rewrite of a non-normalized annotation
	}
	var after []string
	for _, k := range hierarchy {
		if !k.Writable {
			continue
		}
		want, from, ok := l.desired(k.Level, labels)
		cur, has := labels[k.Label]
		mine := owned[k.Label]
		switch {
		case ok && !has:
			p.Changes = append(p.Changes, Change{Op: OpAdd, Key: k.Label, New: want, From: from})
			after = append(after, k.Label)
		case ok && cur == want:
			if mine {
				after = append(after, k.Label)
			}
		case ok && mine:
			p.Changes = append(p.Changes, Change{Op: OpUpdate, Key: k.Label, Old: cur, New: want, From: from})
			after = append(after, k.Label)
		case ok:
			p.Conflicts = append(p.Conflicts, Conflict{Key: k.Label, Existing: cur, Wanted: want, From: from})
		case has && mine:
			p.Changes = append(p.Changes, Change{Op: OpRemove, Key: k.Label, Old: cur})
		}
	}
	slices.Sort(after)
	p.Owned = after
	return p
}

func (l *Labeler) desired(level Level, labels map[string]string) (value, from string, ok bool) {
	if v, ok := l.facts[level]; ok {
		return v, "fact", true
	}
	for _, m := range l.mappings {
		if m.Level != level {
			continue
		}
		if v := labels[m.From]; v != "" {
			return v, m.From, true
		}
	}
	return "", "", false
}

// ApplyTo makes the plan's changes to node's labels and records the owned
// labels in OwnedLabelsAnnotation (removed when none are owned). It does
// not touch any other label or annotation.
func (p Plan) ApplyTo(node *corev1.Node) {
	for _, c := range p.Changes {
		switch c.Op {
		case OpAdd, OpUpdate:
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[c.Key] = c.New
		case OpRemove:
			delete(node.Labels, c.Key)
		}
	}
	if len(p.Owned) == 0 {
		delete(node.Annotations, OwnedLabelsAnnotation)
		return
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[OwnedLabelsAnnotation] = strings.Join(p.Owned, ",")
}

// PodGroup returns a scheduling.k8s.io/v1beta1 PodGroup for a gang of at
// least minCount pods that must all land within one domain of level (e.g.
// one rack). Pods join it with spec.schedulingGroup.podGroupName = name.
// The cluster needs the GenericWorkload and TopologyAwareWorkloadScheduling
// feature gates; without the latter the API server silently drops the
// topology constraint.
func PodGroup(namespace, name string, minCount int32, level Level) (*schedulingv1beta1.PodGroup, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("build PodGroup: metadata.name %q: %s", name, strings.Join(errs, "; "))
	}
	if minCount < 1 {
		return nil, fmt.Errorf("build PodGroup %s: spec.schedulingPolicy.gang.minCount %d: must be at least 1", name, minCount)
	}
	tc, err := PodGroupTopology(level)
	if err != nil {
		return nil, fmt.Errorf("build PodGroup %s: %w", name, err)
	}
	return &schedulingv1beta1.PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{tc}},
		},
	}, nil
}
