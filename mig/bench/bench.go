package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"runtime"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/counter"
	pplan "github.com/drakit/drakit/partition/plan"
)

// Config sizes a benchmark run.
type Config struct {
	// Seed makes every random choice; runs with one seed agree. Online
	// run s of a row uses seed Seed+s.
	Seed int64
	// Seeds is the number of online runs per row, each on its own arrival
	// sequence; the table prints means and standard errors over them.
	Seeds int
	// BatchInstances is the number of random small planning instances.
	BatchInstances int
	// Arrivals is the number of requests per online simulation run; the
	// first tenth warms up and is not counted.
	Arrivals int
	// Loads are the offered loads (offered compute / fleet compute).
	Loads []float64
	// Products are simulated as one node of 8 GPUs each. One product per
	// slice geometry: A100 and H100 share one, so both would repeat one
	// experiment.
	Products []string
	// Policies are the online policies compared, first fit first.
	Policies []Policy
	// LatencyRuns is the number of timed plans per latency row.
	LatencyRuns int
}

// Short is the default configuration (about three and a half minutes on
// two cores).
func Short() Config {
	return Config{Seed: 1, Seeds: 10, BatchInstances: 400, Arrivals: 1000, Loads: []float64{0.6, 0.8, 1.0, 1.2},
		Products: []string{"H100-80GB", "A30-24GB"}, Policies: []Policy{FirstFit, Planner, PlannerPerGPU, PlannerReserve1, PlannerReserve2, FreeMigration},
		LatencyRuns: 200}
}

// Long is a configuration with tighter figures (many minutes): more
// seeds, longer runs, the random order as a second baseline.
func Long() Config {
	c := Short()
	c.Seeds, c.BatchInstances, c.Arrivals, c.LatencyRuns = 20, 1000, 3000, 1000
	c.Policies = append([]Policy{FirstFit, Random}, c.Policies[1:]...)
	return c
}

// Mix is the request mix of the notes: class (compute slices, memory
// slices) and probability. On a product that lacks a class (A30 has no
// 1g large, 3g or 7g), the class is left out and the others keep their
// proportions.
var Mix = []struct {
	Class           string
	Compute, Memory int
	P               float64
}{
	{"1g", 1, 1, 0.35}, {"1g large", 1, 2, 0.10}, {"2g", 2, 2, 0.20},
	{"3g", 3, 4, 0.15}, {"4g", 4, 4, 0.10}, {"7g", 7, 8, 0.10},
}

// mix is Mix on one product: per class its profile ("" when the product
// lacks it) and probability.
type mix struct {
	profile []string
	p       []float64
}

func mixFor(p *mig.Product) mix {
	m := mix{profile: make([]string, len(Mix)), p: make([]float64, len(Mix))}
	total := 0.0
	for i, c := range Mix {
		for _, pr := range p.Profiles {
			if !pr.MediaExtensions && pr.ComputeSlices == c.Compute && pr.MemorySlices == c.Memory {
				m.profile[i] = pr.Name
				m.p[i] = c.P
				total += c.P
				break
			}
		}
	}
	for i := range m.p {
		m.p[i] /= total
	}
	return m
}

func (m mix) draw(rng *rand.Rand) int {
	u := rng.Float64()
	last := 0
	for i, p := range m.p {
		if p == 0 {
			continue
		}
		if u < p {
			return i
		}
		u -= p
		last = i
	}
	return last
}

// Run runs all parts and writes the tables to w.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	if err := Batch(cfg, w); err != nil {
		return err
	}
	if err := Online(ctx, cfg, w); err != nil {
		return err
	}
	return Latency(cfg, w)
}

// Batch compares PlanFleet with Optimum on random small instances (1-8
// GPUs, 1-30 requests, random in-use instances) of four kinds: requests
// from the Mix; every profile equally likely, "+me" included; full, the
// instances of a random completion of every GPU that leaves no instance
// room (a complete packing exists, the fleet is full); tight, full plus
// one to three more requests (the optimum must choose what to leave
// out). It prints how often PlanFleet places everything when some plan
// can, and the distribution of the gap in compute slices.
func Batch(cfg Config, w io.Writer) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	type row struct {
		n, feasible, complete, gap0, gap1, gap2, gapMore, singleN, singleOpt, searched int
		lost, total                                                                    float64
		worst                                                                          time.Duration
	}
	kinds := []string{"mix", "uniform+me", "full", "tight"}
	rows := map[string]*row{}
	var keys []string
	for _, pr := range cfg.Products {
		for _, k := range kinds {
			keys = append(keys, pr+" / "+k)
		}
	}
	for i := 0; i < cfg.BatchInstances; i++ {
		key := keys[i%len(keys)]
		product, kind, _ := strings.Cut(key, " / ")
		p, err := mig.Lookup(product)
		if err != nil {
			return err
		}
		n := 1 + rng.Intn(mig.OptimumMaxGPUs)
		if (i/len(keys))%4 == 0 {
			n = 1 // a quarter of each row: one GPU, where the plan must be optimal
		}
		var fleet []mig.FleetGPU
		var reqs []mig.Request
		switch kind {
		case "mix":
			fleet, reqs = randomInstance(rng, p, n, mig.OptimumMaxRequests)
		case "uniform+me":
			fleet, reqs = randomInstance(rng, p, n, mig.OptimumMaxRequests)
			for j := range reqs {
				reqs[j].Profile = p.Profiles[rng.Intn(len(p.Profiles))].Name
			}
		default:
			fleet, reqs = fullInstance(rng, p, n, mig.OptimumMaxRequests)
			if kind == "tight" {
				m := mixFor(p)
				for extra := 1 + rng.Intn(3); extra > 0 && len(reqs) < mig.OptimumMaxRequests; extra-- {
					reqs = append(reqs, mig.Request{Profile: m.profile[m.draw(rng)]})
				}
			}
			rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
		}
		plan, err := mig.PlanFleet(fleet, reqs, pplan.WithSearchBudget(10*time.Second))
		if err != nil {
			return err
		}
		opt, err := mig.Optimum(fleet, reqs)
		if err != nil {
			return err
		}
		r := rows[key]
		if r == nil {
			r = &row{}
			rows[key] = r
		}
		r.n++
		if opt.Count == len(reqs) {
			r.feasible++
			if len(plan.Unplaced) == 0 {
				r.complete++
			}
		}
		if plan.Search.Ran {
			r.searched++
			r.worst = max(r.worst, plan.Search.Elapsed)
		}
		gap := opt.Compute - plan.PlacedCompute
		switch {
		case gap == 0:
			r.gap0++
		case gap == 1:
			r.gap1++
		case gap <= 3:
			r.gap2++
		default:
			r.gapMore++
		}
		r.lost += float64(gap)
		r.total += float64(opt.Compute)
		if n == 1 {
			r.singleN++
			if plan.Value() == opt {
				r.singleOpt++
			}
		}
	}
	fmt.Fprintf(w, "Batch quality: PlanFleet vs exhaustive optimum (%d random instances, 1-8 GPUs, 1-30 requests, seed %d)\n", cfg.BatchInstances, cfg.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product / requests\tinstances\tcomplete when feasible\tgap 0\tgap 1\tgap 2-3\tgap >3\tcompute lost\tone-GPU optimal\texact search ran\tslowest search\t")
	for _, key := range keys {
		r := rows[key]
		if r == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t%.2f%%\t%d/%d\t%d\t%s\t\n", key, r.n, r.complete, r.feasible,
			pct(r.gap0, r.n), pct(r.gap1, r.n), pct(r.gap2, r.n), pct(r.gapMore, r.n), 100*r.lost/math.Max(r.total, 1), r.singleOpt, r.singleN, r.searched, round(r.worst))
	}
	tw.Flush()
	fmt.Fprintln(w)
	return nil
}

func pct(a, b int) float64 { return 100 * float64(a) / math.Max(float64(b), 1) }

func randomInstance(rng *rand.Rand, p *mig.Product, n, maxReqs int) ([]mig.FleetGPU, []mig.Request) {
	layouts, _ := p.Layouts()
	var fleet []mig.FleetGPU
	for i := 0; i < n; i++ {
		f := mig.FleetGPU{Node: fmt.Sprintf("node-%d", i/4), Index: i % 4, Product: p}
		if rng.Intn(2) == 0 {
			for _, in := range layouts[rng.Intn(len(layouts))] {
				if rng.Intn(2) == 0 {
					in.InUse = rng.Intn(3) > 0
					f.Layout = append(f.Layout, in)
				}
			}
		}
		fleet = append(fleet, f)
	}
	m := mixFor(p)
	var reqs []mig.Request
	for j := 0; j < 1+rng.Intn(maxReqs); j++ {
		reqs = append(reqs, mig.Request{Profile: m.profile[m.draw(rng)]})
	}
	return fleet, reqs
}

// fullInstance makes a fleet of up to n GPUs, some with in-use instances,
// and requests that are the idle instances of a random maximal layout of
// every GPU (plain profiles only), at most maxReqs of them: placing all
// of them fills the fleet.
func fullInstance(rng *rand.Rand, p *mig.Product, n, maxReqs int) ([]mig.FleetGPU, []mig.Request) {
	var plain []string
	for _, pr := range p.Profiles {
		if !pr.MediaExtensions {
			plain = append(plain, pr.Name)
		}
	}
	layouts, _ := p.Layouts(plain...)
	var maximal []mig.Layout
	for _, l := range layouts {
		if ok, _ := p.IsMaximal(l, plain...); ok {
			maximal = append(maximal, l)
		}
	}
	var fleet []mig.FleetGPU
	var reqs []mig.Request
	for i := 0; i < n; i++ {
		l := maximal[rng.Intn(len(maximal))]
		f := mig.FleetGPU{Node: fmt.Sprintf("node-%d", i/4), Index: i % 4, Product: p}
		var want []mig.Request
		for _, in := range l {
			if rng.Intn(4) == 0 {
				in.InUse = true
				f.Layout = append(f.Layout, in)
			} else {
				want = append(want, mig.Request{Profile: in.Profile})
			}
		}
		if len(reqs)+len(want) > maxReqs {
			break
		}
		fleet = append(fleet, f)
		reqs = append(reqs, want...)
	}
	if len(fleet) == 0 { // one GPU's layout alone exceeds maxReqs: never with NVIDIA's tables
		fleet = append(fleet, mig.FleetGPU{Node: "node-0", Product: p})
	}
	return fleet, reqs
}

// Policy orders a node's devices before each allocation.
type Policy string

// Policies compared online.
const (
	FirstFit Policy = "first-fit" // NVIDIA's static order: GPU, profile, start
	Random   Policy = "random"    // a fresh random order per allocation
	Planner  Policy = "planner"   // mig.Preference
	// PlannerPerGPU is mig.Preference published as one pool per GPU
	// (mig.CounterModel.GPUPools, what the reference driver ships): the
	// allocator walks the pools by name, so the planner's placement on
	// each GPU is kept and the GPU is the first in index order that fits.
	PlannerPerGPU Policy = "planner, pool per GPU"
	// PlannerReserve1 and PlannerReserve2 are mig.Preference with
	// WithReserve(1) and (2), publishing only the listed devices:
	// admission control, which keeps free GPUs for whole-GPU requests at
	// the cost of smaller ones.
	PlannerReserve1 Policy = "planner+reserve1"
	PlannerReserve2 Policy = "planner+reserve2"
	// FreeMigration is a reference, not a policy a scheduler can follow:
	// at every arrival all running instances and the new one are packed
	// again from empty GPUs, exactly (mig.PlanFleet, whose exact search
	// must finish), as if running instances could move for free, and the
	// request is accepted when everything fits. It has no fragmentation,
	// so the gap between it and first fit is the most any order of
	// devices could win; what it still rejects is capacity (the node was
	// full), which no placement avoids.
	FreeMigration Policy = "free-migration"
)

// DefragPolicy is the planner's order plus the defragmenter: when an
// arrival of 3 or more compute slices (3g, 4g, 7g) finds no room,
// mig.Defragment moves at most k running instances, each restartable
// with probability restartable (drawn per arrival from a stream of its
// own, so the arrivals are those of every other policy), and the request
// takes the freed placement. Moved instances keep their lifetimes
// (a restart costs nothing but is counted: OnlineResult.Evictions) and
// take the plan's placements.
func DefragPolicy(k int, restartable float64) Policy {
	return Policy(fmt.Sprintf("defrag-k%d-r%g", k, restartable))
}

// defragOf reads a DefragPolicy; ok is false for other policies.
func defragOf(pol Policy) (k int, restartable float64, ok bool) {
	if !strings.HasPrefix(string(pol), "defrag-k") {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(string(pol), "defrag-k%d-r%g", &k, &restartable); err != nil {
		return 0, 0, false
	}
	return k, restartable, true
}

// ParsePolicy reads a policy name: one of Policies, or a DefragPolicy
// ("defrag-k2-r0.5": k from 1 to 8, a restartable fraction from 0 to 1).
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	if k, r, ok := defragOf(Policy(s)); ok && k >= 1 && k <= 8 && r >= 0 && r <= 1 {
		return DefragPolicy(k, r), nil
	}
	return "", fmt.Errorf("unknown policy %q (want one of %v or defrag-k<1-8>-r<0-1>)", s, Policies)
}

// Policies are all the policies Online can compare, in table order.
var Policies = []Policy{FirstFit, Random, Planner, PlannerPerGPU, PlannerReserve1, PlannerReserve2, FreeMigration}

// OnlineResult is one simulation run.
type OnlineResult struct {
	Product  string
	Load     float64
	Policy   Policy
	Seed     int64
	Accepted float64            // compute-weighted acceptance
	Reject   map[string]float64 // rejection rate per mix class the product has
	Stranded float64            // mean free compute slices on partly used GPUs, at arrivals
	FreeGPUs float64            // mean fully free GPUs, at arrivals
	OpsPerOK float64            // create+destroy operations per accepted request
	// Evictions is the instances the defragmenter moved per 1,000
	// counted arrivals (DefragPolicy only).
	Evictions float64
	// GaveUp counts defragmenter searches that ran out of work budget.
	GaveUp int
}

type event struct {
	t     float64
	class int
	life  float64
}

// stat is a mean with its standard error over seeds.
type stat struct{ mean, se float64 }

func statOf(xs []float64) stat {
	n := float64(len(xs))
	if n == 0 {
		return stat{}
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= n
	if n < 2 {
		return stat{mean: m}
	}
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return stat{mean: m, se: math.Sqrt(v / (n - 1) / n)}
}

// rk is a row of the online tables: product, load, policy.
type rk struct {
	product string
	load    float64
	pol     Policy
}

// simulateAll runs every product x load x policy x seed of cfg, in
// parallel, and groups the results by row, seeds in order.
func simulateAll(ctx context.Context, cfg Config) ([]*mig.Product, map[rk][]OnlineResult, error) {
	type job struct {
		product *mig.Product
		load    float64
		pol     Policy
		seed    int64
	}
	var products []*mig.Product
	for _, name := range cfg.Products {
		p, err := mig.Lookup(name)
		if err != nil {
			return nil, nil, err
		}
		products = append(products, p)
	}
	seeds := max(cfg.Seeds, 1)
	var jobs []job
	for _, p := range products {
		for _, load := range cfg.Loads {
			for _, pol := range cfg.Policies {
				for s := 0; s < seeds; s++ {
					jobs = append(jobs, job{p, load, pol, cfg.Seed + int64(s)})
				}
			}
		}
	}
	results := make([]OnlineResult, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = Simulate(ctx, j.product, j.load, j.pol, cfg.Arrivals, j.seed)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	runs := map[rk][]OnlineResult{}
	for _, r := range results {
		k := rk{r.Product, r.Load, r.Policy}
		runs[k] = append(runs[k], r)
	}
	return products, runs, nil
}

// Online simulates one node of 8 GPUs per product under Poisson arrivals
// with exponential lifetimes (mean 1) and the Mix, each policy on the
// same Seeds arrival sequences per load; each allocation is decided by
// the real structured allocator over the node's counter-model slices in
// the policy's order. It prints per row the means over the seeds, and
// the gain over first fit as the mean of the per-seed differences with
// its standard error; then the admission-control trade-off and a
// summary against the free-migration ceiling.
func Online(ctx context.Context, cfg Config, w io.Writer) error {
	products, runs, err := simulateAll(ctx, cfg)
	if err != nil {
		return err
	}
	seeds := max(cfg.Seeds, 1)
	gain := func(k rk, base Policy) stat {
		b := runs[rk{k.product, k.load, base}]
		var d []float64
		for i, r := range runs[k] {
			d = append(d, 100*(r.Accepted-b[i].Accepted))
		}
		return statOf(d)
	}
	field := func(k rk, f func(OnlineResult) float64) stat {
		var xs []float64
		for _, r := range runs[k] {
			xs = append(xs, f(r))
		}
		return statOf(xs)
	}
	fmt.Fprintf(w, "Online quality: 1 node x 8 GPUs, real structured allocator, Poisson arrivals, exp. lifetimes, mix 1g .35/1g-large .10/2g .20/3g .15/4g .10/7g .10 (classes a product lacks left out), %d arrivals per run (first 10%% warm-up), %d seeds per row (%d..%d), mean (gain: mean of per-seed differences +- standard error)\n", cfg.Arrivals, seeds, cfg.Seed, cfg.Seed+int64(seeds)-1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "product\tload\tpolicy\tcw-accept\tvs first-fit (pts)\tseeds better\t")
	for _, m := range Mix {
		fmt.Fprintf(tw, "rej %s\t", m.Class)
	}
	fmt.Fprintln(tw, "stranded\tfree GPUs\tops/accepted\t")
	for _, p := range products {
		m := mixFor(p)
		for _, load := range cfg.Loads {
			for _, pol := range cfg.Policies {
				k := rk{p.Name, load, pol}
				g := gain(k, cfg.Policies[0])
				better := 0
				for i, r := range runs[k] {
					if r.Accepted > runs[rk{p.Name, load, cfg.Policies[0]}][i].Accepted {
						better++
					}
				}
				fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.3f\t%+.2f ± %.2f\t%d/%d\t", p.Name, load, pol, field(k, func(r OnlineResult) float64 { return r.Accepted }).mean, g.mean, g.se, better, len(runs[k]))
				for ci, c := range Mix {
					if m.profile[ci] == "" {
						fmt.Fprint(tw, "-\t")
						continue
					}
					fmt.Fprintf(tw, "%.2f\t", field(k, func(r OnlineResult) float64 { return r.Reject[c.Class] }).mean)
				}
				fmt.Fprintf(tw, "%.2f\t%.2f\t%.2f\t\n", field(k, func(r OnlineResult) float64 { return r.Stranded }).mean,
					field(k, func(r OnlineResult) float64 { return r.FreeGPUs }).mean, field(k, func(r OnlineResult) float64 { return r.OpsPerOK }).mean)
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)

	has := map[Policy]bool{}
	for _, pol := range cfg.Policies {
		has[pol] = true
	}
	if has[Planner] && (has[PlannerReserve1] || has[PlannerReserve2]) {
		fmt.Fprintln(w, "Admission control (WithReserve(n): while at most n GPUs are free, they take whole-GPU requests only), against the planner without it, means over the seeds")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "product\tload\tpolicy\trej 7g\t(planner)\trej smaller (count-weighted)\t(planner)\tcw-accept change (pts)\t")
		for _, p := range products {
			m := mixFor(p)
			big := len(Mix) - 1
			for m.profile[big] == "" {
				big--
			}
			for _, load := range cfg.Loads {
				for _, pol := range []Policy{PlannerReserve1, PlannerReserve2} {
					if !has[pol] {
						continue
					}
					k, base := rk{p.Name, load, pol}, rk{p.Name, load, Planner}
					small := func(r OnlineResult) float64 {
						x, tot := 0.0, 0.0
						for ci, c := range Mix[:big] {
							if m.profile[ci] != "" {
								x += m.p[ci] * r.Reject[c.Class]
								tot += m.p[ci]
							}
						}
						return x / tot
					}
					bigRej := func(r OnlineResult) float64 { return r.Reject[Mix[big].Class] }
					g := gain(k, Planner)
					fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s %.2f\t%.2f\t%.3f\t%.3f\t%+.2f ± %.2f\t\n", p.Name, load, pol, Mix[big].Class, field(k, bigRej).mean, field(base, bigRej).mean,
						field(k, small).mean, field(base, small).mean, g.mean, g.se)
				}
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if has[Planner] && has[FreeMigration] {
		fmt.Fprintln(w, "Summary: planner against first fit and the free-migration ceiling (mean ± standard error over the seeds)")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "product\tload\tplanner gain (pts)\tceiling gain (pts)\tshare of ceiling\t4g rejection planner / first fit\t")
		for _, p := range products {
			for _, load := range cfg.Loads {
				g, c := gain(rk{p.Name, load, Planner}, FirstFit), gain(rk{p.Name, load, FreeMigration}, FirstFit)
				rej4 := func(pol Policy) float64 {
					return field(rk{p.Name, load, pol}, func(r OnlineResult) float64 { return r.Reject["4g"] }).mean
				}
				ratio := "-"
				if rej4(FirstFit) > 0 {
					ratio = fmt.Sprintf("%.2f / %.2f = %.0f%%", rej4(Planner), rej4(FirstFit), 100*rej4(Planner)/rej4(FirstFit))
				}
				share := "-"
				if c.mean > 0 {
					share = fmt.Sprintf("%.0f%%", 100*g.mean/c.mean)
				}
				fmt.Fprintf(tw, "%s\t%.1f\t%+.2f ± %.2f\t%+.2f ± %.2f\t%s\t%s\t\n", p.Name, load, g.mean, g.se, c.mean, c.se, share, ratio)
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	return nil
}

// DefragConfig is the configuration of the defragmenter's table: 8 x
// H100, loads 0.6-1.2, 10 seeds of 3,000 arrivals, first fit, the
// planner and the defragmenter with k = 1, 2, 3 moves at restartable
// fractions 1 and 0.5 (the seven rows of load 1.0 took 12 minutes on
// two busy cores, all four loads take about four times that; -loads,
// -policies, -arrivals and -seeds scale it).
func DefragConfig() Config {
	c := Short()
	c.Seeds, c.Arrivals = 10, 3000
	c.Products = []string{"H100-80GB"}
	c.Policies = []Policy{FirstFit, Planner}
	for _, r := range []float64{1, 0.5} {
		for k := 1; k <= 3; k++ {
			c.Policies = append(c.Policies, DefragPolicy(k, r))
		}
	}
	return c
}

// Defrag runs the online simulation of cfg (see Online) and prints the
// defragmenter's table: per row the compute-weighted acceptance, the gain
// over the planner and over first fit (means of per-seed differences
// with standard errors), the instances moved per 1,000 arrivals, the
// large profiles' rejection and the searches that gave up; then, per
// load, the planner's worst seed against first fit. cfg.Policies must
// hold FirstFit and Planner.
func Defrag(ctx context.Context, cfg Config, w io.Writer) error {
	has := map[Policy]bool{}
	for _, pol := range cfg.Policies {
		has[pol] = true
	}
	if !has[FirstFit] || !has[Planner] {
		return fmt.Errorf("defrag table: policies must include %s and %s", FirstFit, Planner)
	}
	products, runs, err := simulateAll(ctx, cfg)
	if err != nil {
		return err
	}
	diff := func(k rk, base Policy) (stat, []float64) {
		b := runs[rk{k.product, k.load, base}]
		var d []float64
		for i, r := range runs[k] {
			d = append(d, 100*(r.Accepted-b[i].Accepted))
		}
		return statOf(d), d
	}
	field := func(k rk, f func(OnlineResult) float64) stat {
		var xs []float64
		for _, r := range runs[k] {
			xs = append(xs, f(r))
		}
		return statOf(xs)
	}
	seeds := max(cfg.Seeds, 1)
	fmt.Fprintf(w, "Defragmenter: 1 node x 8 GPUs, the planner's order, and when a 3g/4g/7g arrival finds no room mig.Defragment moves at most k restartable instances (each arrival restartable with probability r); %d arrivals per run (first 10%% warm-up), %d seeds per row (%d..%d); gains are means of per-seed differences ± standard error\n", cfg.Arrivals, seeds, cfg.Seed, cfg.Seed+int64(seeds)-1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product\tload\tpolicy\tcw-accept\tvs planner (pts)\tvs first-fit (pts)\tmoved / 1,000 arrivals\trej 3g\trej 4g\trej 7g\tgave up\t")
	for _, p := range products {
		for _, load := range cfg.Loads {
			for _, pol := range cfg.Policies {
				k := rk{p.Name, load, pol}
				gp, _ := diff(k, Planner)
				gf, _ := diff(k, FirstFit)
				ev := field(k, func(r OnlineResult) float64 { return r.Evictions })
				gave := 0
				for _, r := range runs[k] {
					gave += r.GaveUp
				}
				fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.3f\t%+.2f ± %.2f\t%+.2f ± %.2f\t%.1f ± %.1f\t", p.Name, load, pol, field(k, func(r OnlineResult) float64 { return r.Accepted }).mean, gp.mean, gp.se, gf.mean, gf.se, ev.mean, ev.se)
				for _, c := range []string{"3g", "4g", "7g"} {
					fmt.Fprintf(tw, "%.3f\t", field(k, func(r OnlineResult) float64 { return r.Reject[c] }).mean)
				}
				fmt.Fprintf(tw, "%d\t\n", gave)
			}
		}
	}
	tw.Flush()
	for _, p := range products {
		for _, load := range cfg.Loads {
			_, d := diff(rk{p.Name, load, Planner}, FirstFit)
			worst, at := math.Inf(1), int64(0)
			for i, x := range d {
				if x < worst {
					worst, at = x, cfg.Seed+int64(i)
				}
			}
			fmt.Fprintf(w, "%s load %.1f: planner against first fit, worst seed %+.2f pts (seed %d)\n", p.Name, load, worst, at)
		}
	}
	fmt.Fprintln(w)
	return nil
}

// running is an instance in use until end.
type running struct {
	end         float64
	name        string // counter-model device name
	restartable bool   // DefragPolicy: the defragmenter may move it
}

// repackBudget bounds the exact search of one free-migration repack; a
// search that does not finish is an error, not a guess.
const repackBudget = 30 * time.Second

// repackWork is the work budget of one free-migration repack: far above
// what a node of 8 GPUs needs, so that the time limit decides.
const repackWork = 1 << 30

// repack packs the running instances and one more of profile prof onto
// the node's GPUs emptied (FreeMigration), exactly. fits is false when
// they do not all fit or the product has no such profile (prof is "").
func repack(fleet []mig.FleetGPU, live []running, prof string) (plan *mig.Plan, fits bool, err error) {
	if prof == "" {
		return nil, false, nil
	}
	empty := make([]mig.FleetGPU, len(fleet))
	for i, f := range fleet {
		empty[i] = mig.FleetGPU{Node: f.Node, Index: f.Index, Product: f.Product}
	}
	reqs := make([]mig.Request, 0, len(live)+1)
	for _, r := range live {
		ref, err := mig.ParseDeviceName(r.name)
		if err != nil {
			return nil, false, fmt.Errorf("repack: %w", err)
		}
		reqs = append(reqs, mig.Request{Profile: ref.Profile})
	}
	reqs = append(reqs, mig.Request{Profile: prof})
	plan, err = mig.PlanFleet(empty, reqs,
		pplan.WithSearchBudget(repackBudget), pplan.WithWorkBudget(repackWork))
	if err != nil {
		return nil, false, fmt.Errorf("repack: %w", err)
	}
	if !plan.Search.Optimal {
		return nil, false, fmt.Errorf("repack %d instances: exact search did not finish: %s", len(reqs), plan.Search.Note)
	}
	return plan, len(plan.Unplaced) == 0, nil
}

// Simulate runs one online simulation (see Online) of one node of 8 GPUs
// of product p.
func Simulate(ctx context.Context, p *mig.Product, load float64, pol Policy, arrivals int, seed int64) (OnlineResult, error) {
	res := OnlineResult{Load: load, Policy: pol, Seed: seed, Reject: map[string]float64{}}
	if p == nil {
		return res, fmt.Errorf("simulate: product is nil")
	}
	res.Product = p.Name
	const nGPU = 8
	m := mixFor(p)
	meanCompute := 0.0
	for i, c := range Mix {
		meanCompute += m.p[i] * float64(c.Compute)
	}
	rate := load * float64(nGPU*p.ComputeSlices) / meanCompute
	rng := rand.New(rand.NewSource(seed))
	evs := make([]event, arrivals)
	t := 0.0
	for i := range evs {
		t += rng.ExpFloat64() / rate
		evs[i] = event{t: t, class: m.draw(rng), life: rng.ExpFloat64()}
	}
	polRNG := rand.New(rand.NewSource(seed + 1))
	defragK, restartable, isDefrag := defragOf(pol)
	restartRNG := rand.New(rand.NewSource(seed + 2))

	const driver, nodeName = "gpu.drakit.io", "node-0"
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	fleet := make([]mig.FleetGPU, nGPU)
	for i := range fleet {
		fleet[i] = mig.FleetGPU{Node: nodeName, Index: i, Product: p}
	}
	gpus, err := mig.ModelGPUs(fleet)
	if err != nil {
		return res, err
	}
	model, err := mig.NewCounterModel(gpus)
	if err != nil {
		return res, err
	}
	names := make([]string, len(model.Devices))
	for i, d := range model.Devices {
		names[i] = d.Name
	}
	al := alloc.New(driver, alloc.Features)
	allocated := sets.New[structured.DeviceID]()
	var live []running
	var arrivedC, acceptedC float64
	arrived := map[string]int{}
	rejected := map[string]int{}
	var samples, stranded, free float64
	ops, ok := 0, 0
	warm := arrivals / 10
	// placeRepacked places one instance of prof, running until end, by
	// packing all running instances again (FreeMigration).
	placeRepacked := func(prof string, end float64) (bool, error) {
		plan, fits, err := repack(fleet, live, prof)
		if err != nil || !fits {
			return false, err
		}
		fleet = plan.After
		for _, a := range plan.Assignments {
			name := mig.DeviceRef{GPU: a.GPU, Profile: a.Profile, Start: a.Start}.String()
			if a.Request < len(live) {
				live[a.Request].name = name
			} else {
				live = append(live, running{end: end, name: name})
			}
		}
		return true, nil
	}
	// placeAllocated has the real allocator place one instance of prof,
	// running until end, over the slices in the policy's order (arrival
	// i is the slices' generation).
	placeAllocated := func(ctx context.Context, i int, prof string, end float64, restart bool) (bool, error) {
		if prof == "" {
			return false, nil
		}
		var order []string
		var err error
		switch pol {
		case FirstFit:
			order = names
		case Random:
			order = append([]string(nil), names...)
			polRNG.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		case Planner:
			order, err = mig.Preference(fleet)
		case PlannerPerGPU:
			if order, err = mig.Preference(fleet); err == nil {
				gpuOf := func(n string) int { r, _ := mig.ParseDeviceName(n); return r.GPU }
				sort.SliceStable(order, func(a, b int) bool { return gpuOf(order[a]) < gpuOf(order[b]) })
			}
		default:
			if !isDefrag {
				err = fmt.Errorf("simulate: unknown policy %q", pol)
				break
			}
			order, err = mig.Preference(fleet)
		case PlannerReserve1:
			order, err = mig.Preference(fleet, counter.WithReserve(1))
		case PlannerReserve2:
			order, err = mig.Preference(fleet, counter.WithReserve(2))
		}
		if err != nil {
			return false, err
		}
		m, err := model.Only(order)
		if err != nil {
			return false, err
		}
		sel := fmt.Sprintf(`%s == "mig" && %s == %q`, al.Attr(mig.AttrType), al.Attr(mig.AttrProfile), prof)
		got, err := al.One(ctx, node, m.Slices(driver, nodeName, nodeName, int64(i+1)), allocated, sel)
		if err != nil || got == "" {
			return false, err
		}
		ref, _ := mig.ParseDeviceName(got)
		allocated.Insert(structured.MakeDeviceID(driver, nodeName, got))
		fleet[ref.GPU].Layout = append(fleet[ref.GPU].Layout, mig.Instance{Profile: ref.Profile, Start: ref.Start, InUse: true})
		live = append(live, running{end: end, name: got, restartable: restart})
		return true, nil
	}
	evictions, gaveUp := 0, 0
	// placeDefragmented moves at most defragK restartable instances so
	// that one instance of prof fits, and places it (DefragPolicy).
	placeDefragmented := func(prof string, end float64, restart bool) (bool, int, error) {
		cur := make([]mig.FleetGPU, len(fleet))
		byName := map[string]int{}
		for j, r := range live {
			byName[r.name] = j
		}
		for g, f := range fleet {
			cur[g] = mig.FleetGPU{Node: f.Node, Index: f.Index, Product: f.Product}
			for _, in := range f.Layout {
				in.Restartable = live[byName[mig.DeviceRef{GPU: f.Index, Profile: in.Profile, Start: in.Start}.String()]].restartable
				cur[g].Layout = append(cur[g].Layout, in)
			}
		}
		d, err := mig.Defragment(cur, mig.Request{Profile: prof}, pplan.WithMaxMoves(defragK))
		if err != nil {
			return false, 0, fmt.Errorf("simulate: %w", err)
		}
		if !d.Complete {
			gaveUp++
		}
		if !d.Found {
			return false, 0, nil
		}
		moved := make([]string, len(d.Moves))
		for j, mv := range d.Moves {
			old := mig.DeviceRef{GPU: mv.GPU, Profile: mv.Profile, Start: mv.Start}.String()
			moved[j] = mig.DeviceRef{GPU: mv.ToGPU, Profile: mv.Profile, Start: mv.ToStart}.String()
			allocated.Delete(structured.MakeDeviceID(driver, nodeName, old))
			live[byName[old]].name = moved[j]
		}
		for _, n := range moved {
			allocated.Insert(structured.MakeDeviceID(driver, nodeName, n))
		}
		got := mig.DeviceRef{GPU: d.Target.GPU, Profile: d.Target.Profile, Start: d.Target.Start}.String()
		allocated.Insert(structured.MakeDeviceID(driver, nodeName, got))
		live = append(live, running{end: end, name: got, restartable: restart})
		for g := range fleet {
			fleet[g].Layout = d.After[g].Layout
			if err := p.Validate(fleet[g].Layout); err != nil {
				return false, 0, fmt.Errorf("simulate: defragmented GPU %d: %w", g, err)
			}
		}
		if len(live) != len(byName)+1 {
			return false, 0, fmt.Errorf("simulate: %d instances after defragmenting, want %d", len(live), len(byName)+1)
		}
		return true, len(d.Moves), nil
	}
	for i, ev := range evs {
		// Departures up to now (instance destroyed).
		sort.Slice(live, func(a, b int) bool { return live[a].end < live[b].end })
		k := 0
		for k < len(live) && live[k].end <= ev.t {
			ref, _ := mig.ParseDeviceName(live[k].name)
			allocated.Delete(structured.MakeDeviceID(driver, nodeName, live[k].name))
			l := fleet[ref.GPU].Layout
			for j, in := range l {
				if in.Profile == ref.Profile && in.Start == ref.Start {
					fleet[ref.GPU].Layout = append(l[:j:j], l[j+1:]...)
					break
				}
			}
			if i >= warm {
				ops++
			}
			k++
		}
		live = live[k:]
		counted := i >= warm
		if counted {
			samples++
			for _, f := range fleet {
				used := 0
				for _, in := range f.Layout {
					pr, _ := p.Profile(in.Profile)
					used += pr.ComputeSlices
				}
				if used == 0 {
					free++
				} else {
					stranded += float64(p.ComputeSlices - used)
				}
			}
		}
		prof := m.profile[ev.class]
		c := float64(Mix[ev.class].Compute)
		cls := Mix[ev.class].Class
		if counted {
			arrivedC += c
			arrived[cls]++
		}
		restart := restartRNG.Float64() < restartable
		var placed bool
		if pol == FreeMigration {
			placed, err = placeRepacked(prof, ev.t+ev.life)
		} else {
			placed, err = placeAllocated(ctx, i, prof, ev.t+ev.life, restart)
		}
		if err == nil && !placed && isDefrag && prof != "" && Mix[ev.class].Compute >= 3 {
			var n int
			placed, n, err = placeDefragmented(prof, ev.t+ev.life, restart)
			if counted {
				evictions += n
				ops += 2 * n // each move destroys one instance and creates one
			}
		}
		if err != nil {
			return res, err
		}
		if !placed {
			if counted {
				rejected[cls]++
			}
			continue
		}
		if counted {
			acceptedC += c
			ok++
			ops++
		}
	}
	res.Accepted = acceptedC / math.Max(arrivedC, 1)
	for ci, c := range Mix {
		if m.profile[ci] != "" {
			res.Reject[c.Class] = float64(rejected[c.Class]) / math.Max(float64(arrived[c.Class]), 1)
		}
	}
	res.Stranded = stranded / math.Max(samples, 1)
	res.FreeGPUs = free / math.Max(samples, 1)
	res.OpsPerOK = float64(ops) / math.Max(float64(ok), 1)
	res.Evictions = 1000 * float64(evictions) / math.Max(float64(arrivals-warm), 1)
	res.GaveUp = gaveUp
	return res, nil
}

// Latency times PlanFleet and Preference on an 8-GPU node and PlanFleet
// on a 1,000-GPU fleet, each half used, and PlanFleet on full 8-GPU
// instances where the exact search runs; it prints p50, p99 and the
// slowest run.
func Latency(cfg Config, w io.Writer) error {
	rng := rand.New(rand.NewSource(cfg.Seed + 2))
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		return err
	}
	m := mixFor(p)
	type row struct {
		name     string
		gpus     int
		reqs     int
		runs     int
		prefOnly bool
		full     bool
	}
	rows := []row{
		{"PlanFleet, 8-GPU node", 8, 8, 5 * cfg.LatencyRuns, false, false},
		{"Preference, 8-GPU node", 8, 0, 5 * cfg.LatencyRuns, true, false},
		{"PlanFleet, 1,000-GPU fleet", 1000, 200, max(cfg.LatencyRuns/10, 10), false, false},
		{"PlanFleet, 8 GPUs, full (exact search)", 8, 30, cfg.LatencyRuns, false, true},
	}
	fmt.Fprintf(w, "Plan latency (H100-80GB; half the GPUs with random in-use instances, or full instances of up to 30 requests; search work budget %d nodes)\n", mig.DefaultSearchWork)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\trequests\truns\tsearch ran\tp50\tp99\tslowest\t")
	for _, r := range rows {
		var ds []time.Duration
		searched := 0
		for i := 0; i < r.runs; i++ {
			var fleet []mig.FleetGPU
			var reqs []mig.Request
			if r.full {
				fleet, reqs = fullInstance(rng, p, r.gpus, r.reqs)
				rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
			} else {
				fleet, _ = randomInstance(rng, p, r.gpus, 1)
				for j := range fleet {
					for k := range fleet[j].Layout {
						fleet[j].Layout[k].InUse = true
					}
				}
				for j := 0; j < r.reqs; j++ {
					reqs = append(reqs, mig.Request{Profile: m.profile[m.draw(rng)]})
				}
			}
			for j := range fleet {
				fleet[j].Node = fmt.Sprintf("node-%d", j/8)
				fleet[j].Index = j % 8
			}
			start := time.Now()
			if r.prefOnly {
				_, err = mig.Preference(fleet)
			} else {
				var plan *mig.Plan
				plan, err = mig.PlanFleet(fleet, reqs)
				if err == nil && plan.Search.Ran {
					searched++
				}
			}
			ds = append(ds, time.Since(start))
			if err != nil {
				return err
			}
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", r.name, r.reqs, r.runs, searched, round(ds[len(ds)/2]), round(ds[(len(ds)*99)/100]), round(ds[len(ds)-1]))
	}
	tw.Flush()
	return nil
}

func round(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strings.TrimSuffix(d.Round(time.Microsecond).String(), "0s")
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}
