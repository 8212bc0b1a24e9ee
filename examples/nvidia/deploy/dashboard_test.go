package deploy_test

import (
	"encoding/json"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// describer is a Registerer that records what it is given: the runtime
// registers every metric it has in it (kit.WithRegisterer).
type describer struct{ descs []*prometheus.Desc }

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return true }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`(?:constLabels|variableLabels): \{([^}]*)\}`)
)

// exported is every metric the driver serves (the runtime's and the NVIDIA
// driver's own), with its labels: names from the collectors' descriptions.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	sim, err := nvmlsim.Open("", nvmlsim.WithServer("dgx-h200"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := nvdriver.New(sim, "node-1", nvdriver.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	var rec describer
	if _, err := kit.New(
		nvdriver.DriverName,
		append(d.Options(), kit.WithRESTConfig(&rest.Config{}), kit.WithRegisterer(&rec))...,
	); err != nil {
		t.Fatal(err)
	}
	_ = rec.Register(d.Collector())
	out := map[string][]string{}
	for _, desc := range rec.descs {
		s := desc.String()
		m := descName.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no name in %s", s)
		}
		var labels []string
		for _, l := range descLabels.FindAllStringSubmatch(s, -1) {
			for _, kv := range strings.Split(l[1], ",") {
				if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k != "" {
					labels = append(labels, k)
				}
			}
		}
		out[m[1]] = labels
	}
	return out
}

var (
	metricRef = regexp.MustCompile(`\bdrakit_[a-z0-9_]+`)
	byClause  = regexp.MustCompile(`\bby \(([^)]*)\)`)
)

// TestDashboard parses the chart's Grafana dashboard and checks every
// query (panels' and variables'): it names at least one metric, each
// metric it names is one the driver exports (a histogram's _bucket,
// _sum and _count included), and each label it groups by is one of that
// metric's or Prometheus' target labels (instance, job, and le for
// buckets). The dashboard shows prepare latency, errors by reason,
// devices by health and MIG devices per GPU.
func TestDashboard(t *testing.T) {
	raw, err := fs.ReadFile(deploy.Chart(), filepath.Join("dashboards", "nvidia-dra-driver.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	metrics := exported(t)
	type query struct{ where, expr string }
	var queries []query
	titles := map[string]bool{}
	for _, p := range dash.Panels {
		titles[p.Title] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, tg.Expr})
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		queries = append(queries, query{"variable " + v.Name, q.Query})
	}
	target := []string{"instance", "job", "pod", "namespace", "service", "endpoint", "container"}
	for _, q := range queries {
		names := metricRef.FindAllString(q.expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q names no drakit metric", q.where, q.expr)
		}
		for _, n := range names {
			family, labels := n, target
			if _, ok := metrics[family]; !ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if f := strings.TrimSuffix(n, suffix); f != n {
						if _, ok := metrics[f]; ok {
							family = f
							if suffix == "_bucket" {
								labels = append(slices.Clone(labels), "le")
							}
						}
					}
				}
			}
			own, ok := metrics[family]
			if !ok {
				t.Errorf("%s: %s is not a metric the driver exports", q.where, n)
				continue
			}
			labels = append(slices.Clone(labels), own...)
			for _, by := range byClause.FindAllStringSubmatch(q.expr, -1) {
				for _, l := range strings.Split(by[1], ",") {
					if l = strings.TrimSpace(l); !slices.Contains(labels, l) {
						t.Errorf(
							"%s: groups %s by %q, which it does not have (%v)",
							q.where,
							n,
							l,
							labels,
						)
					}
				}
			}
		}
	}
	for _, want := range []string{
		"Prepare latency", "Errors by reason", "Devices by health", "MIG devices per GPU",
	} {
		if !titles[want] {
			t.Errorf("the dashboard has no panel %q", want)
		}
	}
	var all []string
	for n := range metrics {
		all = append(all, n)
	}
	sort.Strings(all)
	t.Logf("%d queries over the driver's %d metrics %v", len(queries), len(all), all)
}
