package driver_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// programRegistry is a vendor program's registry, with the Go and process
// collectors every Prometheus program registers.
func programRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

func newUnstarted(t *testing.T, name string, opts ...driver.Option) (*driver.Runtime, error) {
	t.Helper()
	return driver.New(name, append([]driver.Option{
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: testInventory(1)}),
		driver.WithPreparer(envPreparer{}),
		driver.WithRESTConfig(&rest.Config{}),
		driver.WithNodeName("n"),
	}, opts...)...)
}

// metricNames gathers g and returns the names of its metric families.
func metricNames(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	return out
}

func has(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// TestGathererMergesWithProgramRegistry: the driver's Gatherer merges with
// a program's registry that has the Go and process collectors.
func TestGathererMergesWithProgramRegistry(t *testing.T) {
	d, err := newUnstarted(t, "gpu.example.com")
	if err != nil {
		t.Fatal(err)
	}
	names := metricNames(t, prometheus.Gatherers{programRegistry(), d.Gatherer()})
	if !has(names, "drakit_driver_prepared_claims") || !has(names, "go_goroutines") {
		t.Errorf("merged metrics %v lack the driver's or the program's", names)
	}
}

// TestWithRegisterer: the driver's metrics go into the program's registry;
// a second driver of the same name there is refused, one of another name
// is not.
func TestWithRegisterer(t *testing.T) {
	reg := programRegistry()
	if _, err := newUnstarted(t, "gpu.example.com", driver.WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	names := metricNames(t, reg)
	if !has(names, "drakit_driver_published_devices") || !has(names, "process_") {
		t.Errorf("registry metrics %v lack the driver's or the program's", names)
	}
	if _, err := newUnstarted(t, "gpu.example.com", driver.WithRegisterer(reg)); err == nil || !strings.Contains(err.Error(), "WithRegisterer") {
		t.Errorf("second driver of the same name in one registry: %v, want a WithRegisterer error", err)
	}
	if _, err := newUnstarted(t, "nic.example.com", driver.WithRegisterer(reg)); err != nil {
		t.Errorf("driver of another name in the same registry: %v", err)
	}
	if _, err := newUnstarted(t, "x.example.com", driver.WithRegisterer(nil)); err == nil {
		t.Error("WithRegisterer(nil) accepted")
	}
}
