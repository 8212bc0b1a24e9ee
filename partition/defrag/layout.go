package defrag

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/internal/podstatus"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/ledger"
	pplan "github.com/drakit/drakit/partition/plan"
)

// WithLayoutLedgers makes the controller defragment a driver that
// publishes layouts (package partition/ledger: its ledgers are
// ConfigMaps in namespace) instead of mig's counter model. There the
// fleet planner (package partition/fleet) decides where a large profile
// goes: when a request has waited past its aging and fits nowhere, it
// reserves a card for its profile, and the card's node opens nothing
// else on it. The controller then moves the fewest restartable
// partitions off that card (pplan.Defragment over the ledgers,
// pinned to the reserved card: the moved partitions land where the
// fleet has room, the same card's other half included) by evicting their
// pods, with the same guards as the counter model's operations (opt-in
// annotation, a controller to start the pod again, a pod's own claim,
// PodDisruptionBudgets through the Eviction API, priority, namespaces,
// the eviction budget, no node with a terminating holder). No taint and
// no allocation by the controller: the reservation keeps the region, and
// the scheduler places the waiting pod once its device is open.
// classProfile maps a DeviceClass to the profile a request of it asks
// for (the driver's classes), to find the pods a reservation waits for.
func WithLayoutLedgers(namespace string, classProfile func(class string) (string, bool)) Option {
	return func(o *options) error {
		if namespace == "" || classProfile == nil {
			return errors.New("layout ledgers: a namespace and a class mapping are needed")
		}
		o.ledgerNS, o.classProfile = namespace, classProfile
		return nil
	}
}

// layoutStep is Step for a driver that publishes layouts.
func (c *Controller) layoutStep(ctx context.Context) (*Operation, error) {
	store, err := ledger.NewStore(c.client, c.o.ledgerNS, c.driver)
	if err != nil {
		return nil, err
	}
	ledgers, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.seed(ctx); err != nil {
		return nil, err
	}
	nodes := slices.Sorted(maps.Keys(ledgers))
	var reserved []struct {
		node string
		r    pplan.ReservedCard
	}
	for _, n := range nodes {
		for _, r := range ledgers[n].Reserved {
			reserved = append(reserved, struct {
				node string
				r    pplan.ReservedCard
			}{n, r})
		}
	}
	if len(reserved) == 0 {
		return nil, nil
	}
	pods, err := c.listPods(ctx, "")
	if err != nil {
		return nil, err
	}
	pdbs, err := c.listPDBs(ctx)
	if err != nil {
		return nil, err
	}
	claimList, err := c.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	cl := &cluster{pods: map[types.UID]*corev1.Pod{}, pdbs: pdbs}
	for _, p := range pods {
		cl.pods[p.UID] = p
	}
	claims := map[types.UID]*resourceapi.ResourceClaim{}
	for i := range claimList.Items {
		claims[claimList.Items[i].UID] = &claimList.Items[i]
	}
	for _, res := range reserved {
		waiting := c.waitingFor(pods, claims, res.r.Profile)
		if waiting == nil {
			continue
		}
		if why := c.backingOff(waiting); why != "" {
			c.logOnce(ctx, waiting, why)
			continue
		}
		op, why, err := c.layoutPlan(ctx, cl, ledgers, claims, res.node, res.r, waiting)
		if err != nil {
			return nil, err
		}
		if op == nil {
			c.logOnce(ctx, waiting, why)
			continue
		}
		if why := c.budgetRefuses(op.Node, len(op.Evictions)); why != "" {
			c.logOnce(ctx, waiting, why)
			continue
		}
		if c.o.dryRun != nil {
			fmt.Fprintf(
				c.o.dryRun,
				"%s waits for %s: evict %s\n",
				op.Pod,
				c.placement(op),
				op.evicted(),
			)
			return op, nil
		}
		c.event(
			ctx,
			op.Pod,
			corev1.EventTypeNormal,
			ReasonDefragmenting,
			fmt.Sprintf(
				"evicting %s to free %s (card reserved for it by the layout planner)",
				op.evicted(),
				c.placement(op),
			),
		)
		klog.FromContext(ctx).
			Info("Defragmenting a reserved card", "pod", op.Pod.String(), "node", op.Node,
				"card", op.Card, "profile", op.Profile, "evicting", op.evicted())
		return op, c.evictLayout(ctx, op)
	}
	return nil, nil
}

// waitingFor is the oldest unschedulable pod whose unallocated claim asks
// for profile.
func (c *Controller) waitingFor(
	pods []*corev1.Pod,
	claims map[types.UID]*resourceapi.ResourceClaim,
	profile string,
) *corev1.Pod {
	byName := map[string]*resourceapi.ResourceClaim{}
	for _, cl := range claims {
		byName[cl.Namespace+"/"+cl.Name] = cl
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, name := range podstatus.ClaimNames(p) {
			cl := byName[p.Namespace+"/"+name]
			if cl == nil || cl.Status.Allocation != nil {
				continue
			}
			for _, r := range cl.Spec.Devices.Requests {
				if r.Exactly == nil {
					continue
				}
				if got, ok := c.o.classProfile(r.Exactly.DeviceClassName); ok && got == profile {
					out = append(out, p)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	sort.SliceStable(
		out,
		func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) },
	)
	return out[0]
}

// layoutPlan finds the fewest evictions that free the reserved card's
// region for its profile; nil and why not.
func (c *Controller) layoutPlan(
	ctx context.Context,
	cl *cluster,
	ledgers map[string]*ledger.Ledger,
	claims map[types.UID]*resourceapi.ResourceClaim,
	node string,
	res pplan.ReservedCard,
	waiting *corev1.Pod,
) (*Operation, string, error) {
	// The fleet from the ledgers: held partitions in use (restartable
	// when their pods may move), busy ones in use.
	type at struct {
		node string
		card int
		in   partition.Instance
	}
	holders := map[at]*holder{}
	var fleet []partition.FleetCard
	for _, n := range slices.Sorted(maps.Keys(ledgers)) {
		l := ledgers[n]
		for _, card := range l.Cards {
			s, err := c.n.scheme(card.Scheme)
			if err != nil || s == nil {
				continue
			}
			fc := partition.FleetCard{Node: n, Index: card.Index, Scheme: s}
			for _, in := range card.Busy {
				fc.Layout = append(
					fc.Layout,
					partition.Instance{Profile: in.Profile, Start: in.Start, InUse: true},
				)
			}
			whole := card.BusyWhole
			for _, h := range l.Held {
				for _, d := range h.Devices {
					ref, err := s.ParseDeviceName(d.Name)
					if err != nil || ref.Card != card.Index || d.Pool != card.Pool {
						continue
					}
					if ref.Profile == "" {
						whole = true
						continue
					}
					in := partition.Instance{Profile: ref.Profile, Start: ref.Start, InUse: true}
					k := at{
						n,
						card.Index,
						partition.Instance{Profile: ref.Profile, Start: ref.Start},
					}
					if holders[k] == nil {
						hd := &holder{claim: claims[h.Claim.UID]}
						if hd.claim != nil {
							for _, ref := range hd.claim.Status.ReservedFor {
								if vp := cl.pods[ref.UID]; vp != nil {
									hd.pods = append(hd.pods, vp)
								}
							}
							hd.why = c.mayMove(cl, hd, map[types.UID]int{})
							for _, vp := range hd.pods {
								if hd.why == "" {
									hd.why = priorityRefuses(vp, waiting)
								}
								if vp.DeletionTimestamp != nil && n == node {
									return nil, "a pod holding a device of the node is terminating; waiting until it is gone", nil
								}
							}
						} else {
							hd.why = "its claim is not known"
						}
						holders[k] = hd
					}
					in.Restartable = holders[k].why == ""
					if !slices.ContainsFunc(fc.Layout, func(x partition.Instance) bool {
						return x.Profile == in.Profile && x.Start == in.Start
					}) {
						fc.Layout = append(fc.Layout, in)
					}
				}
			}
			if whole {
				continue // a card used whole takes nothing and moves nothing
			}
			if s.Validate(fc.Layout) != nil {
				continue
			}
			fleet = append(fleet, fc)
		}
	}
	card := res.Card
	d, err := pplan.Defragment(
		fleet,
		pplan.Request{Profile: res.Profile, Node: node, Card: &card},
		pplan.WithMaxMoves(c.o.maxMoves),
	)
	if err != nil {
		return nil, "", err
	}
	if !d.Found {
		return nil, fmt.Sprintf(
			"no set of at most %d restartable pods frees %s on %s %d of node %s: %s",
			c.o.maxMoves,
			res.Profile,
			c.n.card,
			res.Card,
			node,
			d.Reason,
		), nil
	}
	if len(d.Moves) == 0 {
		return nil, "its reserved card will hold it once its partitions end", nil
	}
	op := &Operation{
		Pod:     refOf(&waiting.ObjectMeta),
		Node:    node,
		Card:    res.Card,
		Profile: res.Profile,
		Start:   d.Target.Start,
	}
	for _, m := range d.Moves {
		h := holders[at{m.Node, m.Card, partition.Instance{Profile: m.Profile, Start: m.Start}}]
		if h == nil {
			return nil, "a partition to move has no holder", nil
		}
		for _, vp := range h.pods {
			op.Evictions = append(
				op.Evictions,
				Eviction{Pod: refOf(&vp.ObjectMeta), Claim: refOf(&h.claim.ObjectMeta),
					Move: m},
			)
		}
	}
	return op, "", nil
}

// evictLayout evicts an operation's pods through the Eviction API (their
// PodDisruptionBudgets decide), recording each in the budget.
func (c *Controller) evictLayout(ctx context.Context, op *Operation) error {
	for _, e := range op.Evictions {
		ev := &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: e.Pod.Name, Namespace: e.Pod.Namespace},
			DeleteOptions: &metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: ptr.To(e.Pod.UID)},
			},
		}
		err := c.client.PolicyV1().Evictions(e.Pod.Namespace).Evict(ctx, ev)
		switch {
		case err == nil:
			c.mem.evictions = append(
				c.mem.evictions,
				evictionRecord{at: c.o.now(), node: e.Move.Node},
			)
			c.eventRelated(ctx, e.Pod, corev1.EventTypeNormal, ReasonEvicted,
				fmt.Sprintf("evicted to make room for %s: %s", op.Pod, c.placement(op)),
				&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: e.Move.Node})
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			why := fmt.Sprintf("eviction of %s refused: %v", e.Pod, err)
			if apierrors.IsTooManyRequests(err) {
				why = fmt.Sprintf(
					"eviction of %s refused: its PodDisruptionBudget allows no disruption now",
					e.Pod,
				)
			}
			c.mem.abandoned[op.Pod.UID] = c.o.now()
			c.event(ctx, op.Pod, corev1.EventTypeWarning, ReasonAbandoned, why)
			return fmt.Errorf("defrag for %s: %s", op.Pod, why)
		}
	}
	return nil
}
