package partition_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
)

// TestOptionsDoNotCross type-checks calls that pass each entry point an
// option of another: every one must fail to compile, while the same
// calls with their own options compile. It is the compile-time half of
// the option types' contract (a misplaced option does not compile),
// checked against the packages as built, through their export data.
func TestOptionsDoNotCross(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list export data")
	}
	pkgs := []string{
		"github.com/drakit/drakit/partition",
		"github.com/drakit/drakit/partition/counter",
		"github.com/drakit/drakit/partition/ledger",
		"github.com/drakit/drakit/partition/plan",
	}
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, pkgs...)
	out, err := exec.Command(goTool, args...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "\t")
		exports[path] = file
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	check := func(call string) error {
		src := `package x

import (
	"time"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
)

var (
	_ = time.Second
	_ partition.Layout
	_ = ledger.PoolName
	m counter.Model
	mix = plan.DefaultMix
)

func f() {
	` + call + `
}
`
		file, err := parser.ParseFile(fset, "x.go", src, 0)
		if err != nil {
			t.Fatalf("parse %q: %v", call, err)
		}
		_, err = (&types.Config{Importer: imp}).Check("x", fset, []*ast.File{file}, nil)
		return err
	}
	for _, tc := range []struct{ own, foreign string }{
		{
			`plan.PlanFleet(nil, nil, plan.WithWorkBudget(1), plan.WithSearchBudget(0))`,
			`plan.PlanFleet(nil, nil, plan.WithMaxMoves(1))`,
		},
		{
			`plan.Defragment(nil, plan.Request{}, plan.WithMaxMoves(1), plan.WithWorkBudget(1))`,
			`plan.Defragment(nil, plan.Request{}, plan.WithSearchBudget(time.Second))`,
		},
		{
			`plan.PlanLayouts(nil, nil, plan.WithDefaultMix(mix))`,
			`plan.PlanLayouts(nil, nil, counter.WithPoolDevices(64))`,
		},
		{
			`plan.AssignFleet(nil, nil, plan.WithAging(time.Second))`,
			`plan.AssignFleet(nil, nil, plan.WithDefaultMix(mix))`,
		},
		{
			`counter.Preference(nil, counter.WithFitOnly(), counter.WithReserve(1))`,
			`counter.Preference(nil, plan.WithWorkBudget(1))`,
		},
		{
			`m.PreferredPools("n", nil, counter.WithCardsFirst())`,
			`m.PreferredPools("n", nil, counter.WithPoolDevices(64))`,
		},
		{
			`m.LayoutPools("n", nil, counter.WithPoolDevices(64))`,
			`m.LayoutPools("n", nil, counter.WithFitOnly())`,
		},
		{
			`ledger.NewMemoryAgent("n", nil, ledger.WithPoolDevices(64), ledger.WithDefaultMix(mix))`,
			`ledger.NewMemoryAgent("n", nil, plan.WithDefaultMix(mix))`,
		},
	} {
		if err := check(tc.own); err != nil {
			t.Errorf("%s does not compile: %v", tc.own, err)
		}
		err := check(tc.foreign)
		if err == nil {
			t.Errorf("%s compiles: a misplaced option must not", tc.foreign)
		} else if !strings.Contains(err.Error(), "cannot use") {
			t.Errorf("%s: got %v, want a type mismatch (cannot use)", tc.foreign, err)
		}
	}
}

// TestNilOptionIsAnError passes a nil option to every entry point that
// takes options: each returns an error that says so, none panics.
func TestNilOptionIsAnError(t *testing.T) {
	s := trioScheme(t)
	fleet := []partition.FleetCard{{Node: "n", Index: 0, Scheme: s}}
	layout := []partition.LayoutCard{{Index: 0, Scheme: s}}
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"counter.Preference": func() error { _, err := counter.Preference(fleet, nil); return err },
		"Model.PreferredPools": func() error {
			_, err := m.PreferredPools("n", fleet, counter.WithFitOnly(), nil)
			return err
		},
		"Model.LayoutPools": func() error { _, err := m.LayoutPools("n", partition.Published(layout), nil); return err },
		"counter.LayoutPoolNames": func() error {
			_, err := counter.LayoutPoolNames("n", layout, nil)
			return err
		},
		"plan.PlanFleet": func() error {
			_, err := plan.PlanFleet(fleet, []plan.Request{{Profile: "one"}}, nil)
			return err
		},
		"plan.Defragment": func() error {
			_, err := plan.Defragment(fleet, plan.Request{Profile: "one"}, nil)
			return err
		},
		"plan.PlanLayouts": func() error { _, err := plan.PlanLayouts(layout, nil, nil); return err },
		"plan.AssignFleet": func() error { _, err := plan.AssignFleet(nil, nil, nil); return err },
		"ledger.NewAgent": func() error {
			_, err := ledger.NewAgent(&ledger.Store{}, "n", ledger.WithPoolDevices(8), nil)
			return err
		},
		"Ledger.Publish": func() error {
			l := &ledger.Ledger{Node: "n"}
			_, err := l.Publish("n", []ledger.AgentCard{{Index: 0, Scheme: s}}, nil)
			return err
		},
	}
	for name, call := range calls {
		if err := call(); err == nil || !strings.Contains(err.Error(), "nil") {
			t.Errorf("%s with a nil option: %v, want an error that names it", name, err)
		}
	}
}

// trioScheme is a card of three placed units: a pair at 0, a one anywhere.
func trioScheme(t *testing.T) *partition.Scheme {
	t.Helper()
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "trio",
		Compute: partition.Units{Count: 3, Placed: true},
		Profiles: []partition.Profile{
			{Name: "pair", ID: 2, Compute: 2, MaxCount: 1, Placements: []partition.Placement{{Start: 0}}},
			{Name: "one", ID: 1, Compute: 1, MaxCount: 3, Placements: []partition.Placement{
				{Start: 0}, {Start: 1, Compute: 1}, {Start: 2, Compute: 2}}},
		},
		Names: partition.Names{Device: "trio"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
