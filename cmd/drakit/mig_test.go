package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/mig"
)

func migRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"mig"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestMIGProfiles(t *testing.T) {
	code, out, errs := migRun(t, "profiles", "NVIDIA H100 80GB HBM3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"H100-80GB: 8 memory slices, 7 compute slices, 2318 valid layouts", "3g.40gb     9   3        4              40960 MiB  2    0:4 4:4"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := migRun(t, "profiles", "Tesla T4"); code != 2 {
		t.Errorf("unknown product: exit %d, want 2", code)
	}
}

func TestMIGPlanFlags(t *testing.T) {
	code, out, errs := migRun(t, "plan", "-gpus", "2", "-layout", "0=4g.40gb@0*", "-requests", "1g.10gb,7g.80gb")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := `Before:
  node-0/gpu-0 |4g.40gb*                           |........|........|........|........|
  node-0/gpu-1 |........|........|........|........|........|........|........|........|

Operations (2):
  create  node-0/gpu-0 1g.10gb@6 (request 0)
  create  node-0/gpu-1 7g.80gb@0 (request 1)

After: 2 of 2 requests placed, 8 compute slices, 0 GPUs free
  node-0/gpu-0 |4g.40gb*                           |........|........|1g.10gb*|........|
  node-0/gpu-1 |7g.80gb*                                                               |
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestMIGPlanFileJSON(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "plan.yaml")
	in := `fleet:
- {node: a, index: 0, product: "NVIDIA A100-SXM4-40GB", layout: [{profile: 3g.20gb, start: 4, inUse: true}]}
- {node: b, index: 0, product: A100-40GB}
requests:
- {profile: 4g.20gb}
- {profile: 3g.20gb, node: b}
`
	if err := os.WriteFile(f, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := migRun(t, "plan", "-f", f, "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var plan mig.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := []mig.Assignment{
		{Request: 0, Node: "a", GPU: 0, Profile: "4g.20gb", Start: 0},
		{Request: 1, Node: "b", GPU: 0, Profile: "3g.20gb", Start: 4},
	}
	if len(plan.Assignments) != 2 || plan.Assignments[0] != want[0] || plan.Assignments[1] != want[1] {
		t.Errorf("assignments = %+v, want %+v", plan.Assignments, want)
	}
}

func TestMIGUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"plan", "-layout", "0=3g.40gb@2"},
		{"plan", "-layout", "x=3g.40gb@0"},
		{"plan", "-gpus", "1", "-layout", "3=1g.10gb@0"},
		{"plan", "-requests", "3g"},
		{"bench", "-part", "nope"},
		{"bench", "-fleet", "-nodes", "0"},
		{"bench", "-fleet", "-nodes", "x"},
		{"bench", "-fleet", "-products", "H100-80GB,A30-24GB"},
		{"bench", "-fleet", "-repeats", "-1"},
		{"bench", "-fleet", "-limit", "-1s"},
		{"bench", "-part", "layout", "-patience", "-1s"},
	} {
		if code, _, _ := migRun(t, args...); code != 2 {
			t.Errorf("drakit mig %q: exit %d, want 2", args, code)
		}
	}
}

// TestMIGPlanTight is the tight instance of issue 15 (56 of 56 compute
// slices on 8 H100s): the plan places everything and says the exact
// search did it.
func TestMIGPlanTight(t *testing.T) {
	var reqs []string
	for _, c := range []struct {
		profile string
		n       int
	}{{"1g.10gb", 10}, {"2g.20gb", 6}, {"3g.40gb", 5}, {"4g.40gb", 3}, {"7g.80gb", 1}} {
		for i := 0; i < c.n; i++ {
			reqs = append(reqs, c.profile)
		}
	}
	code, out, errs := migRun(t, "plan", "-gpus", "8", "-requests", strings.Join(reqs, ","))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"After: 25 of 25 requests placed, 56 compute slices, 0 GPUs free", "improved: true; the plan is optimal"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = migRun(t, "plan", "-gpus", "8", "-search-budget", "0", "-requests", strings.Join(reqs, ","))
	if code != 0 || !strings.Contains(out, "Unplaced (1)") {
		t.Errorf("without the search: exit %d, want one request unplaced:\n%s", code, out)
	}
}

// TestMIGBenchFleet runs the fleet benchmark at its smallest and checks
// that both tables are printed with every model.
func TestMIGBenchFleet(t *testing.T) {
	// Parallel: shares nothing with the package's other tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the allocator on every model and claim shape")
	}
	code, out, errs := migRun(t, "bench", "-fleet", "-nodes", "2", "-states", "1", "-repeats", "1", "-limit", "50ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"One 1g.10gb claim", "per pod, 2 nodes", "whole GPUs only", "today: all profiles", "fit-only", "chosen", "Claim shapes, per node", "8 x 1g on one GPU, one request (count 8) + matchAttribute"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMIGBenchLayout(t *testing.T) {
	code, out, errs := migRun(t, "bench", "-part", "layout", "-seeds", "1", "-arrivals", "100", "-loads", "0.8", "-patience", "30s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"patience 30s", "layout - counters (pts)", "H100-80GB", "Burst", "ratio (target <= 2x)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMIGDefrag(t *testing.T) {
	scattered := []string{"defrag", "-gpus", "2", "-layout", "0=1g.10gb@0*,1g.10gb@2*,1g.10gb@4*,1g.10gb@6*", "-layout", "1=4g.40gb@0*,1g.10gb@4*", "-request", "4g.40gb"}
	code, out, errs := migRun(t, scattered...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"Moves (2):", "node-0/gpu-0 1g.10gb@0 -> node-0/gpu-0@5", "Request 4g.40gb goes to node-0/gpu-0@0", "the fewest moves"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = migRun(t, append(scattered, "-k", "1")...)
	if code != 0 || !strings.Contains(out, "No plan for 4g.40gb: no plan moves at most 1 restartable instances") {
		t.Errorf("-k 1: exit %d, output:\n%s", code, out)
	}
	code, out, _ = migRun(t, append(scattered, "-fixed")...)
	if code != 0 || !strings.Contains(out, "overlaps an instance that is not restartable") {
		t.Errorf("-fixed: exit %d, output:\n%s", code, out)
	}
	f := filepath.Join(t.TempDir(), "in.yaml")
	in := `fleet:
- {node: a, index: 0, product: H100-80GB, layout: [{profile: 1g.10gb, start: 0, inUse: true, restartable: true}, {profile: 3g.40gb, start: 4, inUse: true}]}
- {node: a, index: 1, product: H100-80GB, layout: [{profile: 4g.40gb, start: 0, inUse: true}, {profile: 2g.20gb, start: 4, inUse: true}]}
request: {profile: 4g.40gb}
`
	if err := os.WriteFile(f, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = migRun(t, "defrag", "-f", f, "-json")
	if code != 0 || !strings.Contains(out, `"toGPU": 1`) || !strings.Contains(out, `"found": true`) {
		t.Errorf("-f: exit %d, %s, output:\n%s", code, errs, out)
	}
	if code, _, _ := migRun(t, "defrag", "-gpus", "1"); code != 2 {
		t.Errorf("no request: exit %d, want 2", code)
	}
}
