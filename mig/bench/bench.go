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

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/internal/alloc"
)

// Config sizes a benchmark run.
type Config struct {
	// Seed makes every random choice; runs with one seed agree.
	Seed int64
	// BatchInstances is the number of random small planning instances.
	BatchInstances int
	// Arrivals is the number of requests per online simulation run; the
	// first tenth warms up and is not counted.
	Arrivals int
	// Loads are the offered loads (offered compute / fleet compute).
	Loads []float64
	// Products are simulated as one node of 8 GPUs each.
	Products []string
	// LatencyRuns is the number of timed plans per latency row.
	LatencyRuns int
}

// Short is the default configuration (well under two minutes).
func Short() Config {
	return Config{Seed: 1, BatchInstances: 200, Arrivals: 800, Loads: []float64{0.6, 0.8, 1.0, 1.2},
		Products: []string{"H100-80GB", "A100-40GB"}, LatencyRuns: 200}
}

// Long is a configuration with tighter figures (several minutes).
func Long() Config {
	c := Short()
	c.BatchInstances, c.Arrivals, c.LatencyRuns = 1000, 6000, 1000
	return c
}

// Mix is the request mix of the notes: class (compute slices, memory
// slices) and probability.
var Mix = []struct {
	Class           string
	Compute, Memory int
	P               float64
}{
	{"1g", 1, 1, 0.35}, {"1g large", 1, 2, 0.10}, {"2g", 2, 2, 0.20},
	{"3g", 3, 4, 0.15}, {"4g", 4, 4, 0.10}, {"7g", 7, 8, 0.10},
}

// profileFor returns the product's plain profile of a mix class.
func profileFor(p *mig.Product, class int) string {
	for _, pr := range p.Profiles {
		if !pr.MediaExtensions && pr.ComputeSlices == Mix[class].Compute && pr.MemorySlices == Mix[class].Memory {
			return pr.Name
		}
	}
	return ""
}

func drawClass(rng *rand.Rand) int {
	u := rng.Float64()
	for i, m := range Mix {
		if u < m.P {
			return i
		}
		u -= m.P
	}
	return len(Mix) - 1
}

// Run runs all parts and writes the table to w.
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
// GPUs, 1-30 requests, random in-use instances; requests from the Mix or
// uniform over all profiles, "+me" included) and prints the distribution
// of the gap in compute slices.
func Batch(cfg Config, w io.Writer) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	type row struct {
		n, gap0, gap1, gap2, gapMore, singleN, singleOpt int
		lost, total                                      float64
	}
	rows := map[string]*row{}
	var keys []string
	for _, pr := range cfg.Products {
		keys = append(keys, pr+" / mix", pr+" / uniform+me")
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
		fleet, reqs := randomInstance(rng, p, n, mig.OptimumMaxRequests)
		if kind != "mix" {
			// Every profile equally likely, "+me" included.
			for j := range reqs {
				reqs[j].Profile = p.Profiles[rng.Intn(len(p.Profiles))].Name
			}
		}
		plan, err := mig.PlanFleet(fleet, reqs)
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
	fmt.Fprintln(tw, "product / requests\tinstances\tgap 0\tgap 1\tgap 2-3\tgap >3\tcompute lost\tone-GPU optimal\t")
	for _, product := range keys {
		r := rows[product]
		if r == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t%.2f%%\t%d/%d\t\n", product, r.n,
			pct(r.gap0, r.n), pct(r.gap1, r.n), pct(r.gap2, r.n), pct(r.gapMore, r.n), 100*r.lost/math.Max(r.total, 1), r.singleOpt, r.singleN)
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
		f := mig.FleetGPU{Node: fmt.Sprintf("node-%d", i/4), Index: i % 4, Product: p.Name}
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
	var reqs []mig.Request
	for j := 0; j < 1+rng.Intn(maxReqs); j++ {
		reqs = append(reqs, mig.Request{Profile: profileFor(p, drawClass(rng))})
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
	// PlannerReserve is mig.Preference with WithReserve(1), publishing only
	// the listed devices: admission control, not just an order.
	PlannerReserve Policy = "planner+reserve1"
	// FreeMigration is a reference, not a policy a scheduler can follow:
	// at every arrival all running instances and the new one are packed
	// again from empty GPUs (mig.PlanFleet), as if running instances could
	// move for free, and the request is accepted when everything fits. It
	// has no fragmentation, so the gap between it and first fit is the
	// most any order of devices could win; what it still rejects is
	// capacity (the node was full), which no placement avoids.
	FreeMigration Policy = "free-migration"
)

// Policies are the policies Online compares, in table order.
var Policies = []Policy{FirstFit, Random, Planner, PlannerReserve, FreeMigration}

// OnlineResult is one simulation run.
type OnlineResult struct {
	Product  string
	Load     float64
	Policy   Policy
	Accepted float64            // compute-weighted acceptance
	Reject   map[string]float64 // rejection rate per mix class
	Stranded float64            // mean free compute slices on partly used GPUs, at arrivals
	FreeGPUs float64            // mean fully free GPUs, at arrivals
	OpsPerOK float64            // create+destroy operations per accepted request
}

type event struct {
	t     float64
	class int
	life  float64
}

// Online simulates one node of 8 GPUs per product under Poisson arrivals
// with exponential lifetimes (mean 1) and the Mix, each load and policy
// on the same arrival sequence; each allocation is decided by the real
// structured allocator over the node's counter-model slices in the
// policy's order.
func Online(ctx context.Context, cfg Config, w io.Writer) error {
	type job struct {
		product string
		load    float64
		pol     Policy
		seed    int64
	}
	var jobs []job
	for pi, product := range cfg.Products {
		for _, load := range cfg.Loads {
			for _, pol := range Policies {
				// One arrival sequence per product (A100 and H100 share a
				// geometry: equal seeds would repeat one sample).
				jobs = append(jobs, job{product, load, pol, cfg.Seed + int64(100*pi)})
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
			return err
		}
	}
	fmt.Fprintf(w, "Online quality: 1 node x 8 GPUs, real structured allocator, Poisson arrivals, exp. lifetimes, mix 1g .35/1g-large .10/2g .20/3g .15/4g .10/7g .10, %d arrivals per run (first 10%% warm-up), seed %d (+100 per product)\n", cfg.Arrivals, cfg.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "product\tload\tpolicy\tcw-accept\tvs first-fit\t")
	for _, m := range Mix {
		fmt.Fprintf(tw, "rej %s\t", m.Class)
	}
	fmt.Fprintln(tw, "stranded\tfree GPUs\tops/accepted\t")
	base := map[string]float64{}
	for _, r := range results {
		k := fmt.Sprintf("%s/%v", r.Product, r.Load)
		if r.Policy == FirstFit {
			base[k] = r.Accepted
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.3f\t%+.1f pts\t", r.Product, r.Load, r.Policy, r.Accepted, 100*(r.Accepted-base[k]))
		for _, m := range Mix {
			fmt.Fprintf(tw, "%.2f\t", r.Reject[m.Class])
		}
		fmt.Fprintf(tw, "%.2f\t%.2f\t%.2f\t\n", r.Stranded, r.FreeGPUs, r.OpsPerOK)
	}
	tw.Flush()
	fmt.Fprintln(w)
	return nil
}

// running is an instance in use until end.
type running struct {
	end  float64
	name string // counter-model device name
}

// repack packs the running instances and one more of profile prof onto
// the node's GPUs emptied (FreeMigration). fits is false when they do not
// all fit or the product has no such profile (prof is "").
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
	plan, err = mig.PlanFleet(empty, reqs)
	if err != nil {
		return nil, false, fmt.Errorf("repack: %w", err)
	}
	return plan, len(plan.Unplaced) == 0, nil
}

// Simulate runs one online simulation (see Online).
func Simulate(ctx context.Context, product string, load float64, pol Policy, arrivals int, seed int64) (OnlineResult, error) {
	res := OnlineResult{Product: product, Load: load, Policy: pol, Reject: map[string]float64{}}
	p, err := mig.Lookup(product)
	if err != nil {
		return res, err
	}
	const nGPU = 8
	meanCompute := 0.0
	for _, m := range Mix {
		meanCompute += m.P * float64(m.Compute)
	}
	rate := load * float64(nGPU*p.ComputeSlices) / meanCompute
	rng := rand.New(rand.NewSource(seed))
	evs := make([]event, arrivals)
	t := 0.0
	for i := range evs {
		t += rng.ExpFloat64() / rate
		evs[i] = event{t: t, class: drawClass(rng), life: rng.ExpFloat64()}
	}
	polRNG := rand.New(rand.NewSource(seed + 1))

	const driver, nodeName = "gpu.drakit.io", "node-0"
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	fleet := make([]mig.FleetGPU, nGPU)
	for i := range fleet {
		fleet[i] = mig.FleetGPU{Node: nodeName, Index: i, Product: p.Name}
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
	placeAllocated := func(ctx context.Context, i int, prof string, end float64) (bool, error) {
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
		case PlannerReserve:
			order, err = mig.Preference(fleet, mig.WithReserve(1))
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
		live = append(live, running{end: end, name: got})
		return true, nil
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
		prof := profileFor(p, ev.class)
		c := float64(Mix[ev.class].Compute)
		cls := Mix[ev.class].Class
		if counted {
			arrivedC += c
			arrived[cls]++
		}
		var placed bool
		if pol == FreeMigration {
			placed, err = placeRepacked(prof, ev.t+ev.life)
		} else {
			placed, err = placeAllocated(ctx, i, prof, ev.t+ev.life)
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
	for _, m := range Mix {
		res.Reject[m.Class] = float64(rejected[m.Class]) / math.Max(float64(arrived[m.Class]), 1)
	}
	res.Stranded = stranded / math.Max(samples, 1)
	res.FreeGPUs = free / math.Max(samples, 1)
	res.OpsPerOK = float64(ops) / math.Max(float64(ok), 1)
	return res, nil
}

// Latency times PlanFleet and Preference on an 8-GPU node and PlanFleet
// on a 1,000-GPU fleet, each half used, and prints p50 and p99.
func Latency(cfg Config, w io.Writer) error {
	rng := rand.New(rand.NewSource(cfg.Seed + 2))
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		return err
	}
	type row struct {
		name     string
		gpus     int
		reqs     int
		runs     int
		prefOnly bool
	}
	rows := []row{
		{"PlanFleet, 8-GPU node", 8, 8, 5 * cfg.LatencyRuns, false},
		{"Preference, 8-GPU node", 8, 0, 5 * cfg.LatencyRuns, true},
		{"PlanFleet, 1,000-GPU fleet", 1000, 200, max(cfg.LatencyRuns/10, 10), false},
	}
	fmt.Fprintf(w, "Plan latency (H100-80GB, half the GPUs with random in-use instances)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\trequests\truns\tp50\tp99\t")
	for _, r := range rows {
		var ds []time.Duration
		for i := 0; i < r.runs; i++ {
			fleet, _ := randomInstance(rng, p, r.gpus, 1)
			for j := range fleet {
				fleet[j].Node = fmt.Sprintf("node-%d", j/8)
				fleet[j].Index = j % 8
				for k := range fleet[j].Layout {
					fleet[j].Layout[k].InUse = true
				}
			}
			var reqs []mig.Request
			for j := 0; j < r.reqs; j++ {
				reqs = append(reqs, mig.Request{Profile: profileFor(p, drawClass(rng))})
			}
			start := time.Now()
			if r.prefOnly {
				_, err = mig.Preference(fleet)
			} else {
				_, err = mig.PlanFleet(fleet, reqs)
			}
			ds = append(ds, time.Since(start))
			if err != nil {
				return err
			}
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t\n", r.name, r.reqs, r.runs, round(ds[len(ds)/2]), round(ds[(len(ds)*99)/100]))
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
