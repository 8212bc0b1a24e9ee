package bench

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
)

// The fleet online model (issue 46): the layout model of layout.go on a
// fleet of nodes of 8 GPUs, three publications on the same arrivals.
//
//   - Counters: every placement with counters (the placements
//     publication); the scheduler takes the first node, in name order,
//     with a fitting placement of the profile, in the planner's order.
//   - LayoutShape (the design before issue 46): every node's driver runs
//     a engine.LayoutPublisher (time fence) over what the node holds
//     and the cluster-wide demand (every pending pod's profile: its claim
//     watch saw every claim), republishing after the lag on every change
//     of that demand or of its node.
//   - LedgerShape (issue 46): one planner (plan.AssignFleet) assigns
//     the pending pods to nodes after PlannerLag; each node's agent
//     publishes its ledger (ledger.Ledger.Publish) for its share after the
//     republish lag; the scheduler sees a node's new slice SliceLag after
//     the ledger changed, and an allocation is admitted only when its
//     device is Open in the node's ledger then (else it is refused and
//     retried with backoff, as a refused PreBind is).
//
// Everything else is layout.go's: bursts of one class, lifetimes,
// patience, one scheduler with an attempt time per shape, backoff.

// LedgerShape is the issue-46 design in the fleet model: ledgers and one
// planner.
const LedgerShape Shape = "ledger"

// FleetLayoutParams are the fleet model's times beside LayoutParams'.
type FleetLayoutParams struct {
	LayoutParams
	// PlannerLag is from a change to the planner's new assignment (its
	// watch lag and interval).
	PlannerLag time.Duration
	// SliceLag is from a node's ledger change to the scheduler seeing the
	// node's new slice (the agent's write and the scheduler's watch).
	SliceLag time.Duration
}

// DefaultFleetLayoutParams are DefaultLayoutParams with the planner's
// interval (200 ms) plus a watch lag of 50 ms, and a slice lag of 50 ms.
func DefaultFleetLayoutParams() FleetLayoutParams {
	lp := DefaultLayoutParams()
	lp.AttemptTime[LedgerShape] = lp.AttemptTime[LayoutShape]
	return FleetLayoutParams{
		LayoutParams: lp,
		PlannerLag:   250 * time.Millisecond,
		SliceLag:     50 * time.Millisecond,
	}
}

// FleetLayoutResult is one run of the fleet model.
type FleetLayoutResult struct {
	LayoutResult
	Nodes int
	// Writes is the number of slice versions published per node per
	// second of the run (republishes).
	Writes float64
	// LedgerWrites is the number of ledger versions per node per second
	// (LedgerShape): the events a node's agent watches.
	LedgerWrites float64
	// WaitsBy are the waits (s) of placed pods by profile.
	WaitsBy map[string][]float64
}

type fleetNode struct {
	name   string
	fleet  []mig.FleetGPU
	pub    *engine.LayoutPublisher // LayoutShape
	led    *ledger.Ledger          // LedgerShape
	cards  []ledger.AgentCard
	shown  []partition.PublishedCard // what the scheduler sees
	next   float64                   // pending republish, -1 none
	last   float64                   // last change (churn lag)
	writes int
	// order is the node's placements in the planner's order (Counters),
	// nil when its GPUs changed since.
	order []string
	// ledgerWrites counts the node's ledger versions (LedgerShape):
	// admissions, its agent's plans, the planner's demand and
	// resolutions. Its agent's watch gets one event per version.
	ledgerWrites int
}

// fleetSim is one run's state.
type fleetSim struct {
	p      *mig.Product
	shape  Shape
	fp     FleetLayoutParams
	nodes  []*fleetNode
	pods   []layoutPod
	where  []int // node of each placed pod
	h      *levHeap
	seq    int
	base   time.Time
	demand plan.Demand // LayoutShape: cluster-wide pending
	plan   float64     // LedgerShape: pending planner step, -1 none
	// noWhole accumulates the time the fleet has an idle GPU but none
	// offered whole; since is when that began (-1 when not).
	noWhole, since float64
	relaid         map[int]bool
	// shows are ledger nodes' next views, shown at evShow.
	shows map[int][]partition.PublishedCard
	// lastPlaced is when the last pod was placed: the windows without a
	// whole GPU are counted until then.
	lastPlaced float64
}

// Event kinds beyond layout.go's.
const (
	evPlan = 100 + iota
	evShow
)

func newFleetSim(p *mig.Product, nodes int, shape Shape, fp FleetLayoutParams) (*fleetSim, error) {
	s := &fleetSim{
		p:      p,
		shape:  shape,
		fp:     fp,
		h:      &levHeap{},
		base:   time.Unix(0, 0),
		plan:   -1,
		since:  -1,
		relaid: map[int]bool{},
		shows:  map[int][]partition.PublishedCard{},
	}
	for n := 0; n < nodes; n++ {
		fn := &fleetNode{name: fmt.Sprintf("node-%03d", n), next: -1, last: math.Inf(-1)}
		var cards []counter.Card
		for g := 0; g < 8; g++ {
			fn.fleet = append(fn.fleet, mig.FleetGPU{Node: fn.name, Index: g, Product: p})
			cards = append(cards, counter.Card{Index: g, Scheme: p.Scheme()})
			fn.cards = append(fn.cards, ledger.AgentCard{Index: g, Scheme: p.Scheme()})
		}
		switch shape {
		case LayoutShape:
			pub, err := engine.NewLayoutPublisher(cards, engine.WithFence(fp.Fence))
			if err != nil {
				return nil, err
			}
			v, err := pub.Next(nil, nil, s.base)
			if err != nil {
				return nil, err
			}
			fn.pub, fn.shown = pub, v.Cards
		case LedgerShape:
			fn.led = &ledger.Ledger{Node: fn.name, Seeded: true}
			if _, err := fn.led.Publish(ledger.PoolName(fn.name), fn.cards); err != nil {
				return nil, err
			}
			l, err := fn.led.Layout(ledger.PoolName(fn.name), fn.cards)
			if err != nil {
				return nil, err
			}
			fn.shown = l
		}
		s.nodes = append(s.nodes, fn)
	}
	return s, nil
}

func (s *fleetSim) push(t float64, kind, pod int) {
	s.seq++
	heap.Push(s.h, lev{t: t, kind: kind, seq: s.seq, pod: pod})
}

func (s *fleetSim) at(t float64) time.Time {
	return s.base.Add(time.Duration(t * float64(time.Second)))
}

// inUse reports whether a node's GPU holds a partition.
func (fn *fleetNode) inUse(gpu int, prof string, start int) bool {
	return slices.ContainsFunc(
		fn.fleet[gpu].Layout,
		func(in mig.Instance) bool { return in.Profile == prof && in.Start == start },
	)
}

func (s *fleetSim) fits(fn *fleetNode, gpu int, in mig.Instance) bool {
	return s.p.Validate(append(slices.Clone(fn.fleet[gpu].Layout), in)) == nil
}

// place is the scheduler's choice for prof: node, GPU, start.
func (s *fleetSim) place(prof string) (int, int, int, bool, error) {
	for ni, fn := range s.nodes {
		if s.shape != Counters {
			for _, c := range fn.shown {
				if c.Withheld || c.WholeInUse {
					continue
				}
				for _, in := range c.Layout {
					if in.Profile == prof && !fn.inUse(c.Index, in.Profile, in.Start) {
						return ni, c.Index, in.Start, true, nil
					}
				}
			}
			continue
		}
		if !s.anyFits(fn, prof) {
			continue
		}
		if fn.order == nil {
			var err error
			if fn.order, err = mig.Preference(fn.fleet); err != nil {
				return 0, 0, 0, false, err
			}
		}
		for _, name := range fn.order {
			r, err := mig.ParseDeviceName(name)
			if err != nil {
				return 0, 0, 0, false, err
			}
			if r.Profile == prof && !fn.inUse(r.GPU, r.Profile, r.Start) &&
				s.fits(fn, r.GPU, mig.Instance{Profile: r.Profile, Start: r.Start}) {
				return ni, r.GPU, r.Start, true, nil
			}
		}
	}
	return 0, 0, 0, false, nil
}

// anyFits reports whether some GPU of a node has room for prof.
func (s *fleetSim) anyFits(fn *fleetNode, prof string) bool {
	pr, err := s.p.Profile(prof)
	if err != nil {
		return false
	}
	for g := range fn.fleet {
		for _, start := range pr.Starts {
			if s.fits(fn, g, mig.Instance{Profile: pr.Name, Start: start}) {
				return true
			}
		}
	}
	return false
}

// admit is the ledger's admission of an allocation (LedgerShape): the
// device must be Open in the node's ledger now.
func (s *fleetSim) admit(ni, gpu, start int, prof string, pod int) bool {
	if s.shape != LedgerShape {
		return true
	}
	fn := s.nodes[ni]
	name, err := s.p.Scheme().DeviceName(gpu, prof, start)
	if err != nil {
		return false
	}
	d := ledger.Device{Pool: ledger.PoolName(fn.name), Name: name}
	ref := ledger.ClaimRef{
		UID:       types.UID(strconv.Itoa(pod)),
		Namespace: "ns",
		Name:      strconv.Itoa(pod),
	}
	if fn.led.Admit(ref, "1", []ledger.Device{d}) != nil {
		return false
	}
	fn.ledgerWrites++
	return true
}

// change schedules a node's republish after the lag.
func (s *fleetSim) change(ni int, t float64) {
	fn := s.nodes[ni]
	if fn.next < t {
		lag := s.fp.Lag.Seconds()
		if t-fn.last < s.fp.ChurnWindow.Seconds() {
			lag = s.fp.ChurnLag.Seconds()
		}
		fn.next = t + lag
		s.push(fn.next, evRepublish, ni)
	}
	fn.last = t
}

// wholeWatch tracks the windows where some GPU is idle but none is
// offered whole.
func (s *fleetSim) wholeWatch(t float64) {
	idle, offered := false, false
	for _, fn := range s.nodes {
		for g := range fn.fleet {
			if len(fn.fleet[g].Layout) > 0 {
				continue
			}
			idle = true
			if s.shape == Counters {
				offered = true
			}
		}
		if s.shape != Counters {
			for _, c := range fn.shown {
				if !c.Withheld && !c.WholeInUse && len(c.Layout) == 0 &&
					len(fn.fleet[c.Index].Layout) == 0 {
					offered = true
				}
			}
		}
	}
	gap := idle && !offered
	switch {
	case gap && s.since < 0:
		s.since = t
	case !gap && s.since >= 0:
		s.noWhole += t - s.since
		s.since = -1
	}
}

// republish is a node's driver publishing again.
func (s *fleetSim) republish(ni int, t float64, waiting []int) (bool, error) {
	fn := s.nodes[ni]
	fn.next = -1
	var cards []partition.PublishedCard
	switch s.shape {
	case LayoutShape:
		use := make([]engine.CardUse, len(fn.fleet))
		for g := range fn.fleet {
			use[g] = engine.CardUse{Index: g, InUse: fn.fleet[g].Layout}
		}
		v, err := fn.pub.Next(use, s.demand, s.at(t))
		if err != nil {
			return false, err
		}
		if v.HeldBack > 0 {
			r := v.Retry.Sub(s.base).Seconds() + 1e-3
			if fn.next < t || r < fn.next {
				fn.next = math.Max(r, t)
				s.push(fn.next, evRepublish, ni)
			}
		}
		cards = v.Cards
	case LedgerShape:
		for g := range fn.cards {
			fn.cards[g].Busy = nil
		}
		before := slices.Clone(fn.led.Open)
		if _, err := fn.led.Publish(ledger.PoolName(fn.name), fn.cards); err != nil {
			return false, err
		}
		if !slices.Equal(before, fn.led.Open) {
			fn.ledgerWrites++
		}
		l, err := fn.led.Layout(ledger.PoolName(fn.name), fn.cards)
		if err != nil {
			return false, err
		}
		cards = l
	}
	if sameLayout(fn.shown, cards) {
		return false, nil
	}
	fn.writes++
	if s.shape == LedgerShape {
		// The scheduler sees the new slice after the slice lag; the
		// ledger admits from now.
		s.push(t+s.fp.SliceLag.Seconds(), evShow, ni)
		s.shows[ni] = cards
		return false, nil
	}
	fn.shown = cards
	s.relaid[ni] = true
	return true, nil
}

func sameLayout(a, b []partition.PublishedCard) bool {
	return slices.EqualFunc(a, b, func(x, y partition.PublishedCard) bool {
		return x.Index == y.Index && x.WholeInUse == y.WholeInUse && x.Withheld == y.Withheld &&
			slices.EqualFunc(
				x.Layout,
				y.Layout,
				func(p, q partition.Instance) bool { return p.Profile == q.Profile && p.Start == q.Start },
			)
	})
}

// planStep is the planner (LedgerShape): the pending pods assigned to
// nodes, each node's demand written.
func (s *fleetSim) planStep(t float64, waiting []int) error {
	s.plan = -1
	var nodes []plan.Node
	for _, fn := range s.nodes {
		n := plan.Node{Name: fn.name}
		for g := range fn.fleet {
			nc := plan.NodeCard{Index: g, Scheme: s.p.Scheme()}
			for _, in := range fn.fleet[g].Layout {
				nc.InUse = append(
					nc.InUse,
					partition.Instance{Profile: in.Profile, Start: in.Start, InUse: true},
				)
			}
			n.Cards = append(n.Cards, nc)
		}
		for _, d := range fn.led.Open {
			ref, err := s.p.Scheme().ParseDeviceName(d.Name)
			if err != nil {
				continue
			}
			nc := &n.Cards[ref.Card]
			if ref.Profile == "" {
				nc.FreeWhole = true
			} else {
				nc.Free = append(nc.Free, partition.Instance{Profile: ref.Profile, Start: ref.Start})
			}
		}
		nodes = append(nodes, n)
	}
	var reqs []plan.PendingRequest
	for _, i := range waiting {
		q := s.pods[i]
		if q.done() || q.profile == "" {
			continue
		}
		reqs = append(
			reqs,
			plan.PendingRequest{ID: strconv.Itoa(i), Profiles: []string{q.profile},
				Waited: time.Duration((t - q.arrive) * float64(time.Second))},
		)
	}
	a, err := plan.AssignFleet(nodes, reqs)
	if err != nil {
		return err
	}
	for ni, fn := range s.nodes {
		d, r := a.Demand[fn.name], a.Reserved[fn.name]
		if equalDemand(fn.led.Demand, d) && slices.Equal(fn.led.Reserved, r) {
			continue
		}
		fn.led.Demand, fn.led.Reserved = d, r
		fn.ledgerWrites++
		s.change(ni, t)
	}
	return nil
}

func equalDemand(a, b plan.Demand) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// SimulateFleetLayout runs the fleet model for nodes nodes of 8 GPUs of
// p, one shape, at load (of the whole fleet), with n pods from seed; the
// first tenth warms up.
func SimulateFleetLayout(
	ctx context.Context,
	p *mig.Product,
	nodes int,
	load float64,
	shape Shape,
	n int,
	seed int64,
	fp FleetLayoutParams,
) (FleetLayoutResult, error) {
	lp := fp.LayoutParams
	pods := layoutArrivals(p, load*float64(nodes), n, seed, lp)
	r, _, err := runFleet(ctx, p, nodes, load, shape, pods, seed, fp)
	return r, err
}

// runFleet runs the fleet model on pods and returns its result and final
// state.
func runFleet(
	ctx context.Context,
	p *mig.Product,
	nodes int,
	load float64,
	shape Shape,
	pods []layoutPod,
	seed int64,
	fp FleetLayoutParams,
) (FleetLayoutResult, *fleetSim, error) {
	res := FleetLayoutResult{
		LayoutResult: LayoutResult{Product: p.Name, Load: load, Shape: shape, Seed: seed},
		Nodes:        nodes,
		WaitsBy:      map[string][]float64{},
	}
	s, err := newFleetSim(p, nodes, shape, fp)
	if err != nil {
		return res, nil, err
	}
	s.pods = pods
	s.where = make([]int, len(pods))
	attempt := fp.AttemptTime[shape].Seconds()
	for i := range pods {
		s.push(pods[i].arrive, evArrive, i)
	}
	var waiting []int     // failed at least once, not done: retried by poke
	var pendingPods []int // arrived, not done: what claim watches see
	serverFree := 0.0
	enqueue := func(i int, t float64) {
		start := math.Max(t, serverFree)
		serverFree = start + attempt
		s.push(serverFree, evAttempt, i)
	}
	poke := func(t float64) {
		for _, i := range waiting {
			q := &s.pods[i]
			if q.queued || q.done() {
				continue
			}
			q.queued = true
			s.push(math.Max(t, q.backoffEnd), evReady, i)
		}
	}
	// demandChanged: the pending set changed.
	demandChanged := func(t float64) {
		switch shape {
		case LayoutShape:
			d := plan.Demand{}
			for _, i := range pendingPods {
				if q := s.pods[i]; !q.done() && q.profile != "" {
					d[q.profile]++
				}
			}
			if equalDemand(d, s.demand) {
				return
			}
			s.demand = d
			for ni := range s.nodes {
				s.change(ni, t)
			}
		case LedgerShape:
			if s.plan < t {
				s.plan = t + fp.PlannerLag.Seconds()
				s.push(s.plan, evPlan, -1)
			}
		}
	}
	dropWaiting := func(i int) {
		if k := slices.Index(waiting, i); k >= 0 {
			waiting = slices.Delete(waiting, k, k+1)
		}
		if k := slices.Index(pendingPods, i); k >= 0 {
			pendingPods = slices.Delete(pendingPods, k, k+1)
		}
	}
	end := 0.0
	for s.h.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return res, nil, err
		}
		e := heap.Pop(s.h).(lev)
		t := e.t
		end = t
		switch e.kind {
		case evArrive:
			s.pods[e.pod].queued = true
			pendingPods = append(pendingPods, e.pod)
			demandChanged(t)
			enqueue(e.pod, t)
			s.push(t+fp.Patience.Seconds(), evDeadline, e.pod)
		case evReady:
			if !s.pods[e.pod].done() {
				enqueue(e.pod, t)
			}
		case evAttempt:
			q := &s.pods[e.pod]
			q.queued = false
			if q.done() {
				continue
			}
			ni, gpu, start, ok, err := s.place(q.profile)
			if err != nil {
				return res, nil, err
			}
			if ok && s.admit(ni, gpu, start, q.profile, e.pod) {
				fn := s.nodes[ni]
				q.placed, q.gpu, q.start, q.at = true, gpu, start, t
				s.where[e.pod] = ni
				fn.fleet[gpu].Layout = append(
					fn.fleet[gpu].Layout,
					mig.Instance{Profile: q.profile, Start: start, InUse: true},
				)
				fn.order = nil
				if err := p.Validate(fn.fleet[gpu].Layout); err != nil {
					return res, nil, fmt.Errorf(
						"fleet model: node %d GPU %d after %s@%d: %w",
						ni,
						gpu,
						q.profile,
						start,
						err,
					)
				}
				dropWaiting(e.pod)
				s.push(t+q.life, evDepart, e.pod)
				s.lastPlaced = t
				switch shape {
				case LayoutShape:
					s.change(ni, t)
				case Counters:
					fn.writes++ // the placements publication republishes its pool
				}
				demandChanged(t)
				s.wholeWatch(t)
				continue
			}
			if q.failures == 0 {
				waiting = append(waiting, e.pod)
			}
			q.failures++
			b := fp.BackoffMin.Seconds() * math.Pow(2, float64(q.failures-1))
			q.backoffEnd = t + math.Min(b, fp.BackoffMax.Seconds())
		case evDepart:
			q := &s.pods[e.pod]
			ni := s.where[e.pod]
			fn := s.nodes[ni]
			fn.fleet[q.gpu].Layout = slices.DeleteFunc(
				fn.fleet[q.gpu].Layout,
				func(in mig.Instance) bool {
					return in.Profile == q.profile && in.Start == q.start
				},
			)
			fn.order = nil
			if shape == LedgerShape {
				fn.led.Observe(
					ledger.Observation{
						Claim:   ledger.ClaimRef{UID: types.UID(strconv.Itoa(e.pod))},
						Deleted: true,
					},
					false,
				)
				fn.ledgerWrites++
				demandChanged(t)
			}
			if shape == Counters {
				fn.writes++
			}
			s.change(ni, t)
			poke(t)
			s.wholeWatch(t)
		case evRepublish:
			if e.pod < 0 || t != s.nodes[e.pod].next {
				continue
			}
			changed, err := s.republish(e.pod, t, waiting)
			if err != nil {
				return res, nil, err
			}
			if changed {
				poke(t)
				s.wholeWatch(t)
			}
		case evShow:
			fn := s.nodes[e.pod]
			if cards, ok := s.shows[e.pod]; ok {
				delete(s.shows, e.pod)
				fn.shown = cards
				s.relaid[e.pod] = true
				poke(t)
				s.wholeWatch(t)
			}
		case evPlan:
			if t != s.plan {
				continue
			}
			if err := s.planStep(t, pendingPods); err != nil {
				return res, nil, err
			}
		case evDeadline:
			q := &s.pods[e.pod]
			if !q.placed {
				q.rejected = true
				dropWaiting(e.pod)
				demandChanged(t)
			}
		}
	}
	if s.since >= 0 && s.lastPlaced > s.since {
		s.noWhole += s.lastPlaced - s.since
	}
	writes, lw := 0, 0
	for _, fn := range s.nodes {
		writes += fn.writes
		lw += fn.ledgerWrites
	}
	res.Writes = float64(writes) / float64(nodes) / math.Max(end, 1)
	res.LedgerWrites = float64(lw) / float64(nodes) / math.Max(end, 1)
	warm := len(pods) / 10
	var arrivedC, acceptedC float64
	waited := 0
	for i := warm; i < len(pods); i++ {
		q := pods[i]
		res.Pods++
		arrivedC += q.compute
		if q.placed {
			acceptedC += q.compute
			w := q.at - q.arrive
			res.WaitsBy[q.profile] = append(res.WaitsBy[q.profile], w)
		}
		if q.failures > 0 {
			waited++
			if q.placed {
				res.Waits = append(res.Waits, q.at-q.arrive)
			}
		}
	}
	res.Accepted = acceptedC / math.Max(arrivedC, 1)
	res.Waited = float64(waited) / math.Max(float64(res.Pods), 1)
	return res, s, nil
}

// FleetBurstResult is the fleet burst row: n pods of the smallest
// profile at once on an idle fleet, and one large pod a moment later.
type FleetBurstResult struct {
	Shape Shape
	Nodes int
	// Last is when the last burst pod was placed (s).
	Last float64
	// Relaid is the number of nodes whose published layout changed.
	Relaid int
	// Landed is the number of nodes the burst's pods landed on.
	Landed int
	// NoWhole is how long (s) the fleet had an idle GPU but none offered
	// whole.
	NoWhole float64
	// Large is the wait (s) of the large pod.
	Large float64
}

// SimulateFleetBurst runs n pods of prof at t=0 on an idle fleet and one
// pod of large at t=lateAt, none departing, with an hour's patience.
func SimulateFleetBurst(
	ctx context.Context,
	p *mig.Product,
	nodes int,
	prof string,
	n int,
	large string,
	lateAt float64,
	shape Shape,
	fp FleetLayoutParams,
) (FleetBurstResult, error) {
	out := FleetBurstResult{Shape: shape, Nodes: nodes}
	pods := make([]layoutPod, n+1)
	for i := 0; i < n; i++ {
		pods[i] = layoutPod{arrive: 0, life: 1e9, profile: prof}
	}
	pods[n] = layoutPod{arrive: lateAt, life: 1e9, profile: large}
	fp.Patience = time.Hour
	_, st, err := runFleet(ctx, p, nodes, 0, shape, pods, 0, fp)
	if err != nil {
		return out, err
	}
	landed := map[int]bool{}
	for i := 0; i < n; i++ {
		q := st.pods[i]
		if !q.placed {
			return out, fmt.Errorf("fleet burst: pod %d not placed", i)
		}
		out.Last = math.Max(out.Last, q.at)
		landed[st.where[i]] = true
	}
	if big := st.pods[n]; big.placed {
		out.Large = big.at - big.arrive
	} else {
		out.Large = math.Inf(1)
	}
	out.Landed = len(landed)
	out.Relaid = len(st.relaid)
	out.NoWhole = st.noWhole
	return out, nil
}

// FleetLayoutBench prints the fleet model's tables: acceptance and waits
// per load for each fleet size (cfg.Arrivals pods per 8 nodes: a run
// fills a larger fleet as far), the burst rows, and slice writes per
// node per second.
func FleetLayoutBench(
	ctx context.Context,
	cfg Config,
	sizes []int,
	fp FleetLayoutParams,
	w io.Writer,
) error {
	p, err := mig.Lookup(cfg.Products[0])
	if err != nil {
		return err
	}
	shapes := []Shape{Counters, LayoutShape, LedgerShape}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(
		tw,
		"nodes\tload\tshape\tcw-accept\tvs counters (pts)\twaited\twait p50\tp99\t7g p99\t1g p99\tslice writes/node/s\tledger writes/node/s\t",
	)
	for _, n := range sizes {
		for _, load := range cfg.Loads {
			accs := map[Shape][]float64{}
			rows := map[Shape][]FleetLayoutResult{}
			for k := 0; k < cfg.Seeds; k++ {
				seed := cfg.Seed + int64(k)
				arrivals := layoutArrivals(
					p,
					load*float64(n),
					cfg.Arrivals*max(n/8, 1),
					seed,
					fp.LayoutParams,
				)
				for _, sh := range shapes {
					pods := slices.Clone(arrivals)
					r, _, err := runFleet(ctx, p, n, load, sh, pods, seed, fp)
					if err != nil {
						return fmt.Errorf("%d nodes, load %.1f, %s: %w", n, load, sh, err)
					}
					accs[sh] = append(accs[sh], r.Accepted)
					rows[sh] = append(rows[sh], r)
				}
			}
			for _, sh := range shapes {
				var all, big, small []float64
				var waited, writes, lwrites float64
				for _, r := range rows[sh] {
					lwrites += r.LedgerWrites
					all = append(all, r.Waits...)
					big = append(big, r.WaitsBy["7g.80gb"]...)
					small = append(small, r.WaitsBy["1g.10gb"]...)
					waited += r.Waited
					writes += r.Writes
				}
				m := statOf(accs[sh])
				diff := "-"
				if sh != Counters {
					var d []float64
					for k := range accs[sh] {
						d = append(d, 100*(accs[sh][k]-accs[Counters][k]))
					}
					ds := statOf(d)
					diff = fmt.Sprintf("%+.2f ± %.2f", ds.mean, ds.se)
				}
				sort.Float64s(all)
				sort.Float64s(big)
				sort.Float64s(small)
				fmt.Fprintf(
					tw,
					"%d\t%.1f\t%s\t%.4f ± %.4f\t%s\t%.1f%%\t%.1fs\t%.1fs\t%.1fs\t%.1fs\t%.3f\t%.3f\t\n",
					n,
					load,
					sh,
					m.mean,
					m.se,
					diff,
					100*waited/float64(
						len(rows[sh]),
					),
					fquantile(all, 0.5),
					fquantile(all, 0.99),
					fquantile(big, 0.99),
					fquantile(
						small,
						0.99,
					),
					writes/float64(len(rows[sh])),
					lwrites/float64(len(rows[sh])),
				)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Burst: 100 pods of 1g.10gb at once on an idle fleet, one 7g.80gb 2 s later\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(
		tw,
		"nodes\tshape\tlast 1g placed\tnodes re-laid out\tnodes landed on\tno free whole GPU (s)\t7g wait\t",
	)
	for _, n := range sizes {
		for _, sh := range shapes {
			b, err := SimulateFleetBurst(ctx, p, n, "1g.10gb", 100, "7g.80gb", 2, sh, fp)
			if err != nil {
				return fmt.Errorf("burst %d nodes %s: %w", n, sh, err)
			}
			fmt.Fprintf(
				tw,
				"%d\t%s\t%.2fs\t%d\t%d\t%.2f\t%.2fs\t\n",
				n,
				sh,
				b.Last,
				b.Relaid,
				b.Landed,
				b.NoWhole,
				b.Large,
			)
		}
	}
	return tw.Flush()
}
