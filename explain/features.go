package explain

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/dynamic-resource-allocation/structured"
)

// DefaultGates are kube-scheduler 1.37's default values of the feature
// gates that select allocator features (the names
// structured.Features.Set reports). TestDefaultGatesCoverFeatures fails
// when the DRA library gains a feature this table does not name, and a
// cluster test compares the table with a real kube-scheduler's
// kubernetes_feature_enabled metric.
var DefaultGates = map[string]bool{
	"DRAAdminAccess":               true,
	"DRAConsumableCapacity":        true,
	"DRADerivedAttributes":         false,
	"DRADeviceBindingConditions":   true,
	"DRADeviceCompatibilityGroups": false,
	"DRADeviceTaints":              true,
	"DRAFractionalCapacityRange":   false,
	"DRAListTypeAttributes":        false,
	"DRAOptionalNodeOperations":    false,
	"DRAPartitionableDevices":      true,
	"DRAPrioritizedList":           true,
	"DRAResourceClaimDeviceStatus": true,
}

// DefaultFeatures are the allocator features kube-scheduler 1.37 runs
// with by default: FeaturesFromGates of DefaultGates. They only matter
// where slices and claims use the matching fields.
var DefaultFeatures, _ = featuresFromGates(DefaultGates)

// FeatureGates lists, for each allocator feature, the feature gates that
// enable it, as the DRA library names them (a feature that needs two
// gates, such as DeviceBindingAndStatus, lists both). The keys are the
// field names of structured.Features.
func FeatureGates() map[string][]string {
	out := map[string][]string{}
	t := reflect.TypeOf(structured.Features{})
	for i := range t.NumField() {
		if t.Field(i).Type.Kind() != reflect.Bool {
			continue
		}
		var one structured.Features
		reflect.ValueOf(&one).Elem().Field(i).SetBool(true)
		var gates []string
		for name := range one.Set() {
			gates = append(gates, strings.Split(name, "+")...)
		}
		sort.Strings(gates)
		out[t.Field(i).Name] = gates
	}
	return out
}

// FeaturesFromGates returns the allocator features kube-scheduler runs
// with when its feature gates have the given values: a feature is on when
// every gate it needs is on (kube-scheduler's dynamicresources plugin
// builds structured.Features the same way). A gate the map does not name
// is an error, so that a cluster description that predates a feature
// does not silently turn it off.
func FeaturesFromGates(gates map[string]bool) (structured.Features, error) {
	f, missing := featuresFromGates(gates)
	if len(missing) > 0 {
		return structured.Features{}, fmt.Errorf("feature gates %s: no value given (allocator features need them)", strings.Join(missing, ", "))
	}
	return f, nil
}

// featuresFromGates is FeaturesFromGates with a gate the map does not
// name taken as off; it also returns those gates, sorted.
func featuresFromGates(gates map[string]bool) (structured.Features, []string) {
	var f structured.Features
	v := reflect.ValueOf(&f).Elem()
	var missing []string
	for field, needs := range FeatureGates() {
		on := true
		for _, g := range needs {
			val, ok := gates[g]
			if !ok {
				missing = append(missing, g)
			}
			on = on && val
		}
		v.FieldByName(field).SetBool(on)
	}
	sort.Strings(missing)
	return f, missing
}
