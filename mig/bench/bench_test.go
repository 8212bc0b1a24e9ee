package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
	"github.com/drakit/drakit/internal/allocstate"
	"github.com/drakit/drakit/mig"
)

func ExampleSimulate() {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		panic(err)
	}
	r, err := Simulate(context.Background(), p, 0.3, Planner, 100, 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s at load %.1f: compute-weighted acceptance %.2f\n", r.Policy, r.Load, r.Accepted)
	// Output: planner at load 0.3: compute-weighted acceptance 1.00
}

func TestSimulateDeterministicAndSane(t *testing.T) {
	ctx := context.Background()
	a30, h100 := mustLookup(t, "A30-24GB"), mustLookup(t, "H100-80GB")
	for _, pol := range Policies {
		a, err := Simulate(ctx, a30, 0.9, pol, 150, 3)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Simulate(ctx, a30, 0.9, pol, 150, 3)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s: two runs with one seed differ:\n%s", pol, diff)
		}
		if a.Accepted <= 0 || a.Accepted > 1 || a.OpsPerOK < 1 || a.FreeGPUs < 0 || a.FreeGPUs > 8 {
			t.Errorf("%s: implausible result %+v", pol, a)
		}
	}
	// At a tiny load every policy accepts everything.
	for _, pol := range Policies {
		r, err := Simulate(ctx, h100, 0.05, pol, 100, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Accepted != 1 {
			t.Errorf("%s at load 0.05: acceptance %.3f, want 1", pol, r.Accepted)
		}
	}
}

func TestRunPrintsTable(t *testing.T) {
	cfg := Config{Seed: 1, Seeds: 2, BatchInstances: 16, Arrivals: 60, Loads: []float64{1.0}, Products: []string{"H100-80GB"},
		Policies: []Policy{FirstFit, Planner, PlannerReserve1, FreeMigration}, LatencyRuns: 10}
	var out bytes.Buffer
	if err := Run(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Batch quality", "one-GPU optimal", "complete when feasible", "/ full", "/ tight", "Online quality", "first-fit", "planner+reserve1", "free-migration", " ± ", "Admission control", "Summary", "Plan latency", "1,000-GPU fleet", "exact search"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDefragTable(t *testing.T) {
	cfg := DefragConfig()
	cfg.Seeds, cfg.Arrivals, cfg.Loads = 2, 150, []float64{1.1}
	cfg.Policies = []Policy{FirstFit, Planner, DefragPolicy(2, 1), DefragPolicy(1, 0.5)}
	var out bytes.Buffer
	if err := Defrag(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Defragmenter", "vs planner (pts)", "moved / 1,000 arrivals", "defrag-k2-r1", "defrag-k1-r0.5", "worst seed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	cfg.Policies = []Policy{Planner}
	if err := Defrag(context.Background(), cfg, &out); err == nil {
		t.Error("a table without first fit: no error")
	}
}

// TestSimulateDefrag checks the defragmenter policy: deterministic, it
// moves instances at load 1.2 (Simulate itself checks every GPU it
// defragments against the catalog), never when nothing may restart, and
// then it accepts exactly what the planner accepts.
func TestSimulateDefrag(t *testing.T) {
	ctx := context.Background()
	h100 := mustLookup(t, "H100-80GB")
	a, err := Simulate(ctx, h100, 1.2, DefragPolicy(2, 1), 400, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Simulate(ctx, h100, 1.2, DefragPolicy(2, 1), 400, 5)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two runs with one seed differ:\n%s", diff)
	}
	if a.Evictions == 0 {
		t.Errorf("no instance moved at load 1.2: %+v", a)
	}
	none, err := Simulate(ctx, h100, 1.2, DefragPolicy(2, 0), 400, 5)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Simulate(ctx, h100, 1.2, Planner, 400, 5)
	if err != nil {
		t.Fatal(err)
	}
	if none.Evictions != 0 || none.Accepted != plan.Accepted {
		t.Errorf("nothing restartable: %+v, want the planner's acceptance %.4f and no moves", none, plan.Accepted)
	}
	for s, want := range map[string]Policy{"planner": Planner, "defrag-k2-r0.5": DefragPolicy(2, 0.5), "defrag-k1-r1": DefragPolicy(1, 1)} {
		if got, err := ParsePolicy(s); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", s, got, err, want)
		}
	}
	for _, s := range []string{"defrag-kx", "defrag-k0-r1", "defrag-k2-r1.5", "best"} {
		if _, err := ParsePolicy(s); err == nil {
			t.Errorf("ParsePolicy(%q): no error", s)
		}
	}
}

func TestRepack(t *testing.T) {
	p := mustLookup(t, "H100-80GB")
	fleet := []mig.FleetGPU{{Node: "n", Index: 0, Product: p}, {Node: "n", Index: 1, Product: p}}
	for _, tc := range []struct {
		name string
		live []string
		fits bool
	}{
		// Two 3g on different GPUs fit on one, which frees the other.
		{"two 3g move together", []string{"gpu-0-3g-40gb-0", "gpu-1-3g-40gb-4"}, true},
		// A GPU takes one 4g only: no GPU can be freed.
		{"two 4g", []string{"gpu-0-4g-40gb-0", "gpu-1-4g-40gb-0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []running
			for _, n := range tc.live {
				live = append(live, running{name: n})
			}
			plan, fits, err := repack(fleet, live, "7g.80gb")
			if err != nil {
				t.Fatal(err)
			}
			if fits != tc.fits {
				t.Fatalf("fits = %v, want %v", fits, tc.fits)
			}
			if !fits {
				return
			}
			want := map[string]int{"7g.80gb": 1}
			for _, n := range tc.live {
				ref, _ := mig.ParseDeviceName(n)
				want[ref.Profile]++
			}
			got := map[string]int{}
			for _, g := range plan.After {
				if err := p.Validate(g.Layout); err != nil {
					t.Errorf("gpu-%d: %v", g.Index, err)
				}
				for _, in := range g.Layout {
					got[in.Profile]++
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("instances after repacking (-want +got):\n%s", diff)
			}
		})
	}
	if _, fits, err := repack(fleet, nil, ""); err != nil || fits {
		t.Errorf("a profile the product lacks: fits %v, err %v; want false, nil", fits, err)
	}
}

func mustLookup(t testing.TB, name string) *mig.Product {
	t.Helper()
	p, err := mig.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFleetSmall runs the fleet benchmark at its smallest and checks what
// does not depend on the machine: every MIG model sees the same nodes
// (the claim fits on as many), the chosen model keeps the planner's pick
// and publishes fewer devices on busy nodes, and the claim-shape fills
// leave every GPU one device short.
func TestFleetSmall(t *testing.T) {
	var out bytes.Buffer
	res, err := Fleet(context.Background(), FleetSmall(), &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	rows := map[string]FleetRow{}
	for _, r := range res.Rows {
		rows[r.Model+"/"+string(r.Fill)] = r
	}
	for _, fill := range []Fill{Empty, NearlyFull} {
		today, chosen := rows[Today.Name+"/"+string(fill)], rows[Chosen.Name+"/"+string(fill)]
		if today.Fits != chosen.Fits {
			t.Errorf("%s: the claim fits on %d nodes with today's model, %d with the chosen one", fill, today.Fits, chosen.Fits)
		}
		if chosen.Fits > 0 && chosen.PickKept != 1 {
			t.Errorf("%s: chosen model keeps the planner's pick on %.0f%% of the nodes", fill, 100*chosen.PickKept)
		}
		if chosen.Devices >= today.Devices || chosen.SliceKiB >= today.SliceKiB {
			t.Errorf("%s: chosen model publishes %.0f devices (%.0f KiB), today's %.0f (%.0f KiB)", fill, chosen.Devices, chosen.SliceKiB, today.Devices, today.SliceKiB)
		}
	}
	if r := rows[Today.Name+"/"+string(Empty)]; r.Fits != 4 {
		t.Errorf("empty nodes: the claim fits on %d of 4", r.Fits)
	}
	if r := rows[Today.Name+"/"+string(NearlyFull)]; r.Fits != 0 {
		t.Errorf("nearly full nodes: the claim fits on %d of 4", r.Fits)
	}
	if len(res.Shapes) != 4 {
		t.Fatalf("%d claim-shape rows, want 4", len(res.Shapes))
	}
	for _, s := range res.Shapes {
		if s.Fits != 0 {
			t.Errorf("%s, %s: fits on %d nodes, the fill should leave every GPU one short", s.Model, s.Shape, s.Fits)
		}
	}
	if want := []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}; !cmp.Equal(res.StateProfiles, want) {
		t.Errorf("state profiles %v, want %v", res.StateProfiles, want)
	}
}

// BenchmarkFleetNode is one node's Allocate (the scheduler's Filter) for
// a one-1g claim, per model and fill: the per-node figure of the fleet
// benchmark as a Go benchmark. Compare models with benchstat; the fleet
// figure is this times the number of nodes.
func BenchmarkFleetNode(b *testing.B) {
	p := mustLookup(b, "H100-80GB")
	models := []FleetModel{{Name: "whole", Whole: true}, Today, Chosen}
	short := []string{"whole", "today", "chosen"}
	for _, fill := range []Fill{Empty, Half, NearlyFull} {
		states := makeStates(rand.New(rand.NewSource(1)), p, 8, fill, 1, commonProfiles(p, models))
		for mi, m := range models {
			b.Run(short[mi]+"/"+strings.ReplaceAll(string(fill), " ", "-"), func(b *testing.B) {
				n, err := m.publish(p, "node-0", states[0])
				if err != nil {
					b.Fatal(err)
				}
				state := allocstate.New()
				state.AllocatedDevices.Insert(n.held...)
				a, err := structured.NewAllocator(context.Background(), alloc.Features, state, newClassLister(p), n.slices, cel.NewCache(64, cel.Features{EnableConsumableCapacity: true}))
				if err != nil {
					b.Fatal(err)
				}
				claim := m.claim(p, 1, true)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := a.Allocate(context.Background(), n.obj, []*resourceapi.ResourceClaim{claim}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
