package explain_test

import (
	"bufio"
	"bytes"
	"context"
	"reflect"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// TestDefaultGatesCoverFeatures fails when the DRA library gains an
// allocator feature whose gate DefaultGates does not name (a library bump
// must decide the new feature's default, not drop it silently).
func TestDefaultGatesCoverFeatures(t *testing.T) {
	if _, err := explain.FeaturesFromGates(explain.DefaultGates); err != nil {
		t.Fatalf("DefaultGates: %v", err)
	}
	named := map[string]bool{}
	for _, gates := range explain.FeatureGates() {
		for _, g := range gates {
			named[g] = true
		}
	}
	for g := range explain.DefaultGates {
		if !named[g] {
			t.Errorf("DefaultGates names %s, which no allocator feature needs", g)
		}
	}
}

func TestFeaturesFromGates(t *testing.T) {
	all := map[string]bool{}
	for g := range explain.DefaultGates {
		all[g] = true
	}
	got, err := explain.FeaturesFromGates(all)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		if v.Field(i).Kind() == reflect.Bool && !v.Field(i).Bool() {
			t.Errorf("every gate on: feature %s is off", v.Type().Field(i).Name)
		}
	}
	// DeviceBindingAndStatus needs two gates, as in kube-scheduler.
	all["DRAResourceClaimDeviceStatus"] = false
	got, err = explain.FeaturesFromGates(all)
	if err != nil {
		t.Fatal(err)
	}
	if got.DeviceBindingAndStatus {
		t.Error("DeviceBindingAndStatus on with DRAResourceClaimDeviceStatus off")
	}
	if _, err := explain.FeaturesFromGates(map[string]bool{"DRAAdminAccess": true}); err == nil {
		t.Error("FeaturesFromGates with gates missing: no error")
	}
}

var featureMetric = regexp.MustCompile(`^kubernetes_feature_enabled\{name="([A-Za-z0-9]+)",stage="[A-Z]*"\} ([01])$`)

// TestDefaultGatesMatchScheduler compares DefaultGates with the feature
// gates a real kube-scheduler 1.37 reports (its kubernetes_feature_enabled
// metric), so DefaultFeatures cannot drift from the scheduler it explains.
func TestDefaultGatesMatchScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body, err := c.SchedulerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sched := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if m := featureMetric.FindStringSubmatch(sc.Text()); m != nil {
			sched[m[1]] = m[2] == "1"
		}
	}
	if len(sched) == 0 {
		t.Fatalf("kube-scheduler's metrics have no kubernetes_feature_enabled series:\n%.2000s", body)
	}
	var gates []string
	for g := range explain.DefaultGates {
		gates = append(gates, g)
	}
	sort.Strings(gates)
	for _, g := range gates {
		on, ok := sched[g]
		if !ok {
			t.Errorf("kube-scheduler does not report feature gate %s", g)
			continue
		}
		if on != explain.DefaultGates[g] {
			t.Errorf("feature gate %s: kube-scheduler runs with %v, DefaultGates says %v", g, on, explain.DefaultGates[g])
		}
	}
}
