package defrag

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// schedulingTaint reports the taints that keep a pod off a node (the
// scheduler's TaintToleration filter).
func schedulingTaint(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// landing is the cluster as a plan's replacements meet it: the pods the
// plan evicts are gone, and the replacements landed so far run on their
// destinations.
type landing struct {
	c     *Controller
	cl    *cluster
	gone  map[types.UID]bool
	added []*corev1.Pod
	// namespaces caches namespace labels read for namespaceSelectors.
	namespaces map[string]labels.Set
}

// newLanding starts the landing of plan p's replacements.
func (c *Controller) newLanding(cl *cluster, p *plan) *landing {
	l := &landing{c: c, cl: cl, gone: map[types.UID]bool{}, namespaces: map[string]labels.Set{}}
	for _, e := range p.op.Evictions {
		l.gone[e.Pod.UID] = true
	}
	return l
}

// replacementOf is pod's replacement as the scheduler sees it on node:
// the same spec, bound there, not yet running.
func replacementOf(pod *corev1.Pod, node string) *corev1.Pod {
	r := &corev1.Pod{ObjectMeta: *pod.ObjectMeta.DeepCopy(), Spec: *pod.Spec.DeepCopy()}
	r.UID = types.UID("replacement-of-" + string(pod.UID))
	r.Spec.NodeName = node
	return r
}

// land records that r (a replacement) runs on its node from now on.
func (l *landing) land(r *corev1.Pod) { l.added = append(l.added, r) }

// pods are the pods the scheduler counts, with their nodes: those bound
// and not finished, less the ones the plan evicts, plus the
// replacements landed so far.
func (l *landing) pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range l.cl.pods {
		if p.Spec.NodeName == "" || l.gone[p.UID] || p.Status.Phase == corev1.PodSucceeded ||
			p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return append(out, l.added...)
}

// fits says why the scheduler's filters, besides node selection
// (nodeAdmits) and the pod's claims (the allocator), would not place r
// on node, "" when they would: NodeResourcesFit (requests and pod count
// against allocatable less the node's pods), NodePorts, the volumes'
// topology (VolumeBinding, VolumeZone), PodTopologySpread's hard
// constraints and InterPodAffinity's required terms, as kube-scheduler
// 1.37 checks them. Resources, ports, spread and pod affinity are
// written here (their filters live only in k8s.io/kubernetes); the
// cluster tests compare their verdicts with the real scheduler's.
func (l *landing) fits(ctx context.Context, r *corev1.Pod, node *corev1.Node) string {
	onNode := l.onNode(node.Name)
	for _, check := range []func() string{
		func() string { return l.resources(r, node, onNode) },
		func() string { return hostPortsConflict(r, onNode) },
		func() string { return l.volumes(ctx, r, node) },
		func() string { return l.spread(r, node) },
		func() string { return l.affinity(ctx, r, node) },
	} {
		if why := check(); why != "" {
			return why
		}
	}
	return ""
}

// onNode are the pods on node.
func (l *landing) onNode(node string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range l.pods() {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}

// resources checks r's requests and the pod count against node's
// allocatable less the requests of the pods on it (NodeResourcesFit). An
// extended resource that a DeviceClass maps (DRA's extended resources)
// is the allocator's, not the node's.
func (l *landing) resources(r *corev1.Pod, node *corev1.Node, onNode []*corev1.Pod) string {
	alloc := node.Status.Allocatable
	if max, ok := alloc[corev1.ResourcePods]; ok && int64(len(onNode)+1) > max.Value() {
		return fmt.Sprintf(
			"node %s runs %d pods, its most (allocatable pods %d)",
			node.Name,
			len(onNode),
			max.Value(),
		)
	}
	want := resourcehelper.PodRequests(r, resourcehelper.PodResourcesOptions{})
	dra := sets.New[corev1.ResourceName]()
	for _, dc := range l.cl.snap.Classes {
		if dc.Spec.ExtendedResourceName != nil {
			dra.Insert(corev1.ResourceName(*dc.Spec.ExtendedResourceName))
		}
	}
	used := corev1.ResourceList{}
	for _, p := range onNode {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		name := corev1.ResourceName(n)
		q := want[name]
		if q.IsZero() || dra.Has(name) {
			continue
		}
		free := alloc[name].DeepCopy()
		u := used[name]
		free.Sub(u)
		if q.Cmp(free) > 0 {
			total, left := alloc[name], nonNegative(free)
			return fmt.Sprintf(
				"node %s has too little %s: it requests %s, and %s of its allocatable %s is free",
				node.Name,
				name,
				q.String(),
				left.String(),
				total.String(),
			)
		}
	}
	return ""
}

func nonNegative(q resource.Quantity) resource.Quantity {
	if q.Sign() < 0 {
		return resource.Quantity{}
	}
	return q
}

// hostPort is a host port a pod takes.
type hostPort struct {
	ip, protocol string
	port         int32
}

// hostPortsOf are the host ports of pod's containers and sidecars.
func hostPortsOf(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []corev1.Container, sidecarsOnly bool) {
		for _, c := range cs {
			if sidecarsOnly &&
				ptr.Deref(c.RestartPolicy, "") != corev1.ContainerRestartPolicyAlways {
				continue
			}
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				ip, proto := p.HostIP, string(p.Protocol)
				if ip == "" {
					ip = "0.0.0.0"
				}
				if proto == "" {
					proto = string(corev1.ProtocolTCP)
				}
				out = append(out, hostPort{ip, proto, p.HostPort})
			}
		}
	}
	add(pod.Spec.Containers, false)
	add(pod.Spec.InitContainers, true)
	return out
}

// hostPortsConflict says which host port of r a pod on its node takes
// (NodePorts), "" when none.
func hostPortsConflict(r *corev1.Pod, onNode []*corev1.Pod) string {
	want := hostPortsOf(r)
	if len(want) == 0 {
		return ""
	}
	for _, p := range onNode {
		for _, h := range hostPortsOf(p) {
			for _, w := range want {
				if h.port == w.port && h.protocol == w.protocol &&
					(h.ip == w.ip || h.ip == "0.0.0.0" || w.ip == "0.0.0.0") {
					return fmt.Sprintf(
						"host port %s/%d is taken on node %s by pod %s/%s",
						w.protocol,
						w.port,
						r.Spec.NodeName,
						p.Namespace,
						p.Name,
					)
				}
			}
		}
	}
	return ""
}

// volumes checks that r's volumes can be used on node: a claim bound to
// a volume whose node affinity or zone labels exclude the node cannot
// (VolumeBinding, VolumeZone), nor an unbound claim whose class
// provisions immediately, or whose allowed topologies exclude the node;
// a generic ephemeral volume gets a new claim of its template's class.
func (l *landing) volumes(ctx context.Context, r *corev1.Pod, node *corev1.Node) string {
	for i := range r.Spec.Volumes {
		v := &r.Spec.Volumes[i]
		var class *string
		switch {
		case v.PersistentVolumeClaim != nil:
			name := v.PersistentVolumeClaim.ClaimName
			pvc, err := l.c.client.CoreV1().
				PersistentVolumeClaims(r.Namespace).
				Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Sprintf("its volume claim %s cannot be read: %v", name, err)
			}
			if pvc.Spec.VolumeName != "" {
				pv, err := l.c.client.CoreV1().
					PersistentVolumes().
					Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
				if err != nil {
					return fmt.Sprintf(
						"volume %s of its claim %s cannot be read: %v",
						pvc.Spec.VolumeName,
						name,
						err,
					)
				}
				if err := volume.CheckNodeAffinity(pv, node.Labels); err != nil {
					return fmt.Sprintf(
						"its volume %s (claim %s) is not reachable from node %s: %v",
						pv.Name,
						name,
						node.Name,
						err,
					)
				}
				if why := zoneLabelsExclude(pv, node); why != "" {
					return fmt.Sprintf("its volume %s (claim %s) %s", pv.Name, name, why)
				}
				continue
			}
			class = pvc.Spec.StorageClassName
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			// The replacement's own claim, made for it (named after
			// it), unbound.
			class = v.Ephemeral.VolumeClaimTemplate.Spec.StorageClassName
		default:
			continue
		}
		if why := l.unboundClaim(ctx, class, node); why != "" {
			return fmt.Sprintf("its volume %s: %s", v.Name, why)
		}
	}
	return ""
}

// zoneLabels are the volume labels VolumeZone compares with the node's.
var zoneLabels = []string{
	corev1.LabelTopologyZone,
	corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone,
	corev1.LabelFailureDomainBetaRegion,
}

// zoneLabelsExclude says why pv's zone or region labels exclude node.
func zoneLabelsExclude(pv *corev1.PersistentVolume, node *corev1.Node) string {
	for _, k := range zoneLabels {
		v, ok := pv.Labels[k]
		if !ok {
			continue
		}
		nv, has := node.Labels[k]
		if !has {
			continue // the scheduler skips labels the node lacks
		}
		if !slices.Contains(strings.Split(v, "__"), nv) {
			return fmt.Sprintf("is in %s %s, node %s in %s", k, v, node.Name, nv)
		}
	}
	return ""
}

// unboundClaim checks an unbound claim of storage class class (nil: the
// default class) on node.
func (l *landing) unboundClaim(ctx context.Context, class *string, node *corev1.Node) string {
	var sc *storagev1.StorageClass
	if class != nil && *class != "" {
		got, err := l.c.client.StorageV1().StorageClasses().Get(ctx, *class, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("its storage class %s is not found", *class)
		}
		if err != nil {
			return fmt.Sprintf("its storage class %s cannot be read: %v", *class, err)
		}
		sc = got
	}
	if sc == nil {
		return "" // provisioned by the default class wherever it lands
	}
	if sc.VolumeBindingMode == nil ||
		*sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		return fmt.Sprintf(
			"its claim of storage class %s is unbound and binds immediately, not for the node",
			sc.Name,
		)
	}
	if len(sc.AllowedTopologies) == 0 {
		return ""
	}
	for _, t := range sc.AllowedTopologies {
		ok := true
		for _, e := range t.MatchLabelExpressions {
			ok = ok && slices.Contains(e.Values, node.Labels[e.Key])
		}
		if ok {
			return ""
		}
	}
	return fmt.Sprintf(
		"storage class %s does not provision in node %s's topology",
		sc.Name,
		node.Name,
	)
}

// termSelector is a label selector with matchLabelKeys folded in from
// pod's labels.
func termSelector(
	sel *metav1.LabelSelector,
	matchKeys []string,
	pod *corev1.Pod,
) (labels.Selector, error) {
	s, err := metav1.LabelSelectorAsSelector(sel) // nil selects nothing
	if err != nil {
		return nil, err
	}
	for _, k := range matchKeys {
		if v, ok := pod.Labels[k]; ok {
			req, err := labels.NewRequirement(k, selection.Equals, []string{v})
			if err != nil {
				return nil, err
			}
			s = s.Add(*req)
		}
	}
	return s, nil
}

// spread checks r's hard topology spread constraints
// (whenUnsatisfiable: DoNotSchedule) on node: with r there, the matching
// pods of node's domain may exceed the least populated domain's by
// maxSkew at most. Domains are those of the nodes that have every
// constraint's topology key and pass r's node selection (nodeAffinityPolicy
// Honor, the default) and, with nodeTaintsPolicy Honor, its tolerations;
// a domain count below minDomains makes the least 0. Terminating pods
// are not counted.
func (l *landing) spread(r *corev1.Pod, node *corev1.Node) string {
	var hard []corev1.TopologySpreadConstraint
	for _, c := range r.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			hard = append(hard, c)
		}
	}
	if len(hard) == 0 {
		return ""
	}
	nodes := map[string]*corev1.Node{}
	for _, n := range l.cl.snap.Nodes {
		nodes[n.Name] = n
	}
	nodes[node.Name] = node
	required := nodeaffinity.GetRequiredNodeAffinity(r)
	for _, c := range hard {
		if _, ok := node.Labels[c.TopologyKey]; !ok {
			return fmt.Sprintf(
				"node %s has no label %s of its topology spread constraint",
				node.Name,
				c.TopologyKey,
			)
		}
		sel, err := termSelector(c.LabelSelector, c.MatchLabelKeys, r)
		if err != nil {
			return fmt.Sprintf("its topology spread constraint cannot be evaluated: %v", err)
		}
		eligible := func(n *corev1.Node) bool {
			for _, k := range hard {
				if _, ok := n.Labels[k.TopologyKey]; !ok {
					return false
				}
			}
			if c.NodeAffinityPolicy == nil ||
				*c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor {
				if ok, err := required.Match(n); err != nil || !ok {
					return false
				}
			}
			if c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
				if _, bad := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(),
					n.Spec.Taints, r.Spec.Tolerations, schedulingTaint, false); bad {
					return false
				}
			}
			return true
		}
		counts := map[string]int{}
		for _, n := range nodes {
			if eligible(n) {
				counts[n.Labels[c.TopologyKey]] += 0
			}
		}
		for _, p := range l.pods() {
			n := nodes[p.Spec.NodeName]
			if n == nil || p.Namespace != r.Namespace || p.DeletionTimestamp != nil ||
				!eligible(n) ||
				!sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			counts[n.Labels[c.TopologyKey]]++
		}
		least := -1
		for _, n := range counts {
			if least < 0 || n < least {
				least = n
			}
		}
		if c.MinDomains != nil && int32(len(counts)) < *c.MinDomains {
			least = 0
		}
		self := 0
		if sel.Matches(labels.Set(r.Labels)) {
			self = 1
		}
		domain := node.Labels[c.TopologyKey]
		if skew := counts[domain] + self - max(least, 0); skew > int(c.MaxSkew) {
			return fmt.Sprintf(
				"its topology spread constraint on %s (maxSkew %d) would be at skew %d in %s %s",
				c.TopologyKey,
				c.MaxSkew,
				skew,
				c.TopologyKey,
				domain,
			)
		}
	}
	return ""
}

// affinity checks the required inter-pod affinity and anti-affinity
// (InterPodAffinity): r's affinity terms need a matching pod in node's
// domain (or, when no pod anywhere matches them, r matching its own
// terms), its anti-affinity terms no matching pod there, and no pod in
// node's domain of one of its anti-affinity terms may match r.
func (l *landing) affinity(ctx context.Context, r *corev1.Pod, node *corev1.Node) string {
	nodes := map[string]*corev1.Node{}
	for _, n := range l.cl.snap.Nodes {
		nodes[n.Name] = n
	}
	nodes[node.Name] = node
	sameDomain := func(p *corev1.Pod, key string) bool {
		n := nodes[p.Spec.NodeName]
		v, ok := node.Labels[key]
		return ok && n != nil && n.Labels[key] == v
	}
	pods := l.pods()
	// Existing pods' anti-affinity against r.
	for _, p := range pods {
		if p.Spec.Affinity == nil || p.Spec.Affinity.PodAntiAffinity == nil {
			continue
		}
		anti := p.Spec.Affinity.PodAntiAffinity
		for _, t := range anti.RequiredDuringSchedulingIgnoredDuringExecution {
			ok, err := l.termMatches(ctx, &t, p, r)
			if err != nil {
				return fmt.Sprintf(
					"pod %s/%s's anti-affinity cannot be evaluated: %v",
					p.Namespace,
					p.Name,
					err,
				)
			}
			if ok && sameDomain(p, t.TopologyKey) {
				return fmt.Sprintf(
					"pod %s/%s's required anti-affinity (%s) excludes it from node %s",
					p.Namespace,
					p.Name,
					t.TopologyKey,
					node.Name,
				)
			}
		}
	}
	if r.Spec.Affinity == nil {
		return ""
	}
	if pa := r.Spec.Affinity.PodAntiAffinity; pa != nil {
		for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
			for _, p := range pods {
				ok, err := l.termMatches(ctx, &t, r, p)
				if err != nil {
					return fmt.Sprintf("its anti-affinity cannot be evaluated: %v", err)
				}
				if ok && sameDomain(p, t.TopologyKey) {
					return fmt.Sprintf(
						"its required anti-affinity (%s) excludes node %s, where pod %s/%s runs",
						t.TopologyKey,
						node.Name,
						p.Namespace,
						p.Name,
					)
				}
			}
		}
	}
	pa := r.Spec.Affinity.PodAffinity
	if pa == nil || len(pa.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		return ""
	}
	terms := pa.RequiredDuringSchedulingIgnoredDuringExecution
	anyMatch, here := false, true
	for _, t := range terms {
		found := false
		for _, p := range pods {
			ok, err := l.termMatches(ctx, &t, r, p)
			if err != nil {
				return fmt.Sprintf("its affinity cannot be evaluated: %v", err)
			}
			anyMatch = anyMatch || ok
			if ok && sameDomain(p, t.TopologyKey) {
				found = true
			}
		}
		here = here && found
	}
	if here {
		return ""
	}
	if !anyMatch {
		// The first pod of a group: it may go where its own labels
		// would satisfy its terms.
		self := true
		for _, t := range terms {
			ok, err := l.termMatches(ctx, &t, r, r)
			if _, has := node.Labels[t.TopologyKey]; err != nil || !ok || !has {
				self = false
			}
		}
		if self {
			return ""
		}
	}
	return fmt.Sprintf(
		"its required pod affinity finds no matching pod in node %s's domain",
		node.Name,
	)
}

// termMatches reports whether term (of owner) selects pod: pod in the
// term's namespaces and its labels matching.
func (l *landing) termMatches(
	ctx context.Context,
	term *corev1.PodAffinityTerm,
	owner, pod *corev1.Pod,
) (bool, error) {
	sel, err := termSelector(term.LabelSelector, term.MatchLabelKeys, owner)
	if err != nil {
		return false, err
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		return false, nil
	}
	if slices.Contains(term.Namespaces, pod.Namespace) {
		return true, nil
	}
	if term.NamespaceSelector == nil {
		return len(term.Namespaces) == 0 && pod.Namespace == owner.Namespace, nil
	}
	nsSel, err := metav1.LabelSelectorAsSelector(term.NamespaceSelector)
	if err != nil {
		return false, err
	}
	if nsSel.Empty() {
		return true, nil
	}
	nsLabels, ok := l.namespaces[pod.Namespace]
	if !ok {
		ns, err := l.c.client.CoreV1().Namespaces().Get(ctx, pod.Namespace, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read namespace %s: %w", pod.Namespace, err)
		}
		nsLabels = labels.Set(ns.Labels)
		l.namespaces[pod.Namespace] = nsLabels
	}
	return nsSel.Matches(nsLabels), nil
}
