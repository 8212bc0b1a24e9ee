package bench

import (
	"container/heap"
	"context"
	"fmt"
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
	"io"
	"math"
	"math/rand"
	"runtime"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/drakit/drakit/mig"
)

// The layout in the online model (issue 38, docs/dynamic-mig-publication.md,
// "How the online bench must model it"). One node of 8 GPUs, time in
// seconds. Unlike Simulate (a loss system), a pod that finds no room waits:
//
//   - The scheduler is one server: an attempt takes AttemptTime (the
//     throughput bench's per-pod time of the shape) and is decided, and its
//     allocation committed, when it ends. It takes the first device of the
//     pod's profile, free and fitting, in the shape's order.
//   - Layout: the scheduler sees only the published version
//     (engine.LayoutPublisher's output), first fit in slice order. The
//     driver calls Next after a lag (100 ms, 1 s when the previous change
//     was less than a second before) on every attempt it could not serve and
//     every departure, and at the fence's Retry; the fence applies through
//     the publisher. The driver sees allocations at once (no watch lag in
//     this model), so the in-use sets given to Next are exact.
//   - Counters (the baseline, today's shape): every placement is published
//     with counters, in the order of "planner, pool per GPU"
//     (mig.Preference, stable by GPU); the scheduler takes the first that
//     fits the GPU's in-use instances, which is what the allocator decides
//     with counters for a one-device claim. No republish is ever needed.
//   - A pod that fails waits: kube-scheduler's backoff (1 s doubling to 10 s
//     per failed attempt), retried at the first event after which it may
//     succeed (a departure on either shape; a changed version on the
//     layout), not before its backoff ends; rejected if not placed within
//     the patience.
//   - Arrivals are a Poisson stream of bursts, each of a geometric number of
//     pods (mean BurstMean) of one class of the Mix, lifetimes exponential
//     (mean MeanLife); the load is offered compute over capacity, as in
//     Simulate. Both shapes see the same arrivals for one seed.

// Shape is what a dynamic-MIG driver publishes, in the layout model.
type Shape string

// Shapes compared by LayoutBench.
const (
	// Counters is today's shape: every placement, with counters, in the
	// planner's order, one pool per GPU.
	Counters Shape = "counters"
	// LayoutShape is the planner's layout without counters, one pool of
	// one slice (engine.LayoutPublisher).
	LayoutShape Shape = "layout"
)

// LayoutParams are the model's times and burst size.
type LayoutParams struct {
	// MeanLife is the mean lifetime of a pod.
	MeanLife time.Duration
	// Patience is how long a pod waits for a device before it counts
	// as rejected.
	Patience time.Duration
	// BurstMean is the mean number of pods of a burst (geometric).
	BurstMean float64
	// Lag is the driver's republish lag; ChurnLag replaces it when the
	// previous change came less than ChurnWindow before.
	Lag, ChurnLag, ChurnWindow time.Duration
	// Fence is the publisher's fence (engine.WithFence).
	Fence time.Duration
	// BackoffMin and BackoffMax bound kube-scheduler's backoff.
	BackoffMin, BackoffMax time.Duration
	// AttemptTime is the scheduler's time per attempt, per shape.
	AttemptTime map[Shape]time.Duration
	// Check validates every GPU's in-use instances (Product.Validate)
	// after every allocation and every version's free devices against
	// them; a violation is an error. The tests set it.
	Check bool
}

// DefaultLayoutParams are the model's parameters of the design note:
// lifetimes of 30 minutes, patience 60 s, bursts of 4, republish lag 100
// ms or 1 s, fence engine.DefaultFence, backoff 1-10 s, and the
// attempt times of the throughput bench's burst of 56 pods on one node
// (16.0 pods/s as shipped, 17.2 the layout).
func DefaultLayoutParams() LayoutParams {
	return LayoutParams{
		MeanLife: 30 * time.Minute, Patience: 60 * time.Second, BurstMean: 4,
		Lag: 100 * time.Millisecond, ChurnLag: time.Second, ChurnWindow: time.Second,
		Fence:      engine.DefaultFence,
		BackoffMin: time.Second, BackoffMax: 10 * time.Second,
		AttemptTime: map[Shape]time.Duration{Counters: time.Second / 16, LayoutShape: time.Second * 10 / 172},
	}
}

// LayoutConfig is the configuration of LayoutBench: 8 x H100, 3 seeds of
// 2,000 pods, loads 0.6-1.2 (Config's Seed, Seeds, Arrivals, Loads and
// Products apply; Arrivals counts pods).
func LayoutConfig() Config {
	return Config{Seed: 1, Seeds: 3, Arrivals: 2000, Loads: []float64{0.6, 0.8, 1.0, 1.2}, Products: []string{"H100-80GB"}}
}

// LayoutResult is one run of SimulateLayout.
type LayoutResult struct {
	Product string
	Load    float64
	Shape   Shape
	Seed    int64
	// Pods is the number of counted pods (after the first tenth).
	Pods int
	// Accepted is the compute-weighted acceptance.
	Accepted float64
	// Waited is the share of counted pods whose first attempt failed.
	Waited float64
	// Reject is the rejection rate per Mix class the product has.
	Reject map[string]float64
	// Waits are the seconds from arrival to placement of the counted
	// pods that waited and were placed; LayoutWaits those of them whose
	// GPU free space could hold them at their first failure (they waited
	// for a layout), SpaceWaits the others (they waited for space).
	Waits, LayoutWaits, SpaceWaits []float64
	// Versions is the number of distinct versions published (layout).
	Versions int64
	// Checks counts the validity checks made (LayoutParams.Check).
	Checks int
	// Placed records every placement (for replays): pod index, GPU,
	// profile, start, time placed and time it departs.
	Placed []Placed
}

// Placed is one placement of SimulateLayout.
type Placed struct {
	Pod, GPU    int
	Profile     string
	Start       int
	At, Departs float64
}

// layoutPod is one pod of the layout model.
type layoutPod struct {
	arrive, life     float64
	class            int
	profile          string
	compute          float64
	placed, rejected bool
	queued           bool // an attempt or a ready event is pending
	failures         int
	backoffEnd       float64
	couldFit         bool // at the first failure, the GPUs' free space could hold it
	gpu, start       int
	at               float64
}

func (q *layoutPod) done() bool { return q.placed || q.rejected }

// Event kinds of the layout model, in the order they are handled at one
// instant.
const (
	evDepart = iota
	evRepublish
	evArrive
	evReady
	evAttempt
	evDeadline
)

type lev struct {
	t    float64
	kind int
	seq  int
	pod  int
}

type levHeap []lev

func (h levHeap) Len() int { return len(h) }
func (h levHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	if h[a].kind != h[b].kind {
		return h[a].kind < h[b].kind
	}
	return h[a].seq < h[b].seq
}
func (h levHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *levHeap) Push(x any)   { *h = append(*h, x.(lev)) }
func (h *levHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// layoutArrivals draws the pods of one run: a Poisson stream of bursts of
// a geometric number of pods of one class, until n pods.
func layoutArrivals(p *mig.Product, load float64, n int, seed int64, lp LayoutParams) []layoutPod {
	const nGPU = 8
	m := mixFor(p)
	meanCompute := 0.0
	for i, c := range Mix {
		meanCompute += m.p[i] * float64(c.Compute)
	}
	life := lp.MeanLife.Seconds()
	podRate := load * float64(nGPU*p.ComputeSlices) / meanCompute / life
	burstRate := podRate / lp.BurstMean
	q := 1 - 1/lp.BurstMean // geometric on 1, 2, ...: mean 1/(1-q)
	rng := rand.New(rand.NewSource(seed))
	var pods []layoutPod
	t := 0.0
	for len(pods) < n {
		t += rng.ExpFloat64() / burstRate
		class := m.draw(rng)
		size := 1
		for rng.Float64() < q {
			size++
		}
		for j := 0; j < size && len(pods) < n; j++ {
			pods = append(pods, layoutPod{arrive: t, life: rng.ExpFloat64() * life, class: class,
				profile: m.profile[class], compute: float64(Mix[class].Compute)})
		}
	}
	return pods
}

// SimulateLayout runs the layout model (see the comment at the top of
// layout.go) for one node of 8 GPUs of product p, one shape, at one load,
// with n pods drawn from seed; the first tenth warms up and is not
// counted.
func SimulateLayout(ctx context.Context, p *mig.Product, load float64, shape Shape, n int, seed int64, lp LayoutParams) (LayoutResult, error) {
	if p == nil {
		return LayoutResult{}, fmt.Errorf("simulate layout: product is nil")
	}
	return simulateLayoutPods(ctx, p, load, shape, layoutArrivals(p, load, n, seed, lp), seed, lp)
}

func simulateLayoutPods(ctx context.Context, p *mig.Product, load float64, shape Shape, pods []layoutPod, seed int64, lp LayoutParams) (LayoutResult, error) {
	res := LayoutResult{Product: p.Name, Load: load, Shape: shape, Seed: seed}
	if shape != Counters && shape != LayoutShape {
		return res, fmt.Errorf("simulate layout: unknown shape %q", shape)
	}
	const nGPU = 8
	attempt := lp.AttemptTime[shape].Seconds()
	fleet := make([]mig.FleetGPU, nGPU)
	cards := make([]counter.Card, nGPU)
	for i := range fleet {
		fleet[i] = mig.FleetGPU{Node: "node-0", Index: i, Product: p}
		cards[i] = counter.Card{Index: i, Scheme: p.Scheme()}
	}
	base := time.Unix(0, 0)
	at := func(t float64) time.Time { return base.Add(time.Duration(t * float64(time.Second))) }
	var pub *engine.LayoutPublisher
	var published engine.LayoutVersion
	if shape == LayoutShape {
		var err error
		if pub, err = engine.NewLayoutPublisher(cards, engine.WithFence(lp.Fence)); err != nil {
			return res, fmt.Errorf("simulate layout: %w", err)
		}
		if published, err = pub.Next(nil, nil, at(0)); err != nil {
			return res, fmt.Errorf("simulate layout: %w", err)
		}
	}

	h := &levHeap{}
	seq := 0
	push := func(t float64, kind, pod int) {
		seq++
		heap.Push(h, lev{t: t, kind: kind, seq: seq, pod: pod})
	}
	for i := range pods {
		push(pods[i].arrive, evArrive, i)
	}
	var waiting []int // pods that failed at least once and are not done
	serverFree := 0.0
	nextRepublish, lastChange := -1.0, math.Inf(-1)

	// enqueue puts pod i in the scheduler's queue at t.
	enqueue := func(i int, t float64) {
		start := math.Max(t, serverFree)
		serverFree = start + attempt
		push(serverFree, evAttempt, i)
	}
	// poke is a cluster event that may let the waiting pods fit: each
	// retries when its backoff ends.
	poke := func(t float64) {
		for _, i := range waiting {
			q := &pods[i]
			if q.queued || q.done() {
				continue
			}
			q.queued = true
			push(math.Max(t, q.backoffEnd), evReady, i)
		}
	}
	// change is a change the driver reacts to (layout): Next after the lag.
	change := func(t float64) {
		if shape != LayoutShape {
			return
		}
		if nextRepublish < t {
			lag := lp.Lag.Seconds()
			if t-lastChange < lp.ChurnWindow.Seconds() {
				lag = lp.ChurnLag.Seconds()
			}
			nextRepublish = t + lag
			push(nextRepublish, evRepublish, -1)
		}
		lastChange = t
	}
	fits := func(gpu int, in mig.Instance) bool {
		l := append(append(mig.Layout(nil), fleet[gpu].Layout...), in)
		return p.Validate(l) == nil
	}
	inUse := func(gpu int, prof string, start int) bool {
		for _, in := range fleet[gpu].Layout {
			if in.Profile == prof && in.Start == start {
				return true
			}
		}
		return false
	}
	// place returns the GPU and start the scheduler picks for prof.
	place := func(prof string) (int, int, bool, error) {
		if prof == "" {
			return 0, 0, false, nil
		}
		if shape == LayoutShape {
			for _, c := range published.Cards {
				if c.Withheld || c.WholeInUse {
					continue
				}
				for _, in := range c.Layout {
					if in.Profile == prof && !inUse(c.Index, in.Profile, in.Start) {
						if lp.Check && !fits(c.Index, mig.Instance{Profile: in.Profile, Start: in.Start}) {
							return 0, 0, false, fmt.Errorf("simulate layout: published free device %s@%d of GPU %d overlaps %v", in.Profile, in.Start, c.Index, fleet[c.Index].Layout)
						}
						return c.Index, in.Start, true, nil
					}
				}
			}
			return 0, 0, false, nil
		}
		order, err := mig.Preference(fleet)
		if err != nil {
			return 0, 0, false, fmt.Errorf("simulate layout: %w", err)
		}
		gpuOf := func(n string) int { r, _ := mig.ParseDeviceName(n); return r.GPU }
		sort.SliceStable(order, func(a, b int) bool { return gpuOf(order[a]) < gpuOf(order[b]) })
		for _, name := range order {
			r, err := mig.ParseDeviceName(name)
			if err != nil {
				return 0, 0, false, fmt.Errorf("simulate layout: %w", err)
			}
			if r.Profile == prof && !inUse(r.GPU, r.Profile, r.Start) && fits(r.GPU, mig.Instance{Profile: r.Profile, Start: r.Start}) {
				return r.GPU, r.Start, true, nil
			}
		}
		return 0, 0, false, nil
	}
	anyFits := func(prof string) bool {
		pr, err := p.Profile(prof)
		if err != nil {
			return false
		}
		for g := range fleet {
			for _, start := range pr.Starts {
				if fits(g, mig.Instance{Profile: prof, Start: start}) {
					return true
				}
			}
		}
		return false
	}
	dropWaiting := func(i int) {
		for k, j := range waiting {
			if j == i {
				waiting = append(waiting[:k], waiting[k+1:]...)
				return
			}
		}
	}

	for h.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		e := heap.Pop(h).(lev)
		t := e.t
		switch e.kind {
		case evArrive:
			pods[e.pod].queued = true
			enqueue(e.pod, t)
			push(t+lp.Patience.Seconds(), evDeadline, e.pod)
		case evReady:
			if pods[e.pod].done() {
				continue
			}
			enqueue(e.pod, t)
		case evAttempt:
			q := &pods[e.pod]
			q.queued = false
			if q.done() {
				continue
			}
			gpu, start, ok, err := place(q.profile)
			if err != nil {
				return res, err
			}
			if ok {
				q.placed, q.gpu, q.start, q.at = true, gpu, start, t
				fleet[gpu].Layout = append(fleet[gpu].Layout, mig.Instance{Profile: q.profile, Start: start, InUse: true})
				if lp.Check {
					res.Checks++
					if err := p.Validate(fleet[gpu].Layout); err != nil {
						return res, fmt.Errorf("simulate layout: GPU %d after placing %s@%d: %w", gpu, q.profile, start, err)
					}
				}
				res.Placed = append(res.Placed, Placed{Pod: e.pod, GPU: gpu, Profile: q.profile, Start: start, At: t, Departs: t + q.life})
				dropWaiting(e.pod)
				push(t+q.life, evDepart, e.pod)
				continue
			}
			if q.failures == 0 {
				q.couldFit = anyFits(q.profile)
				waiting = append(waiting, e.pod)
			}
			q.failures++
			b := lp.BackoffMin.Seconds() * math.Pow(2, float64(q.failures-1))
			q.backoffEnd = t + math.Min(b, lp.BackoffMax.Seconds())
			change(t)
		case evDepart:
			q := &pods[e.pod]
			l := fleet[q.gpu].Layout
			for k, in := range l {
				if in.Profile == q.profile && in.Start == q.start {
					fleet[q.gpu].Layout = append(l[:k:k], l[k+1:]...)
					break
				}
			}
			poke(t)
			change(t)
		case evRepublish:
			if t != nextRepublish {
				continue
			}
			nextRepublish = -1
			use := make([]engine.CardUse, nGPU)
			for g := range fleet {
				use[g] = engine.CardUse{Index: g, InUse: fleet[g].Layout}
			}
			demand := plan.Demand{}
			for _, i := range waiting {
				if !pods[i].done() && pods[i].profile != "" {
					demand[pods[i].profile]++
				}
			}
			v, err := pub.Next(use, demand, at(t))
			if err != nil {
				return res, fmt.Errorf("simulate layout: %w", err)
			}
			changed := v.Version != published.Version
			published = v
			if lp.Check {
				for _, c := range v.Cards {
					for _, in := range c.Layout {
						if !inUse(c.Index, in.Profile, in.Start) && !fits(c.Index, mig.Instance{Profile: in.Profile, Start: in.Start}) {
							return res, fmt.Errorf("simulate layout: version %d: free device %s@%d of GPU %d overlaps %v", v.Version, in.Profile, in.Start, c.Index, fleet[c.Index].Layout)
						}
					}
				}
			}
			if v.HeldBack > 0 {
				r := v.Retry.Sub(base).Seconds() + 1e-3
				if nextRepublish < t || r < nextRepublish {
					nextRepublish = math.Max(r, t)
					push(nextRepublish, evRepublish, -1)
				}
			}
			if changed {
				poke(t)
			}
		case evDeadline:
			q := &pods[e.pod]
			if !q.placed {
				q.rejected = true
				dropWaiting(e.pod)
			}
		}
	}
	if shape == LayoutShape {
		res.Versions = published.Version
	}

	warm := len(pods) / 10
	var arrivedC, acceptedC float64
	waited := 0
	arrived, rejected := map[string]int{}, map[string]int{}
	for i := warm; i < len(pods); i++ {
		q := pods[i]
		res.Pods++
		arrived[Mix[q.class].Class]++
		if !q.placed {
			rejected[Mix[q.class].Class]++
		}
		arrivedC += q.compute
		if q.placed {
			acceptedC += q.compute
		}
		if q.failures > 0 {
			waited++
			if q.placed {
				w := q.at - q.arrive
				res.Waits = append(res.Waits, w)
				if q.couldFit {
					res.LayoutWaits = append(res.LayoutWaits, w)
				} else {
					res.SpaceWaits = append(res.SpaceWaits, w)
				}
			}
		}
	}
	res.Accepted = acceptedC / math.Max(arrivedC, 1)
	res.Waited = float64(waited) / math.Max(float64(res.Pods), 1)
	res.Reject = map[string]float64{}
	for c, n := range arrived {
		res.Reject[c] = float64(rejected[c]) / float64(n)
	}
	return res, nil
}

// BurstResult is the burst row: n pods of one profile arriving at once on
// an empty node.
type BurstResult struct {
	Shape Shape
	Pods  int
	// Last is the seconds until the last pod is placed; Placed how many
	// were placed within the patience.
	Last   float64
	Placed int
}

// SimulateBurst places n pods of profile prof arriving at once on an
// empty node of 8 GPUs of p (lifetimes far beyond the run), in one
// shape. The layout starts from the publisher's first version of an empty
// node: every GPU whole.
func SimulateBurst(ctx context.Context, p *mig.Product, prof string, n int, shape Shape, lp LayoutParams) (BurstResult, error) {
	pods := make([]layoutPod, n)
	for i := range pods {
		pods[i] = layoutPod{life: 1e9, profile: prof, compute: 1}
	}
	lp.Patience = max(lp.Patience, time.Hour)
	r, err := simulateLayoutPods(ctx, p, 0, shape, pods, 0, lp)
	if err != nil {
		return BurstResult{}, err
	}
	b := BurstResult{Shape: shape, Pods: n, Placed: len(r.Placed)}
	for _, pl := range r.Placed {
		b.Last = math.Max(b.Last, pl.At)
	}
	return b, nil
}

// fquantile is the q-quantile of xs (sorted in place), nearest rank.
func fquantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sort.Float64s(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// LayoutBench runs SimulateLayout for both shapes over cfg's products,
// loads and seeds (the same arrivals for both shapes per seed) and the
// burst row, and prints the table: compute-weighted acceptance, the
// layout's difference (mean of per-seed differences ± standard error),
// the share of pods that waited and their waits (pooled over the seeds),
// the layout's split by what they waited for.
func LayoutBench(ctx context.Context, cfg Config, lp LayoutParams, w io.Writer) error {
	type job struct {
		p     *mig.Product
		load  float64
		shape Shape
		seed  int64
	}
	seeds := max(cfg.Seeds, 1)
	var products []*mig.Product
	var jobs []job
	for _, name := range cfg.Products {
		p, err := mig.Lookup(name)
		if err != nil {
			return err
		}
		products = append(products, p)
		for _, load := range cfg.Loads {
			for _, sh := range []Shape{Counters, LayoutShape} {
				for s := 0; s < seeds; s++ {
					jobs = append(jobs, job{p, load, sh, cfg.Seed + int64(s)})
				}
			}
		}
	}
	results := make([]LayoutResult, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = SimulateLayout(ctx, j.p, j.load, j.shape, cfg.Arrivals, j.seed, lp)
			results[i].Placed = nil
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	type key struct {
		product string
		load    float64
		shape   Shape
	}
	runs := map[key][]LayoutResult{}
	for _, r := range results {
		k := key{r.Product, r.Load, r.Shape}
		runs[k] = append(runs[k], r)
	}
	fmt.Fprintf(w, "Layout in the online model: 1 node x 8 GPUs; bursts (Poisson, geometric size mean %g, one Mix class each), exp. lifetimes mean %s, patience %s, backoff %s-%s, republish lag %s (%s after a change within %s), fence %s, scheduler %s (counters) / %s (layout) per attempt; %d pods per run (first 10%% warm-up), %d seeds (%d..%d); acceptance: mean, layout's difference: mean of per-seed differences ± standard error; waits of the pods that waited, pooled over the seeds\n",
		lp.BurstMean, lp.MeanLife, lp.Patience, lp.BackoffMin, lp.BackoffMax, lp.Lag, lp.ChurnLag, lp.ChurnWindow, lp.Fence,
		lp.AttemptTime[Counters].Round(100*time.Microsecond), lp.AttemptTime[LayoutShape].Round(100*time.Microsecond), cfg.Arrivals, seeds, cfg.Seed, cfg.Seed+int64(seeds)-1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product\tload\tshape\tcw-accept\tlayout - counters (pts)\twaited\twait p50\tp99\tmax\tfor a layout: n\tp50\tp99\tmax\tfor space: n\tp50\tp99\tmax\tversions/run\t")
	fs := func(x float64) string {
		if math.IsNaN(x) {
			return "-"
		}
		return fmt.Sprintf("%.1fs", x)
	}
	for _, p := range products {
		for _, load := range cfg.Loads {
			for _, sh := range []Shape{Counters, LayoutShape} {
				rs := runs[key{p.Name, load, sh}]
				var acc, waited, d, vers []float64
				var all, lw, sw []float64
				for i, r := range rs {
					acc = append(acc, r.Accepted)
					waited = append(waited, r.Waited)
					vers = append(vers, float64(r.Versions))
					d = append(d, 100*(r.Accepted-runs[key{p.Name, load, Counters}][i].Accepted))
					all = append(all, r.Waits...)
					lw = append(lw, r.LayoutWaits...)
					sw = append(sw, r.SpaceWaits...)
				}
				diff := "-"
				if sh == LayoutShape {
					g := statOf(d)
					diff = fmt.Sprintf("%+.2f ± %.2f", g.mean, g.se)
				}
				a := statOf(acc)
				fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.4f ± %.4f\t%s\t%.1f%%\t%s\t%s\t%s\t", p.Name, load, sh, a.mean, a.se, diff, 100*statOf(waited).mean,
					fs(fquantile(all, 0.5)), fs(fquantile(all, 0.99)), fs(fquantile(all, 1)))
				for _, xs := range [][]float64{lw, sw} {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t", len(xs), fs(fquantile(xs, 0.5)), fs(fquantile(xs, 0.99)), fs(fquantile(xs, 1)))
				}
				v := "-"
				if sh == LayoutShape {
					v = fmt.Sprintf("%.0f", statOf(vers).mean)
				}
				fmt.Fprintf(tw, "%s\t\n", v)
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)

	fmt.Fprintln(w, "Burst: 56 pods of the smallest profile at once on an empty 8-GPU node (the layout starts from the empty node's version: every GPU whole); seconds until the last is placed")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product\tcounters\tlayout\tratio (target <= 2x)\t")
	for _, p := range products {
		prof := mixFor(p).profile[0]
		var last [2]float64
		for k, sh := range []Shape{Counters, LayoutShape} {
			b, err := SimulateBurst(ctx, p, prof, 56, sh, lp)
			if err != nil {
				return err
			}
			if b.Placed != b.Pods {
				return fmt.Errorf("burst on %s, %s: %d of %d placed", p.Name, sh, b.Placed, b.Pods)
			}
			last[k] = b.Last
		}
		fmt.Fprintf(tw, "%s (%s)\t%.2fs\t%.2fs\t%.2fx\t\n", p.Name, prof, last[0], last[1], last[1]/last[0])
	}
	tw.Flush()
	fmt.Fprintln(w)
	return nil
}
