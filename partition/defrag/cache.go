package defrag

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/drakit/drakit/explain"
)

// cache holds informers' listers: while Run runs, a Step reads the
// cluster from them instead of listing it from the API server every
// interval. What decides whether an operation runs (its DeviceTaintRules)
// and the objects an operation changes (the waiting pod and claim, each
// evicted pod) are still read from the API server right before acting.
type cache struct {
	pods      corelisters.PodLister
	nodes     corelisters.NodeLister
	pdbs      policylisters.PodDisruptionBudgetLister
	slices    resourcelisters.ResourceSliceLister
	classes   resourcelisters.DeviceClassLister
	claims    resourcelisters.ResourceClaimLister
	templates resourcelisters.ResourceClaimTemplateLister
	rules     resourcelisters.DeviceTaintRuleLister
	stop      func()
}

// startCache starts the informers and waits until they have synced.
func (c *Controller) startCache(ctx context.Context) (*cache, error) {
	f := informers.NewSharedInformerFactory(c.client, 0)
	ca := &cache{
		pods:      f.Core().V1().Pods().Lister(),
		nodes:     f.Core().V1().Nodes().Lister(),
		pdbs:      f.Policy().V1().PodDisruptionBudgets().Lister(),
		slices:    f.Resource().V1().ResourceSlices().Lister(),
		classes:   f.Resource().V1().DeviceClasses().Lister(),
		claims:    f.Resource().V1().ResourceClaims().Lister(),
		templates: f.Resource().V1().ResourceClaimTemplates().Lister(),
		rules:     f.Resource().V1().DeviceTaintRules().Lister(),
	}
	ctx, cancel := context.WithCancel(ctx)
	f.Start(ctx.Done())
	ca.stop = func() { cancel(); f.Shutdown() }
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			ca.stop()
			return nil, fmt.Errorf("defrag controller: the %v informer did not sync", typ)
		}
	}
	return ca, nil
}

// listPods lists the pods of namespace ("" for all), from the cache
// while Run runs. The pods are copies the caller may change.
func (c *Controller) listPods(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	if c.cache == nil {
		l, err := c.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		out := make([]*corev1.Pod, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	}
	var l []*corev1.Pod
	var err error
	if namespace == "" {
		l, err = c.cache.pods.List(labels.Everything())
	} else {
		l, err = c.cache.pods.Pods(namespace).List(labels.Everything())
	}
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	return deepCopies(l), nil
}

// listPDBs lists every PodDisruptionBudget.
func (c *Controller) listPDBs(ctx context.Context) ([]policyv1.PodDisruptionBudget, error) {
	if c.cache == nil {
		l, err := c.client.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list pod disruption budgets: %w", err)
		}
		return l.Items, nil
	}
	l, err := c.cache.pdbs.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	out := make([]policyv1.PodDisruptionBudget, len(l))
	for i, p := range l {
		out[i] = *p.DeepCopy()
	}
	return out, nil
}

// snapshot is what the scheduler's allocator reads (explain's Snapshot).
func (c *Controller) snapshot(ctx context.Context) (*explain.Snapshot, error) {
	if c.cache == nil {
		return explain.FromCluster(ctx, c.client)
	}
	s := &explain.Snapshot{}
	var err error
	if s.Nodes, err = c.cache.nodes.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	if s.Slices, err = c.cache.slices.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	if s.Classes, err = c.cache.classes.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("list device classes: %w", err)
	}
	if s.Claims, err = c.cache.claims.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	if s.Templates, err = c.cache.templates.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("list resource claim templates: %w", err)
	}
	if s.TaintRules, err = c.cache.rules.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("list device taint rules: %w", err)
	}
	s.Nodes, s.Slices, s.Classes = deepCopies(s.Nodes), deepCopies(s.Slices), deepCopies(s.Classes)
	s.Claims, s.Templates, s.TaintRules = deepCopies(s.Claims), deepCopies(s.Templates), deepCopies(s.TaintRules)
	return s, nil
}

// deepCopies copies objects out of a cache, which must not be changed.
func deepCopies[T interface{ DeepCopy() T }](l []T) []T {
	out := make([]T, len(l))
	for i, o := range l {
		out[i] = o.DeepCopy()
	}
	return out
}
