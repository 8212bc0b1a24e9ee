package ledger_test

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
)

// The adversarial model (issue 46). One API server (a global revision,
// objects with resourceVersions, compare-and-swap writes) and everything
// around it as independent actors whose steps an event queue orders with
// random delays drawn from wide, heavy-tailed ranges, and restarts at any
// step:
//
//   - per node, two driver instances (a rolling update's surge), each
//     with its own watch of the node's ledger (or, for the decision
//     fence, of the claims), planning and writing; each with a slice
//     controller that writes its latest desired slice after a delay of
//     up to 30 s and, after a conflict, writes the latest desired state
//     again after a backoff;
//   - one scheduler with lagging watches of the slices and the claims,
//     allocating with the real allocator (structured, through
//     internal/alloc) from the slices it sees, holding one pod in ten in
//     Permit for 30 s to 5 minutes (a gang), writing the allocation
//     against the claim's resourceVersion, retrying after conflicts;
//   - two webhook replicas with lagging watches, called by the API
//     server for each allocation write, the write committing later (or
//     failing its compare-and-swap);
//   - a planner with a lagging claim watch (the ledger only);
//   - a kubelet that prepares a bound pod's devices on the node's NVML,
//     which refuses a partition overlapping one that exists: that pod is
//     stuck on an allocation that cannot be prepared.
//
// After every commit the allocations of each card must be a valid layout
// (no two overlapping): overlaps counts the commits after which they are
// not. Delays are in model seconds only to spread the orders; nothing in
// the ledger's design reads a clock.

const (
	advDriver = "gpu.example.com"
	advSecond = time.Second
)

// design is which publication the model runs.
type design string

const (
	designLedger design = "ledger" // partition/ledger
	designFence  design = "fence"  // engine.LayoutPublisher + a slice-membership check
)

type advParams struct {
	design      design
	nodes       int
	cards       int
	pods        int
	seed        int64
	restart     float64       // chance per event of a restart of a random actor
	maxSlice    time.Duration // the longest slice write delay
	maxLag      time.Duration // the longest watch lag
	maxCommit   time.Duration // the longest admission-to-commit gap
	gangHoldMax time.Duration
}

func defaultAdv(d design, seed int64) advParams {
	return advParams{design: d, nodes: 2, cards: 2, pods: 150, seed: seed, restart: 0.01,
		maxSlice: 30 * advSecond, maxLag: 10 * advSecond, maxCommit: 3 * advSecond,
		gangHoldMax: 5 * time.Minute}
}

type advStats struct {
	placed, refused, conflicts, restarts int
	overlaps, stuck                      int
	firstOverlap                         string
	maxRecovery                          time.Duration
}

// --- the event queue ---

type event struct {
	at  time.Duration
	seq int
	do  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// --- the world ---

type vLedger struct {
	rv int64
	l  *ledger.Ledger
}

type vSlice struct {
	rv    int64
	cards []partition.PublishedCard
}

type aClaim struct {
	ref     ledger.ClaimRef
	rv      int64
	profile string
	alloc   []ledger.Device // committed
	node    int             // of alloc
	deleted bool
}

type podState int

const (
	pending podState = iota
	inPermit
	writing
	bound
	running
	done
)

type aPod struct {
	claim     *aClaim
	state     podState
	backoff   time.Duration
	refusedAt time.Duration // first refusal since last placement, -1 none
	gen       int           // scheduler generation that holds it
	devs      []ledger.Device
	node      int
}

type aPub struct {
	n       *aNode
	id      int
	gen     int
	view    *vLedger // ledger design: its watch's view
	desired []partition.PublishedCard
	sliceRV int64 // slice controller's last known slice rv
	ctrlDue bool
	fence   *engine.LayoutPublisher
	retryAt time.Duration
}

type aNode struct {
	i      int
	name   string
	pool   string
	ledger vLedger
	slice  vSlice
	nvml   map[int]partition.Layout // per card: instances made
	whole  map[int]bool             // per card: whole card in use
	pubs   []*aPub
}

type world struct {
	t      testing.TB
	p      advParams
	rng    *rand.Rand
	now    time.Duration
	seq    int
	rev    int64
	q      eventHeap
	scheme *partition.Scheme
	cm     counter.Model
	al     *alloc.Allocator
	nodes  []*aNode
	claims map[types.UID]*aClaim
	pods   []*aPod

	schedGen     int
	schedSlices  map[int]vSlice // scheduler's view of each node's slice
	schedClaims  map[types.UID]aClaim
	whSlices     [2]map[int]vSlice   // fence: webhook replicas' slice views
	whLedgers    [2]map[int]*vLedger // ledger: webhook replicas' ledger views
	pubClaims    map[*aPub]map[types.UID]aClaim
	plannerGen   int
	plannerViews map[types.UID]aClaim
	sliceCache   map[[2]int64][]*resourceapi.ResourceSlice

	stats advStats
}

func newWorld(t testing.TB, p advParams) *world {
	prod, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	s := prod.Scheme()
	var cards []counter.Card
	for c := 0; c < p.cards; c++ {
		cards = append(cards, counter.Card{Index: c, Scheme: s})
	}
	cm, err := counter.NewModel(cards)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, p: p, rng: rand.New(rand.NewSource(p.seed)), scheme: s, cm: cm,
		al: alloc.New(advDriver, alloc.Features), claims: map[types.UID]*aClaim{},
		schedSlices: map[int]vSlice{}, schedClaims: map[types.UID]aClaim{},
		pubClaims: map[*aPub]map[types.UID]aClaim{}, plannerViews: map[types.UID]aClaim{},
		sliceCache: map[[2]int64][]*resourceapi.ResourceSlice{}}
	for r := range w.whSlices {
		w.whSlices[r] = map[int]vSlice{}
		w.whLedgers[r] = map[int]*vLedger{}
	}
	for i := 0; i < p.nodes; i++ {
		n := &aNode{
			i:     i,
			name:  "node-" + strconv.Itoa(i),
			nvml:  map[int]partition.Layout{},
			whole: map[int]bool{},
		}
		n.pool = n.name + "/layout"
		n.ledger = vLedger{rv: w.bump(), l: &ledger.Ledger{Node: n.name, Seeded: true}}
		n.slice = vSlice{rv: w.bump()}
		for j := 0; j < 2; j++ {
			pub := &aPub{n: n, id: j}
			n.pubs = append(n.pubs, pub)
			w.restartPub(pub)
		}
		w.nodes = append(w.nodes, n)
	}
	return w
}

func (w *world) bump() int64 { w.rev++; return w.rev }

func (w *world) at(d time.Duration, f func()) {
	w.seq++
	heap.Push(&w.q, event{at: w.now + d, seq: w.seq, do: f})
}

// delay is log-uniform between 1 ms and max: mostly short, sometimes
// as long as max.
func (w *world) delay(max time.Duration) time.Duration {
	lo, hi := math.Log(float64(time.Millisecond)), math.Log(float64(max))
	return time.Duration(math.Exp(lo + w.rng.Float64()*(hi-lo)))
}

func (w *world) agentCards(n *aNode) []ledger.AgentCard {
	out := make([]ledger.AgentCard, w.p.cards)
	for c := range out {
		out[c] = ledger.AgentCard{
			Index:     c,
			Scheme:    w.scheme,
			Busy:      slices.Clone(n.nvml[c]),
			BusyWhole: n.whole[c],
		}
	}
	return out
}

func (w *world) schemes(string) (*partition.Scheme, error) { return w.scheme, nil }

// --- watches: every change is delivered to each watcher after its lag ---

func (w *world) ledgerChanged(n *aNode) {
	v := vLedger{rv: n.ledger.rv, l: n.ledger.l.Clone()}
	for _, pub := range n.pubs {
		pub, gen := pub, pub.gen
		w.at(w.delay(w.p.maxLag), func() {
			if pub.gen == gen && (pub.view == nil || pub.view.rv < v.rv) {
				c := v
				pub.view = &c
				w.pubSync(pub)
			}
		})
	}
	for r := range w.whLedgers {
		r := r
		w.at(w.delay(w.p.maxLag), func() {
			if old := w.whLedgers[r][n.i]; old == nil || old.rv < v.rv {
				c := v
				w.whLedgers[r][n.i] = &c
			}
		})
	}
}

func (w *world) sliceChanged(n *aNode) {
	v := vSlice{rv: n.slice.rv, cards: n.slice.cards}
	gen := w.schedGen
	w.at(w.delay(w.p.maxLag), func() {
		if w.schedGen == gen && w.schedSlices[n.i].rv < v.rv {
			w.schedSlices[n.i] = v
			w.kickPending()
		}
	})
	for r := range w.whSlices {
		r := r
		w.at(w.delay(w.p.maxLag), func() {
			if w.whSlices[r][n.i].rv < v.rv {
				w.whSlices[r][n.i] = v
			}
		})
	}
}

func (w *world) claimChanged(c *aClaim) {
	v := *c
	v.alloc = slices.Clone(c.alloc)
	gen := w.schedGen
	w.at(w.delay(w.p.maxLag), func() {
		if w.schedGen == gen && w.schedClaims[v.ref.UID].rv < v.rv {
			w.schedClaims[v.ref.UID] = v
		}
	})
	for _, n := range w.nodes {
		for _, pub := range n.pubs {
			pub, pgen := pub, pub.gen
			w.at(w.delay(w.p.maxLag), func() {
				m := w.pubClaims[pub]
				if pub.gen == pgen && m[v.ref.UID].rv < v.rv {
					m[v.ref.UID] = v
					w.pubSync(pub)
				}
			})
		}
	}
	pgen := w.plannerGen
	w.at(w.delay(w.p.maxLag), func() {
		if w.plannerGen == pgen && w.plannerViews[v.ref.UID].rv < v.rv {
			w.plannerViews[v.ref.UID] = v
			w.plannerObserve(v)
		}
	})
}

// --- restarts ---

func (w *world) restartPub(pub *aPub) {
	pub.gen++
	pub.view = nil
	pub.desired = nil
	pub.ctrlDue = false
	pub.sliceRV = pub.n.slice.rv // the new slice controller lists the slices
	m := map[types.UID]aClaim{}
	for uid, c := range w.claims { // a fresh list of the claims
		m[uid] = *c
	}
	w.pubClaims[pub] = m
	if w.p.design == designFence {
		lp, err := engine.NewLayoutPublisher(w.cardsOf())
		if err != nil {
			w.t.Fatal(err)
		}
		// Restore what the node's slice lists now (claimwatch's
		// WithPublished: a LIST at start).
		if cards := pub.n.slice.cards; len(cards) > 0 {
			var pubd []partition.PublishedCard
			for _, c := range cards {
				if c.Withheld {
					continue
				}
				l := partition.PublishedCard{
					LayoutCard: partition.LayoutCard{Index: c.Index, Scheme: c.Scheme},
				}
				for _, in := range c.Layout {
					l.Layout = append(
						l.Layout,
						partition.Instance{Profile: in.Profile, Start: in.Start},
					)
				}
				pubd = append(pubd, l)
			}
			if err := lp.Restore(pubd, time.Unix(0, 0).Add(w.now)); err != nil {
				w.t.Fatal(err)
			}
		}
		pub.fence = lp
	}
	gen := pub.gen
	w.at(w.delay(advSecond), func() {
		if pub.gen == gen {
			w.pubSync(pub)
		}
	})
}

func (w *world) cardsOf() []counter.Card {
	var out []counter.Card
	for c := 0; c < w.p.cards; c++ {
		out = append(out, counter.Card{Index: c, Scheme: w.scheme})
	}
	return out
}

func (w *world) maybeRestart() {
	if w.rng.Float64() >= w.p.restart {
		return
	}
	w.stats.restarts++
	switch k := w.rng.Intn(4); k {
	case 0, 1: // a driver instance
		n := w.nodes[w.rng.Intn(len(w.nodes))]
		w.restartPub(n.pubs[w.rng.Intn(len(n.pubs))])
	case 2: // a webhook replica: its caches are gone
		r := w.rng.Intn(2)
		w.whLedgers[r] = map[int]*vLedger{}
		w.whSlices[r] = map[int]vSlice{}
	case 3: // the planner, or the scheduler
		if w.rng.Intn(2) == 0 {
			w.plannerGen++
			w.plannerViews = map[types.UID]aClaim{}
			for uid, c := range w.claims {
				w.plannerViews[uid] = *c
				w.plannerObserve(*c)
			}
			return
		}
		w.schedGen++
		w.schedSlices = map[int]vSlice{}
		for _, n := range w.nodes {
			w.schedSlices[n.i] = n.slice
		}
		w.schedClaims = map[types.UID]aClaim{}
		for uid, c := range w.claims {
			w.schedClaims[uid] = *c
		}
		for _, p := range w.pods {
			if p.state == inPermit { // lost with the scheduler's memory
				p.state = pending
				w.retry(p, advSecond)
			}
		}
	}
}

// --- the driver instances ---

func (w *world) pubSync(pub *aPub) {
	n := pub.n
	switch w.p.design {
	case designLedger:
		if pub.view == nil { // a fresh process: GET
			pub.view = &vLedger{rv: n.ledger.rv, l: n.ledger.l.Clone()}
		}
		next := pub.view.l.Clone()
		if _, err := next.Publish(n.pool, w.agentCards(n)); err != nil {
			w.t.Fatal(err)
		}
		committed := pub.view
		if !equalLedger(next, pub.view.l) {
			if pub.view.rv != n.ledger.rv { // compare-and-swap fails: read again
				w.stats.conflicts++
				pub.view = &vLedger{rv: n.ledger.rv, l: n.ledger.l.Clone()}
				gen := pub.gen
				w.at(w.delay(100*time.Millisecond), func() {
					if pub.gen == gen {
						w.pubSync(pub)
					}
				})
				return
			}
			n.ledger = vLedger{rv: w.bump(), l: next}
			w.checkLedger(n)
			committed = &vLedger{rv: n.ledger.rv, l: next.Clone()}
			pub.view = committed
			w.ledgerChanged(n)
		}
		cards, err := committed.l.Layout(n.pool, w.agentCards(n))
		if err != nil {
			w.t.Fatal(err)
		}
		w.desire(pub, cards)
	case designFence:
		var uses []engine.CardUse
		held := map[int]*engine.CardUse{}
		for c := 0; c < w.p.cards; c++ {
			u := engine.CardUse{Index: c, Whole: n.whole[c]}
			for _, in := range n.nvml[c] {
				in.InUse = true
				u.InUse = append(u.InUse, in)
			}
			uses = append(uses, u)
			held[c] = &uses[len(uses)-1]
		}
		demand := plan.Demand{}
		for _, c := range w.pubClaims[pub] {
			if c.deleted {
				continue
			}
			if len(c.alloc) == 0 {
				demand[c.profile]++
				continue
			}
			if c.node != n.i {
				continue
			}
			for _, d := range c.alloc {
				ref, err := w.scheme.ParseDeviceName(d.Name)
				if err != nil {
					continue
				}
				u := held[ref.Card]
				if ref.Profile == "" {
					if len(u.InUse) == 0 {
						u.Whole = true
					}
					continue
				}
				in := partition.Instance{Profile: ref.Profile, Start: ref.Start, InUse: true}
				if !u.Whole && !slices.ContainsFunc(u.InUse, func(x partition.Instance) bool {
					return x.Profile == in.Profile && x.Start == in.Start
				}) && w.scheme.Validate(append(slices.Clone(u.InUse), in)) == nil {
					u.InUse = append(u.InUse, in)
				}
			}
		}
		v, err := pub.fence.Next(uses, demand, time.Unix(0, 0).Add(w.now))
		if err != nil {
			w.t.Fatal(err)
		}
		if v.HeldBack > 0 {
			gen := pub.gen
			w.at(v.Retry.Sub(time.Unix(0, 0).Add(w.now))+time.Millisecond, func() {
				if pub.gen == gen {
					w.pubSync(pub)
				}
			})
		}
		w.desire(pub, v.Cards)
	}
}

func equalLedger(a, b *ledger.Ledger) bool {
	return fmt.Sprintf("%+v", *a) == fmt.Sprintf("%+v", *b)
}

// desire hands the slice controller a new desired state; it writes it
// after a delay.
func (w *world) desire(pub *aPub, cards []partition.PublishedCard) {
	if sameCards(pub.desired, cards) {
		return
	}
	pub.desired = cards
	if pub.ctrlDue {
		return
	}
	pub.ctrlDue = true
	gen := pub.gen
	w.at(w.delay(w.p.maxSlice), func() {
		if pub.gen == gen {
			w.sliceWrite(pub)
		}
	})
}

func sameCards(a, b []partition.PublishedCard) bool {
	return slices.EqualFunc(a, b, func(x, y partition.PublishedCard) bool {
		return x.Index == y.Index && x.WholeInUse == y.WholeInUse && x.Withheld == y.Withheld &&
			slices.EqualFunc(x.Layout, y.Layout, func(p, q partition.Instance) bool {
				return p.Profile == q.Profile && p.Start == q.Start
			})
	})
}

// sliceWrite writes the latest desired state against the slice's
// resourceVersion the controller knows; after a conflict it reads the
// slice and writes the latest desired state again after a backoff.
func (w *world) sliceWrite(pub *aPub) {
	n := pub.n
	if pub.sliceRV != n.slice.rv {
		pub.sliceRV = n.slice.rv
		gen := pub.gen
		w.at(100*time.Millisecond+w.delay(5*advSecond), func() {
			if pub.gen == gen {
				w.sliceWrite(pub)
			}
		})
		return
	}
	pub.ctrlDue = false
	if sameCards(n.slice.cards, pub.desired) {
		return
	}
	n.slice = vSlice{rv: w.bump(), cards: pub.desired}
	pub.sliceRV = n.slice.rv
	w.sliceChanged(n)
}

// --- the planner (ledger design) ---

// plannerObserve resolves the claim's Held entries on every node and
// sets the demand: what pending claims ask, on every node (the model's
// planner assigns nothing: every node lays out for everything, the
// hardest case for safety).
func (w *world) plannerObserve(c aClaim) {
	if w.p.design != designLedger {
		return
	}
	demand := plan.Demand{}
	for _, v := range w.plannerViews {
		if !v.deleted && len(v.alloc) == 0 {
			demand[v.profile]++
		}
	}
	for _, n := range w.nodes {
		o := ledger.Observation{
			Claim:           c.ref,
			ResourceVersion: strconv.FormatInt(c.rv, 10),
			Deleted:         c.deleted,
		}
		if c.node == n.i {
			o.Allocated = c.alloc
		}
		w.ledgerUpdate(n, func(l *ledger.Ledger) {
			l.Observe(o, true)
			l.Reconcile(w.schemes)
			l.Demand = demand
		})
	}
}

// ledgerUpdate is a compare-and-swap loop from the current version (the
// planner's and the webhook's reads after a conflict).
func (w *world) ledgerUpdate(n *aNode, change func(*ledger.Ledger)) {
	next := n.ledger.l.Clone()
	change(next)
	if equalLedger(next, n.ledger.l) {
		return
	}
	n.ledger = vLedger{rv: w.bump(), l: next}
	w.checkLedger(n)
	w.ledgerChanged(n)
}

func (w *world) checkLedger(n *aNode) {
	if err := n.ledger.l.Check(w.schemes); err != nil {
		w.t.Fatalf("t=%s: ledger invariant: %v", w.now, err)
	}
}

// --- the scheduler ---

func (w *world) kickPending() {
	for _, p := range w.pods {
		if p.state == pending && p.backoff == 0 {
			p.backoff = -1 // scheduled
			w.at(w.delay(50*time.Millisecond), func() { w.attempt(p) })
		}
	}
}

func (w *world) retry(p *aPod, backoff time.Duration) {
	p.backoff = -1
	w.at(backoff, func() { w.attempt(p) })
}

func selector(al *alloc.Allocator, profile string) string {
	if profile == partition.WholeCard {
		return al.Attr(mig.AttrType) + ` == "gpu"`
	}
	return al.Attr(
		mig.AttrType,
	) + ` == "mig" && ` + al.Attr(
		mig.AttrProfile,
	) + ` == "` + profile + `"`
}

func (w *world) slicesOf(n int) []*resourceapi.ResourceSlice {
	v := w.schedSlices[n]
	if len(v.cards) == 0 {
		return nil
	}
	key := [2]int64{int64(n), v.rv}
	if s, ok := w.sliceCache[key]; ok {
		return s
	}
	s, err := w.cm.LayoutSlices(advDriver, w.nodes[n].pool, w.nodes[n].name, v.rv, v.cards)
	if err != nil {
		w.t.Fatal(err)
	}
	w.sliceCache[key] = s
	return s
}

// attempt is one scheduling attempt: the real allocator over the
// scheduler's view of each node's slice, the devices it knows allocated
// (committed as its claim watch shows them, and its own in flight).
func (w *world) attempt(p *aPod) {
	if p.state != pending || p.claim.deleted {
		return
	}
	p.backoff = 0
	order := w.rng.Perm(len(w.nodes))
	for _, ni := range order {
		n := w.nodes[ni]
		sl := w.slicesOf(ni)
		if len(sl) == 0 {
			continue
		}
		allocated := sets.New[structured.DeviceID]()
		add := func(d ledger.Device) {
			allocated.Insert(structured.MakeDeviceID(advDriver, d.Pool, d.Name))
		}
		for _, c := range w.schedClaims {
			if !c.deleted && c.node == ni {
				for _, d := range c.alloc {
					add(d)
				}
			}
		}
		for _, q := range w.pods {
			if q != p && (q.state == inPermit || q.state == writing) && q.node == ni {
				for _, d := range q.devs {
					add(d)
				}
			}
		}
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		got, err := w.al.One(
			context.Background(),
			node,
			sl,
			allocated,
			selector(w.al, p.claim.profile),
		)
		if err != nil {
			w.t.Fatal(err)
		}
		if got == "" {
			continue
		}
		p.state, p.node, p.devs, p.gen = inPermit, ni, []ledger.Device{
			{Pool: n.pool, Name: got},
		}, w.schedGen
		hold := w.delay(100 * time.Millisecond)
		if w.rng.Intn(10) == 0 { // a gang member waits for the others
			hold = 30*advSecond + time.Duration(w.rng.Int63n(int64(w.p.gangHoldMax)))
		}
		gen := w.schedGen
		w.at(hold, func() {
			if w.schedGen == gen && p.state == inPermit {
				p.state = writing
				w.write(p, w.schedClaims[p.claim.ref.UID].rv)
			}
		})
		return
	}
	p.backoff = min(max(2*p.backoff, advSecond), 10*advSecond)
	w.retry(p, p.backoff)
}

// write is PreBind's claim status update against rv: the API server
// calls a webhook replica; the write commits later, if the claim is still
// at rv.
func (w *world) write(p *aPod, rv int64) {
	c := p.claim
	if c.deleted {
		p.state = done
		return
	}
	r := w.rng.Intn(2)
	ok := false
	switch w.p.design {
	case designLedger:
		ok = w.admitLedger(r, p, rv)
	case designFence:
		ok = true
		listed := map[string]bool{}
		for _, lc := range w.whSlices[r][p.node].cards {
			if lc.Withheld {
				continue
			}
			if len(lc.Layout) == 0 {
				listed[w.scheme.CardDeviceName(lc.Index)] = true
			}
			for _, in := range lc.Layout {
				name, _ := w.scheme.DeviceName(lc.Index, in.Profile, in.Start)
				listed[name] = true
			}
		}
		if len(w.whSlices[r][p.node].cards) > 0 { // a pool the guard knows
			for _, d := range p.devs {
				ok = ok && listed[d.Name]
			}
		}
	}
	if !ok {
		w.stats.refused++
		if p.refusedAt < 0 {
			p.refusedAt = w.now
		}
		p.state, p.devs = pending, nil
		p.backoff = min(max(2*p.backoff, advSecond), 10*advSecond)
		w.retry(p, p.backoff)
		return
	}
	w.at(w.delay(w.p.maxCommit), func() { w.commit(p, rv) })
}

func (w *world) admitLedger(r int, p *aPod, rv int64) bool {
	n := w.nodes[p.node]
	view := w.whLedgers[r][p.node]
	if view == nil {
		view = &vLedger{rv: n.ledger.rv, l: n.ledger.l.Clone()}
	}
	for {
		next := view.l.Clone()
		err := next.Admit(p.claim.ref, strconv.FormatInt(rv, 10), p.devs)
		if err != nil {
			return false
		}
		if view.rv != n.ledger.rv { // conflict: GET and apply again
			w.stats.conflicts++
			view = &vLedger{rv: n.ledger.rv, l: n.ledger.l.Clone()}
			w.whLedgers[r][p.node] = view
			continue
		}
		if !equalLedger(next, view.l) {
			n.ledger = vLedger{rv: w.bump(), l: next}
			w.checkLedger(n)
			w.ledgerChanged(n)
		}
		return true
	}
}

// commit lands an admitted write: it compares the claim's
// resourceVersion; on a conflict the scheduler reads the claim and
// writes again (admission again).
func (w *world) commit(p *aPod, rv int64) {
	c := p.claim
	if c.deleted {
		p.state = done
		return
	}
	if c.rv != rv {
		if len(c.alloc) > 0 { // allocated meanwhile: a failed bind
			p.state, p.devs = pending, nil
			w.retry(p, advSecond)
			return
		}
		w.write(p, c.rv)
		return
	}
	c.alloc, c.node, c.rv = slices.Clone(p.devs), p.node, w.bump()
	if w.schedGen == p.gen { // the scheduler's assume cache has its own write at once
		w.schedClaims[c.ref.UID] = aClaim{
			ref:     c.ref,
			rv:      c.rv,
			profile: c.profile,
			alloc:   slices.Clone(c.alloc),
			node:    c.node,
		}
	}
	w.claimChanged(c)
	w.checkOverlap(p.node)
	p.state = bound
	w.stats.placed++
	if p.refusedAt >= 0 {
		w.stats.maxRecovery = max(w.stats.maxRecovery, w.now-p.refusedAt)
		p.refusedAt = -1
	}
	w.at(500*time.Millisecond+w.delay(3*advSecond), func() { w.prepare(p) })
}

// checkOverlap checks that the committed allocations of every card of a
// node form a valid layout.
func (w *world) checkOverlap(ni int) {
	parts := map[int]partition.Layout{}
	whole := map[int]int{}
	for _, c := range w.claims {
		if c.deleted || c.node != ni {
			continue
		}
		for _, d := range c.alloc {
			ref, err := w.scheme.ParseDeviceName(d.Name)
			if err != nil {
				w.t.Fatal(err)
			}
			if ref.Profile == "" {
				whole[ref.Card]++
				continue
			}
			parts[ref.Card] = append(
				parts[ref.Card],
				partition.Instance{Profile: ref.Profile, Start: ref.Start},
			)
		}
	}
	for card := 0; card < w.p.cards; card++ {
		var err error
		switch {
		case whole[card] > 1 || whole[card] == 1 && len(parts[card]) > 0:
			err = fmt.Errorf("whole card allocated beside %v", parts[card])
		default:
			err = w.scheme.Validate(parts[card])
		}
		if err != nil {
			w.stats.overlaps++
			if w.stats.firstOverlap == "" {
				w.stats.firstOverlap = fmt.Sprintf("t=%s node %d card %d: %v", w.now, ni, card, err)
			}
		}
	}
}

// --- the kubelet and the pods' lives ---

func (w *world) prepare(p *aPod) {
	n := w.nodes[p.node]
	for _, d := range p.devs {
		ref, _ := w.scheme.ParseDeviceName(d.Name)
		if ref.Profile == "" {
			if n.whole[ref.Card] || len(n.nvml[ref.Card]) > 0 {
				w.stuck(p)
				return
			}
			continue
		}
		in := partition.Instance{Profile: ref.Profile, Start: ref.Start}
		if n.whole[ref.Card] ||
			w.scheme.Validate(append(slices.Clone(n.nvml[ref.Card]), in)) != nil {
			w.stuck(p)
			return
		}
	}
	for _, d := range p.devs {
		ref, _ := w.scheme.ParseDeviceName(d.Name)
		if ref.Profile == "" {
			n.whole[ref.Card] = true
		} else {
			n.nvml[ref.Card] = append(n.nvml[ref.Card], partition.Instance{Profile: ref.Profile, Start: ref.Start})
		}
	}
	p.state = running
	for _, pub := range n.pubs {
		w.pubSync(pub)
	}
	w.at(5*advSecond+w.delay(60*advSecond), func() { w.finish(p) })
}

// stuck: NVML refused the partition; the kubelet would retry forever.
// The model counts it and releases the claim so the run goes on.
func (w *world) stuck(p *aPod) {
	w.stats.stuck++
	if w.stats.firstOverlap == "" {
		w.stats.firstOverlap = fmt.Sprintf(
			"t=%s: prepare of %v on node %d refused by NVML",
			w.now,
			p.devs,
			p.node,
		)
	}
	w.release(p)
}

func (w *world) finish(p *aPod) {
	n := w.nodes[p.node]
	for _, d := range p.devs {
		ref, _ := w.scheme.ParseDeviceName(d.Name)
		if ref.Profile == "" {
			n.whole[ref.Card] = false
			continue
		}
		n.nvml[ref.Card] = slices.DeleteFunc(n.nvml[ref.Card], func(x partition.Instance) bool {
			return x.Profile == ref.Profile && x.Start == ref.Start
		})
	}
	for _, pub := range n.pubs {
		w.pubSync(pub)
	}
	w.release(p)
}

// release deallocates and deletes the pod's claim, after a delay (the
// ResourceClaim controller), and starts a new pod in its place.
func (w *world) release(p *aPod) {
	p.state = done
	c := p.claim
	w.at(w.delay(2*advSecond), func() {
		c.alloc, c.rv = nil, w.bump()
		w.claimChanged(c)
		w.at(w.delay(advSecond), func() {
			c.deleted, c.rv = true, w.bump()
			w.claimChanged(c)
		})
	})
}

var advProfiles = []string{
	"1g.10gb",
	"1g.10gb",
	"1g.10gb",
	"2g.20gb",
	"3g.40gb",
	"4g.40gb",
	"7g.80gb",
	partition.WholeCard,
}

func (w *world) arrive(k int) {
	c := &aClaim{ref: ledger.ClaimRef{UID: types.UID(fmt.Sprintf("uid-%d", k)), Namespace: "ns",
		Name: "claim-" + strconv.Itoa(
			k,
		)}, profile: advProfiles[w.rng.Intn(len(advProfiles))], node: -1}
	c.rv = w.bump()
	w.claims[c.ref.UID] = c
	p := &aPod{claim: c, refusedAt: -1}
	w.pods = append(w.pods, p)
	w.claimChanged(c)
	w.retry(p, w.delay(100*time.Millisecond))
}

func runAdversarial(t testing.TB, p advParams) advStats {
	w := newWorld(t, p)
	for _, n := range w.nodes {
		for _, pub := range n.pubs {
			w.pubSync(pub)
		}
	}
	arrival := time.Duration(0)
	for k := 0; k < p.pods; k++ {
		arrival += time.Duration(w.rng.ExpFloat64() * float64(2*advSecond))
		k := k
		w.seq++
		heap.Push(&w.q, event{at: arrival, seq: w.seq, do: func() { w.arrive(k) }})
	}
	horizon := arrival + 20*time.Minute
	for w.q.Len() > 0 {
		e := heap.Pop(&w.q).(event)
		if e.at > horizon {
			break
		}
		w.now = e.at
		e.do()
		w.maybeRestart()
	}
	return w.stats
}

// TestAdversarial runs the model for the ledger and for the decision
// fence of engine.LayoutPublisher with the layout guard's
// slice-membership check (the design before issue 46), on the same
// seeds: the ledger must commit no overlapping allocation and leave no
// pod stuck on an allocation that cannot be prepared, and place pods;
// the model must find the fence's failures (else it would not be
// adversarial enough to trust the ledger's zero).
func TestAdversarial(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	var fence advStats
	for seed := int64(1); seed <= int64(seeds); seed++ {
		s := runAdversarial(t, defaultAdv(designLedger, seed))
		t.Logf(
			"ledger seed %d: placed %d, refused %d, conflicts %d, restarts %d, overlaps %d, stuck %d,"+
				" longest refusal-to-placement %s",
			seed,
			s.placed,
			s.refused,
			s.conflicts,
			s.restarts,
			s.overlaps,
			s.stuck,
			s.maxRecovery.Round(time.Millisecond),
		)
		if s.overlaps > 0 || s.stuck > 0 {
			t.Errorf(
				"ledger seed %d: %d overlapping allocations committed, %d pods stuck: first %s",
				seed,
				s.overlaps,
				s.stuck,
				s.firstOverlap,
			)
		}
		if s.placed < defaultAdv(designLedger, seed).pods/2 {
			t.Errorf("ledger seed %d: only %d pods placed", seed, s.placed)
		}
		f := runAdversarial(t, defaultAdv(designFence, seed))
		t.Logf(
			"fence  seed %d: placed %d, refused %d, restarts %d, overlaps %d, stuck %d: first %s",
			seed,
			f.placed,
			f.refused,
			f.restarts,
			f.overlaps,
			f.stuck,
			f.firstOverlap,
		)
		fence.overlaps += f.overlaps
		fence.stuck += f.stuck
	}
	if fence.overlaps+fence.stuck == 0 {
		t.Errorf(
			"the model found no failure of the decision fence in %d seeds: it is not adversarial enough",
			seeds,
		)
	}
}
