package defrag

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Defaults of the guards that bound the disruption.
const (
	// DefaultEvictionsPerHour is the most pods the controller evicts in
	// any hour, cluster-wide.
	DefaultEvictionsPerHour = 10
	// DefaultEvictionsPerNodePerHour is the most pods it evicts from one
	// node in any hour.
	DefaultEvictionsPerNodePerHour = 4
	// DefaultBackoff is how long a waiting pod whose operation was
	// abandoned waits before the controller plans for it again.
	DefaultBackoff = 10 * time.Minute
	// SystemCriticalPriority is the priority from which a pod is
	// system-critical (kube-scheduler's scheduling.SystemCriticalPriority,
	// which the system-node-critical and system-cluster-critical classes
	// have): the controller never evicts such a pod.
	SystemCriticalPriority = 2000000000
)

// WithNamespaces limits the pods the controller may evict, and the
// waiting pods it makes room for (it allocates their claims), to those
// in the given namespaces (default: every namespace). A pod must still
// opt in (Vendor.Domain + "/defrag": AllowValue) to be evicted. Each
// name must be a valid namespace name.
func WithNamespaces(namespaces ...string) Option {
	return func(o *options) error {
		o.namespaces = map[string]bool{}
		for _, ns := range namespaces {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
			}
			o.namespaces[ns] = true
		}
		return nil
	}
}

// WithEvictionBudget sets the most pods the controller evicts in any
// hour, cluster-wide (perHour) and from one node (perNode); defaults
// DefaultEvictionsPerHour and DefaultEvictionsPerNodePerHour. An
// operation that would exceed either is not started. The count is of the
// controller's EvictedForDefrag Events of the last hour, so that a
// restarted controller keeps it. Both must be at least 1.
func WithEvictionBudget(perHour, perNode int) Option {
	return func(o *options) error {
		if perHour < 1 || perNode < 1 {
			return fmt.Errorf("eviction budget %d per hour, %d per node per hour: each must be at least 1", perHour, perNode)
		}
		o.perHour, o.perNode = perHour, perNode
		return nil
	}
}

// WithBackoff sets how long a waiting pod whose operation was abandoned
// waits before the controller plans for it again (default
// DefaultBackoff). It is read from the controller's DefragAbandoned
// Events too, so that a restart does not shorten it. d must not be
// negative.
func WithBackoff(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("backoff %s: must not be negative", d)
		}
		o.backoff = d
		return nil
	}
}

// WithLeaderElection makes Run take part in a leader election through the
// coordination.k8s.io/v1 Lease namespace/name: only the leader steps, so
// that two replicas (a rolling update, a node drain) never run two
// operations. A replica that loses the lease stops Run with an error (its
// process should exit and start again, as Kubernetes components do).
func WithLeaderElection(namespace, name string) Option {
	return func(o *options) error {
		if namespace == "" || name == "" {
			return errors.New("leader election: the lease's namespace and name must be set")
		}
		o.leaseNamespace, o.leaseName = namespace, name
		return nil
	}
}

// WithOwner makes every DeviceTaintRule the controller creates owned by
// the ClusterRole clusterRole (the one that grants the controller its
// rights), so that deleting that ClusterRole (uninstalling the
// controller, or switching it off in a chart) lets the garbage collector
// delete the rules: devices are never left NoSchedule by a controller
// that is gone. The controller reads the ClusterRole's UID when it
// starts an operation and starts none when it cannot.
func WithOwner(clusterRole string) Option {
	return func(o *options) error {
		if clusterRole == "" {
			return errors.New("owner: the ClusterRole's name is empty")
		}
		o.owner = clusterRole
		return nil
	}
}

// memory is what the guards remember: the evictions of the last hour and
// when each waiting pod's operation was abandoned. It is seeded from the
// controller's own Events the first time it is needed, so that a restart
// forgets nothing.
type memory struct {
	seeded    bool
	evictions []evictionRecord
	abandoned map[types.UID]time.Time
}

type evictionRecord struct {
	at   time.Time
	node string
}

// seed reads the controller's Events of the last hour (evictions) and of
// the last backoff (abandoned operations).
func (c *Controller) seed(ctx context.Context) error {
	if c.mem.seeded {
		return nil
	}
	now := c.o.now()
	for _, reason := range []string{ReasonEvicted, ReasonAbandoned} {
		l, err := c.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			return fmt.Errorf("read the controller's %s events: %w", reason, err)
		}
		for _, ev := range l.Items {
			if ev.ReportingController != c.n.component {
				continue
			}
			at := ev.LastTimestamp.Time
			if reason == ReasonEvicted && now.Sub(at) < time.Hour {
				node := ""
				if ev.Related != nil && ev.Related.Kind == "Node" {
					node = ev.Related.Name
				}
				c.mem.evictions = append(c.mem.evictions, evictionRecord{at: at, node: node})
			}
			if reason == ReasonAbandoned && now.Sub(at) < c.o.backoff && at.After(c.mem.abandoned[ev.InvolvedObject.UID]) {
				c.mem.abandoned[ev.InvolvedObject.UID] = at
			}
		}
	}
	c.mem.seeded = true
	return nil
}

// budgetRefuses says why evicting pods from node would exceed the
// eviction budget, "" when it would not.
func (c *Controller) budgetRefuses(node string, n int) string {
	now := c.o.now()
	total, onNode := 0, 0
	kept := c.mem.evictions[:0]
	for _, e := range c.mem.evictions {
		if now.Sub(e.at) >= time.Hour {
			continue
		}
		kept = append(kept, e)
		total++
		if e.node == node {
			onNode++
		}
	}
	c.mem.evictions = kept
	switch {
	case total+n > c.o.perHour:
		return fmt.Sprintf("the eviction budget allows %d evictions per hour and %d were made in the last hour", c.o.perHour, total)
	case onNode+n > c.o.perNode:
		return fmt.Sprintf("the eviction budget allows %d evictions per node per hour and %d were made on node %s in the last hour", c.o.perNode, onNode, node)
	}
	return ""
}

// backingOff says until when pod waits after an abandoned operation, ""
// when it does not.
func (c *Controller) backingOff(pod *corev1.Pod) string {
	at, ok := c.mem.abandoned[pod.UID]
	if !ok {
		return ""
	}
	if until := at.Add(c.o.backoff); c.o.now().Before(until) {
		return fmt.Sprintf("an operation for it was abandoned at %s; it waits until %s (backoff %s)", at.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), c.o.backoff)
	}
	delete(c.mem.abandoned, pod.UID)
	return ""
}

// priorityRefuses says why the controller never evicts victim for
// waiting, "" when the priorities allow it: a system-critical pod never
// moves, nor one of a higher priority than the pod it would make room
// for.
func priorityRefuses(victim, waiting *corev1.Pod) string {
	vp, wp := ptr.Deref(victim.Spec.Priority, 0), int32(0)
	if waiting != nil {
		wp = ptr.Deref(waiting.Spec.Priority, 0)
	}
	name := victim.Namespace + "/" + victim.Name
	switch {
	case vp >= SystemCriticalPriority || victim.Spec.PriorityClassName == "system-node-critical" || victim.Spec.PriorityClassName == "system-cluster-critical":
		return "pod " + name + " is system-critical"
	case waiting != nil && vp > wp:
		return fmt.Sprintf("pod %s has a higher priority (%d) than the waiting pod (%d)", name, vp, wp)
	}
	return ""
}

// namespaceRefuses says why a pod's namespace is not one the controller
// may evict from, "" when it is.
func (c *Controller) namespaceRefuses(pod *corev1.Pod) string {
	if c.o.namespaces == nil || c.o.namespaces[pod.Namespace] {
		return ""
	}
	names := make([]string, 0, len(c.o.namespaces))
	for ns := range c.o.namespaces {
		names = append(names, ns)
	}
	sort.Strings(names)
	return "pod " + pod.Namespace + "/" + pod.Name + " is not in a namespace the controller may " +
		"evict from or allocate claims in (" + strings.Join(names, ", ") + ")"
}

// deadline is when an operation is abandoned: its timeout after it
// started, plus the longest termination grace period of the pods it
// evicts (they may take that long to let go of the region).
func (c *Controller) deadline(op *Operation) time.Time {
	return op.Started.Add(c.o.timeout + time.Duration(op.Grace)*time.Second)
}

// logOnce logs why a pod gets no operation, once per reason.
func (c *Controller) logOnce(ctx context.Context, pod *corev1.Pod, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.told[string(pod.UID)] != why {
		c.told[string(pod.UID)] = why
		klog.FromContext(ctx).V(2).Info("No defragmentation for pod", "pod", klog.KObj(pod), "reason", why)
	}
}

// errCrashed ends a Step at a crash point (tests only).
var errCrashed = errors.New("defrag controller: stopped at a crash point")

// crashed reports whether a test asked the Step to end at point, as a
// kill of the process there would: nothing after it runs.
func (c *Controller) crashed(point string) bool {
	return c.o.crash != nil && c.o.crash(point)
}
