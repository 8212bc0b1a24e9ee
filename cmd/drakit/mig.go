package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/bench"
	pplan "github.com/drakit/drakit/partition/plan"
)

func init() {
	register(command{
		name:    "mig",
		summary: "MIG profiles, partition planning, the defragmenter and the planner benchmark (profiles, plan, defrag, defrag-controller, bench)",
		run:     runMIG,
	})
}

const migUsage = `usage:
  drakit mig profiles PRODUCT        profiles and placements of a GPU model ("H100-80GB", "NVIDIA A100-SXM4-40GB", ...)
  drakit mig plan [flags]            plan create/destroy operations for requests on a fleet
  drakit mig defrag [flags]          which restartable instances to move so that a request fits (a dry run: prints the plan)
  drakit mig defrag-controller       on a cluster: evict opted-in pods so that a pod waiting for a large MIG profile gets it
  drakit mig bench [flags]           benchmark the planner (fixed seeds, prints a table)
  drakit mig bench -part defrag      the defragmenter's table: k = 1, 2, 3 moves, restartable fractions 1 and 0.5, loads 0.6-1.2
  drakit mig bench -part layout      the layout publication against today's shape with republish lag, bursts and patience (issue 38)
  drakit mig bench -part fleet-layout  the fleet model: placements, the decision-fence layout and the ledger with its planner at 8, 32, 128 nodes (issue 46)
  drakit mig bench -fleet [flags]    benchmark the scheduler's cost of the dynamic-MIG slice models on 10 to 1,000 nodes`

func runMIG(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, migUsage)
	}
	switch args[0] {
	case "profiles":
		return migProfiles(args[1:], stdout, stderr)
	case "plan":
		return migPlan(args[1:], stdout, stderr)
	case "bench":
		return migBench(ctx, args[1:], stdout, stderr)
	case "defrag":
		return migDefrag(args[1:], stdout, stderr)
	case "defrag-controller":
		return migDefragController(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, migUsage)
		return flag.ErrHelp
	}
	return fmt.Errorf("%w: unknown mig command %q\n%s", errUsage, args[0], migUsage)
}

func migProfiles(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mig profiles", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: drakit mig profiles PRODUCT", errUsage)
	}
	p, err := mig.Lookup(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	all, err := p.Layouts()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d memory slices, %d compute slices, %d valid layouts\n", p.Name, p.MemorySlices, p.ComputeSlices, len(all))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tID\tCOMPUTE\tMEMORY SLICES\tMEMORY\tMAX\tPLACEMENTS (start:size)")
	for _, pr := range p.Profiles {
		var pls []string
		for _, pl := range pr.Placements() {
			pls = append(pls, fmt.Sprintf("%d:%d", pl.Start, pl.Size))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d MiB\t%d\t%s\n", pr.Name, pr.ID, pr.ComputeSlices, pr.MemorySlices, pr.MemoryMiB, pr.MaxCount, strings.Join(pls, " "))
	}
	return tw.Flush()
}

// planInput is the YAML file of "drakit mig plan -f".
type planInput struct {
	Fleet    []mig.FleetGPU `json:"fleet"`
	Requests []mig.Request  `json:"requests"`
}

// layoutFlags collects repeated "-layout INDEX=LAYOUT" flags.
type layoutFlags map[int]string

func (l layoutFlags) String() string { return fmt.Sprint(map[int]string(l)) }

func (l layoutFlags) Set(s string) error {
	i, lay, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want INDEX=LAYOUT, e.g. 0=4g.40gb@0*,1g.10gb@6")
	}
	n, err := strconv.Atoi(i)
	if err != nil || n < 0 {
		return fmt.Errorf("index %q is not a non-negative integer", i)
	}
	l[n] = lay
	return nil
}

func migPlan(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mig plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "YAML file with 'fleet' (node, index, product, layout) and 'requests' (profile, node, gpu); replaces the fleet flags")
	product := fs.String("product", "H100-80GB", "product of every GPU of the flag-built fleet")
	gpus := fs.Int("gpus", 1, "number of GPUs of the flag-built fleet (one node)")
	node := fs.String("node", "node-0", "node name of the flag-built fleet")
	layouts := layoutFlags{}
	fs.Var(layouts, "layout", "current layout of one GPU, INDEX=profile@start[*],... ('*' = in use); repeatable")
	requests := fs.String("requests", "", "comma-separated profiles to place, e.g. 3g.40gb,1g.10gb,1g.10gb (added to the file's)")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	budget := fs.Duration("search-budget", -1, "time limit of the searches that run when the heuristic leaves requests unplaced (0: no search; default: none, the work budget alone bounds them)")
	work := fs.Int("search-work", mig.DefaultSearchWork, "work budget (search nodes) of the searches that run when the heuristic leaves requests unplaced")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var in planInput
	if *file != "" {
		if err := readInputFile(*file, "plan", &in); err != nil {
			return err
		}
	} else {
		if *gpus < 1 {
			return fmt.Errorf("%w: -gpus %d must be at least 1", errUsage, *gpus)
		}
		prod, err := mig.Lookup(*product)
		if err != nil {
			return fmt.Errorf("%w: -product: %w", errUsage, err)
		}
		for i := 0; i < *gpus; i++ {
			l, err := mig.ParseLayout(layouts[i])
			if err != nil {
				return fmt.Errorf("%w: -layout %d: %w", errUsage, i, err)
			}
			in.Fleet = append(in.Fleet, mig.FleetGPU{Node: *node, Index: i, Product: prod, Layout: l})
		}
		for i := range layouts {
			if i >= *gpus {
				return fmt.Errorf("%w: -layout %d: only %d GPUs (-gpus)", errUsage, i, *gpus)
			}
		}
	}
	for _, r := range strings.Split(*requests, ",") {
		if r = strings.TrimSpace(r); r != "" {
			in.Requests = append(in.Requests, mig.Request{Profile: r})
		}
	}
	if *work <= 0 {
		return fmt.Errorf("%w: -search-work must be positive", errUsage)
	}
	opts := []pplan.FleetOption{pplan.WithWorkBudget(*work)}
	if *budget >= 0 {
		opts = append(opts, pplan.WithSearchBudget(*budget))
	}
	plan, err := mig.PlanFleet(in.Fleet, in.Requests, opts...)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(plan)
	}
	fmt.Fprintln(stdout, "Before:")
	pictures(stdout, in.Fleet)
	fmt.Fprintf(stdout, "\nOperations (%d):\n", len(plan.Operations))
	for _, o := range plan.Operations {
		fmt.Fprintln(stdout, "  "+o.String())
	}
	if len(plan.Unplaced) > 0 {
		fmt.Fprintf(stdout, "\nUnplaced (%d):\n", len(plan.Unplaced))
		for _, u := range plan.Unplaced {
			fmt.Fprintf(stdout, "  request %d (%s): %s\n", u.Request, in.Requests[u.Request].Profile, u.Reason)
		}
	}
	fmt.Fprintf(stdout, "\nAfter: %d of %d requests placed, %d compute slices, %d GPUs free\n", len(plan.Assignments), len(in.Requests), plan.PlacedCompute, plan.FreeGPUs)
	pictures(stdout, plan.After)
	if s := plan.Search; s.Ran {
		verdict := "the plan is optimal"
		if !s.Optimal {
			verdict = "not proven optimal: " + s.Note
		}
		fmt.Fprintf(stdout, "\nSearch: %d nodes (%d in the neighbourhood search) of a budget of %d in %s, improved: %v; %s\n", s.Nodes, s.Neighbourhood, s.Work, s.Elapsed.Round(time.Microsecond), s.Improved, verdict)
	}
	return nil
}

func pictures(w io.Writer, fleet []mig.FleetGPU) {
	for _, g := range fleet {
		fmt.Fprintln(w, "  "+g.Product.Picture(fmt.Sprintf("%s/gpu-%d", g.Node, g.Index), g.Layout))
	}
}

// defragInput is the YAML file of "drakit mig defrag -f".
type defragInput struct {
	Fleet   []mig.FleetGPU `json:"fleet"`
	Request mig.Request    `json:"request"`
}

func migDefrag(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mig defrag", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "YAML file with 'fleet' (node, index, product, layout with inUse and restartable per instance) and 'request' (profile, node, gpu); replaces the fleet flags")
	product := fs.String("product", "H100-80GB", "product of every GPU of the flag-built fleet")
	gpus := fs.Int("gpus", 1, "number of GPUs of the flag-built fleet (one node)")
	node := fs.String("node", "node-0", "node name of the flag-built fleet")
	layouts := layoutFlags{}
	fs.Var(layouts, "layout", "current layout of one GPU, INDEX=profile@start[*],... ('*' = in use, and restartable unless -fixed); repeatable")
	fixed := fs.Bool("fixed", false, "flag-built fleet: in-use instances may not move (default: every in-use instance is restartable)")
	request := fs.String("request", "", "profile of the request, e.g. 4g.40gb (replaces the file's)")
	k := fs.Int("k", mig.DefaultMaxMoves, "most instances to move")
	work := fs.Int("work", mig.DefaultDefragWork, "work budget of the search")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var in defragInput
	if *file != "" {
		if err := readInputFile(*file, "defrag", &in); err != nil {
			return err
		}
	} else {
		if *gpus < 1 {
			return fmt.Errorf("%w: -gpus %d must be at least 1", errUsage, *gpus)
		}
		prod, err := mig.Lookup(*product)
		if err != nil {
			return fmt.Errorf("%w: -product: %w", errUsage, err)
		}
		for i := range layouts {
			if i >= *gpus {
				return fmt.Errorf("%w: -layout %d: only %d GPUs (-gpus)", errUsage, i, *gpus)
			}
		}
		for i := 0; i < *gpus; i++ {
			l, err := mig.ParseLayout(layouts[i])
			if err != nil {
				return fmt.Errorf("%w: -layout %d: %w", errUsage, i, err)
			}
			for j := range l {
				l[j].Restartable = l[j].InUse && !*fixed
			}
			in.Fleet = append(in.Fleet, mig.FleetGPU{Node: *node, Index: i, Product: prod, Layout: l})
		}
	}
	if *request != "" {
		in.Request = mig.Request{Profile: *request}
	}
	if in.Request.Profile == "" {
		return fmt.Errorf("%w: no request (-request or the file's request.profile)", errUsage)
	}
	d, err := mig.Defragment(in.Fleet, in.Request, pplan.WithMaxMoves(*k), pplan.WithWorkBudget(*work))
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	fmt.Fprintln(stdout, "Before:")
	pictures(stdout, in.Fleet)
	if !d.Found {
		fmt.Fprintf(stdout, "\nNo plan for %s: %s (work %d of %d)\n", in.Request.Profile, d.Reason, d.Work, d.Budget)
		return nil
	}
	fmt.Fprintf(stdout, "\nMoves (%d):\n", len(d.Moves))
	for _, m := range d.Moves {
		fmt.Fprintln(stdout, "  "+m.String())
	}
	fmt.Fprintf(stdout, "Request %s goes to %s/gpu-%d@%d\n", d.Target.Profile, d.Target.Node, d.Target.GPU, d.Target.Start)
	fmt.Fprintf(stdout, "\nAfter (score %d):\n", d.Score)
	pictures(stdout, d.After)
	verdict := "the fewest moves, and the best score among them"
	if !d.Complete {
		verdict = "not proven best: " + d.Reason
	}
	fmt.Fprintf(stdout, "\nSearch: work %d of %d; %s\n", d.Work, d.Budget, verdict)
	return nil
}

func migBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mig bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	long := fs.Bool("long", false, "longer runs for tighter figures (several minutes)")
	seed := fs.Int64("seed", 1, "first random seed; online run s of a row uses seed+s")
	seeds := fs.Int("seeds", 0, "online runs per row (0: the default of -long or short, at least 10)")
	part := fs.String("part", "all", "which part: all, batch, online, latency, defrag (the defragmenter's table, its own configuration: 8 x H100, 10 seeds of 3,000 arrivals, loads 0.6-1.2; about 12 minutes per load on two busy cores), layout (the layout publication against today's shape in the waiting model: 8 x H100, 3 seeds of 2,000 pods, loads 0.6-1.2), or fleet-layout (the fleet model of issue 46: -fleet-nodes of 8 x H100, 3 seeds of 2,000 pods per node count, loads 0.6-1.2, and the burst rows)")
	fleetNodes := fs.String("fleet-nodes", "8,32,128", "-part fleet-layout: comma-separated node counts")
	plannerLag := fs.Duration("planner-lag", 0, "-part fleet-layout: from a change to the planner's new demand (default 250ms)")
	sliceLag := fs.Duration("slice-lag", 0, "-part fleet-layout: from a node's ledger change to the scheduler seeing its slice (default 50ms)")
	republishLag := fs.Duration("republish-lag", 0,
		"-part fleet-layout: from a change to a node's new layout, coalesced or not "+
			"(default 100ms, 1s under churn; BenchmarkLayoutLags measured 0.87s)")
	patience := fs.Duration("patience", 0, "-part layout: how long a pod waits for a device before it counts as rejected (default 1m)")
	lifetime := fs.Duration("lifetime", 0, "-part layout: mean pod lifetime (default 30m)")
	arrivals := fs.Int("arrivals", 0, "arrivals per online run (0: the default of -long or short)")
	policies := fs.String("policies", "", "comma-separated online policies (first-fit, random, planner, planner+reserve1, planner+reserve2, free-migration, defrag-k<K>-r<fraction>; default: those of the part)")
	loads := fs.String("loads", "", "comma-separated offered loads of the online runs (default 0.6,0.8,1.0,1.2)")
	products := fs.String("products", "", "comma-separated products to simulate (default: H100-80GB,A30-24GB, one per slice geometry)")
	fleet := fs.Bool("fleet", false, "run the fleet benchmark instead: the scheduler's allocator cost per pod on 10, 100 and 1,000 nodes, per slice model and claim shape")
	nodes := fs.String("nodes", "", "-fleet: comma-separated fleet sizes (default 10,100,1000)")
	states := fs.Int("states", 0, "-fleet: distinct random node states per fill (default 100; nodes share them round robin)")
	repeats := fs.Int("repeats", 0, "-fleet: pods timed per row (default 3)")
	limit := fs.Duration("limit", 0, "-fleet: limit of one node's Allocate in the claim-shape table (default 3s)")
	models := fs.String("models", "", "-fleet: comma-separated parts of the names of the rows to run (e.g. today,chosen,shipped); default all")
	shapes := fs.Bool("shapes", true, "-fleet: also run the claim-shape table")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *fleet {
		fc := bench.FleetFull()
		fc.Seed = *seed
		if *nodes != "" {
			fc.Nodes = nil
			for _, f := range strings.Split(*nodes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return fmt.Errorf("%w: -nodes: %q is not a positive integer", errUsage, f)
				}
				fc.Nodes = append(fc.Nodes, n)
			}
		}
		if *products != "" {
			p, err := mig.Lookup(strings.TrimSpace(*products))
			if err != nil || strings.Contains(*products, ",") {
				return fmt.Errorf("%w: -products with -fleet: one product (%v)", errUsage, err)
			}
			fc.Product = p.Name
		}
		for _, o := range []struct {
			v   int
			dst *int
		}{{*states, &fc.States}, {*repeats, &fc.Repeats}} {
			if o.v < 0 {
				return fmt.Errorf("%w: -states and -repeats must not be negative", errUsage)
			}
			if o.v > 0 {
				*o.dst = o.v
			}
		}
		if *limit < 0 {
			return fmt.Errorf("%w: -limit must not be negative", errUsage)
		}
		if *limit > 0 {
			fc.Limit = *limit
		}
		p, err := mig.Lookup(fc.Product)
		if err != nil {
			return err
		}
		shipped, err := shippedFleetModel(p)
		if err != nil {
			return err
		}
		fc.Models = append(fc.Models, shipped)
		if *models != "" {
			var keep []bench.FleetModel
			for _, m := range fc.Models {
				for _, part := range strings.Split(*models, ",") {
					if part = strings.ToLower(strings.TrimSpace(part)); part != "" && strings.Contains(strings.ToLower(m.Name), part) {
						keep = append(keep, m)
						break
					}
				}
			}
			if len(keep) == 0 {
				return fmt.Errorf("%w: -models %q names no row", errUsage, *models)
			}
			fc.Models = keep
		}
		if !*shapes {
			fc.ShapeModels = nil
		}
		_, err = bench.Fleet(ctx, fc, stdout)
		return err
	}
	cfg := bench.Short()
	if *long {
		cfg = bench.Long()
	}
	switch *part {
	case "defrag":
		cfg = bench.DefragConfig()
	case "layout", "fleet-layout":
		cfg = bench.LayoutConfig()
	}
	cfg.Seed = *seed
	if *seeds > 0 {
		cfg.Seeds = *seeds
	}
	if *arrivals > 0 {
		cfg.Arrivals = *arrivals
	}
	if *policies != "" {
		cfg.Policies = nil
		for _, f := range strings.Split(*policies, ",") {
			pol, err := bench.ParsePolicy(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%w: -policies: %w", errUsage, err)
			}
			cfg.Policies = append(cfg.Policies, pol)
		}
	}
	if *loads != "" {
		cfg.Loads = nil
		for _, f := range strings.Split(*loads, ",") {
			l, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || l <= 0 {
				return fmt.Errorf("%w: -loads: %q is not a positive number", errUsage, f)
			}
			cfg.Loads = append(cfg.Loads, l)
		}
	}
	if *products != "" {
		cfg.Products = nil
		for _, p := range strings.Split(*products, ",") {
			if _, err := mig.Lookup(strings.TrimSpace(p)); err != nil {
				return fmt.Errorf("%w: -products: %w", errUsage, err)
			}
			cfg.Products = append(cfg.Products, strings.TrimSpace(p))
		}
	}
	switch *part {
	case "all":
		return bench.Run(ctx, cfg, stdout)
	case "batch":
		return bench.Batch(cfg, stdout)
	case "online":
		return bench.Online(ctx, cfg, stdout)
	case "latency":
		return bench.Latency(cfg, stdout)
	case "defrag":
		return bench.Defrag(ctx, cfg, stdout)
	case "layout":
		lp := bench.DefaultLayoutParams()
		if *patience < 0 || *lifetime < 0 {
			return fmt.Errorf("%w: -patience and -lifetime must not be negative", errUsage)
		}
		if *patience > 0 {
			lp.Patience = *patience
		}
		if *lifetime > 0 {
			lp.MeanLife = *lifetime
		}
		return bench.LayoutBench(ctx, cfg, lp, stdout)
	case "fleet-layout":
		fp := bench.DefaultFleetLayoutParams()
		if *patience < 0 || *lifetime < 0 || *plannerLag < 0 || *sliceLag < 0 || *republishLag < 0 {
			return fmt.Errorf("%w: -patience, -lifetime, -planner-lag, -slice-lag and "+
				"-republish-lag must not be negative", errUsage)
		}
		if *republishLag > 0 {
			fp.Lag, fp.ChurnLag = *republishLag, *republishLag
		}
		if *patience > 0 {
			fp.Patience = *patience
		}
		if *lifetime > 0 {
			fp.MeanLife = *lifetime
		}
		if *plannerLag > 0 {
			fp.PlannerLag = *plannerLag
		}
		if *sliceLag > 0 {
			fp.SliceLag = *sliceLag
		}
		var sizes []int
		for _, f := range strings.Split(*fleetNodes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%w: -fleet-nodes: %q is not a positive integer", errUsage, f)
			}
			sizes = append(sizes, n)
		}
		return bench.FleetLayoutBench(ctx, cfg, sizes, fp, stdout)
	}
	return fmt.Errorf("%w: -part %q: want all, batch, online, latency, defrag, layout or fleet-layout", errUsage, *part)
}

// readInputFile reads a YAML input file of a mig command strictly into
// into (an unknown field is a usage error naming the file).
func readInputFile(path, what string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s input: %w", what, err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		return fmt.Errorf("%w: parse %s: %w", errUsage, path, err)
	}
	return nil
}
