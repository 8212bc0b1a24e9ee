package device

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// sliceCase is one ResourceSlice that Validate and the API server must
// agree on. valid says whether the slice has no object-scope problems.
// wantField, when set, is a field path that Validate must report.
type sliceCase struct {
	name      string
	mutate    func(s *resourceapi.ResourceSlice)
	valid     bool
	wantField string
}

const testDriver = "gpu.example.com"

func baseSlice() *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "base"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   testDriver,
			Pool:     resourceapi.ResourcePool{Name: "pool-a", Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To("node-1"),
			Devices: []resourceapi.Device{{
				Name: "gpu-0",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"model": {StringValue: ptr.To("a100")},
				},
			}},
		},
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }
func qp(s string) *resource.Quantity {
	v := resource.MustParse(s)
	return &v
}

func dev0(s *resourceapi.ResourceSlice) *resourceapi.Device { return &s.Spec.Devices[0] }

func attr(s *resourceapi.ResourceSlice, name string, a resourceapi.DeviceAttribute) {
	dev0(s).Attributes[resourceapi.QualifiedName(name)] = a
}

func plainDevices(n int) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		out[i] = resourceapi.Device{Name: fmt.Sprintf("dev-%d", i)}
	}
	return out
}

func counterSets(n, counters int) []resourceapi.CounterSet {
	out := make([]resourceapi.CounterSet, n)
	for i := range out {
		m := make(map[string]resourceapi.Counter, counters)
		for j := 0; j < counters; j++ {
			m[fmt.Sprintf("c%d", j)] = resourceapi.Counter{Value: q("1")}
		}
		out[i] = resourceapi.CounterSet{Name: fmt.Sprintf("set-%d", i), Counters: m}
	}
	return out
}

func multiCap(s *resourceapi.ResourceSlice, policy *resourceapi.CapacityRequestPolicy) {
	d := dev0(s)
	d.AllowMultipleAllocations = ptr.To(true)
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"memory": {Value: q("80Gi"), RequestPolicy: policy},
	}
}

// sliceCases is the table shared by the unit test and the differential
// test against the API server.
var sliceCases = []sliceCase{
	{name: "base", mutate: func(*resourceapi.ResourceSlice) {}, valid: true},
	{name: "empty slice", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Devices = nil }, valid: true},
	{name: "all attribute kinds", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "cores", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](-5)})
		attr(s, "mig", resourceapi.DeviceAttribute{BoolValue: ptr.To(true)})
		attr(s, "driverVersion", resourceapi.DeviceAttribute{VersionValue: ptr.To("1.2.3-rc.1+build.5")})
		attr(s, "resource.kubernetes.io/pcieRoot", resourceapi.DeviceAttribute{StringValue: ptr.To("pci0000:00")})
	}},
	{name: "driver name upper case", valid: true, mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Driver = "GPU.Example.com" }},
	{name: "driver name empty", wantField: "spec.driver", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Driver = "" }},
	{name: "driver name 64 chars", wantField: "spec.driver", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Driver = strings.Repeat("a", 60) + ".com" }},
	{name: "driver name underscore", wantField: "spec.driver", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Driver = "gpu_x.example.com" }},
	{name: "pool name with slashes", valid: true, mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Pool.Name = "rack-1/node-1.example" }},
	{name: "pool name empty part", wantField: "spec.pool.name", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Pool.Name = "a//b" }},
	{name: "pool name too long", wantField: "spec.pool.name", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Pool.Name = strings.Repeat("a/", 127) + "ab"
	}},
	{name: "pool name empty", wantField: "spec.pool.name", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Pool.Name = "" }},
	{name: "slice count zero", wantField: "spec.pool.resourceSliceCount", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Pool.ResourceSliceCount = 0 }},
	{name: "generation negative", wantField: "spec.pool.generation", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Pool.Generation = -1 }},
	{name: "no node selection", wantField: "spec", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.NodeName = nil }},
	{name: "node name and all nodes", wantField: "spec", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.AllNodes = ptr.To(true) }},
	{name: "all nodes false", wantField: "spec.allNodes", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.AllNodes = ptr.To(false)
	}},
	{name: "node name invalid", wantField: "spec.nodeName", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.NodeName = ptr.To("Node_1") }},
	{name: "node selector", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "example.com/rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}},
		}}}
	}},
	{name: "node selector two terms", wantField: "spec.nodeSelector.nodeSelectorTerms", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpExists}}}
		s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term, term}}
	}},
	{name: "node selector In without values", wantField: "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn}},
		}}}
	}},
	{name: "all nodes", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.AllNodes = ptr.To(true)
	}},
	{name: "device name invalid", wantField: "spec.devices[0].name", mutate: func(s *resourceapi.ResourceSlice) { dev0(s).Name = "GPU_0" }},
	{name: "device name 64 chars", wantField: "spec.devices[0].name", mutate: func(s *resourceapi.ResourceSlice) { dev0(s).Name = strings.Repeat("a", 64) }},
	{name: "device name 63 chars", valid: true, mutate: func(s *resourceapi.ResourceSlice) { dev0(s).Name = strings.Repeat("a", 63) }},
	{name: "duplicate device", wantField: "spec.devices[1]", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: "gpu-0"})
	}},
	{name: "128 devices", valid: true, mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Devices = plainDevices(128) }},
	{name: "129 devices", wantField: "spec.devices", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Devices = plainDevices(129) }},
	{name: "65 devices one tainted", wantField: "spec.devices", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = plainDevices(65)
		s.Spec.Devices[64].Taints = []resourceapi.DeviceTaint{{Key: "example.com/broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}},
	{name: "64 devices one tainted", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = plainDevices(64)
		s.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "example.com/broken", Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoExecute}}
	}},
	{name: "string 64 bytes", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "model", resourceapi.DeviceAttribute{StringValue: ptr.To(strings.Repeat("x", 64))})
	}},
	{name: "string 65 bytes", wantField: "spec.devices[0].attributes[model].string", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "model", resourceapi.DeviceAttribute{StringValue: ptr.To(strings.Repeat("x", 65))})
	}},
	{name: "string 64 bytes multibyte", wantField: "spec.devices[0].attributes[model].string", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "model", resourceapi.DeviceAttribute{StringValue: ptr.To(strings.Repeat("é", 33))})
	}},
	{name: "version not semver", wantField: "spec.devices[0].attributes[v].version", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "v", resourceapi.DeviceAttribute{VersionValue: ptr.To("1.2")})
	}},
	{name: "version leading zero", wantField: "spec.devices[0].attributes[v].version", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "v", resourceapi.DeviceAttribute{VersionValue: ptr.To("1.02.3")})
	}},
	{name: "attribute two values", wantField: "spec.devices[0].attributes[x]", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "x", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1), BoolValue: ptr.To(true)})
	}},
	{name: "attribute no value", wantField: "spec.devices[0].attributes[x]", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "x", resourceapi.DeviceAttribute{})
	}},
	{name: "attribute name not identifier", wantField: "spec.devices[0].attributes", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "my-attr", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "attribute name 33 chars", wantField: "spec.devices[0].attributes", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, strings.Repeat("a", 33), resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "attribute name 32 chars", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, strings.Repeat("a", 32), resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "attribute empty domain", wantField: "spec.devices[0].attributes", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "/model2", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "attribute bad domain", wantField: "spec.devices[0].attributes", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "ex_ample.com/model2", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "attribute two slashes accepted by server", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "a.com/b/c", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "32 attributes and capacities", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		for i := 0; i < 30; i++ {
			attr(s, fmt.Sprintf("a%d", i), resourceapi.DeviceAttribute{IntValue: ptr.To(int64(i))})
		}
		dev0(s).Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: q("1Gi")}}
	}},
	{name: "33 attributes and capacities", wantField: "spec.devices[0]", mutate: func(s *resourceapi.ResourceSlice) {
		for i := 0; i < 31; i++ {
			attr(s, fmt.Sprintf("a%d", i), resourceapi.DeviceAttribute{IntValue: ptr.To(int64(i))})
		}
		dev0(s).Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: q("1Gi")}}
	}},
	{name: "capacity bad name", wantField: "spec.devices[0].capacity", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"mem-ory": {Value: q("1Gi")}}
	}},
	{name: "request policy without multiple allocations", wantField: "spec.devices[0].capacity[memory].requestPolicy", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1Gi")})
		dev0(s).AllowMultipleAllocations = nil
	}},
	{name: "request policy valid values", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("10Gi"), ValidValues: []resource.Quantity{q("10Gi"), q("20Gi"), q("40Gi")}})
	}},
	{name: "request policy values unsorted", wantField: "spec.devices[0].capacity[memory].requestPolicy.validValues[1]", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("10Gi"), ValidValues: []resource.Quantity{q("20Gi"), q("10Gi")}})
	}},
	{name: "request policy default not in values", wantField: "spec.devices[0].capacity[memory].requestPolicy.validValues", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("5Gi"), ValidValues: []resource.Quantity{q("10Gi")}})
	}},
	{name: "request policy value above capacity", wantField: "spec.devices[0].capacity[memory].requestPolicy.validValues[1]", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("10Gi"), ValidValues: []resource.Quantity{q("10Gi"), q("100Gi")}})
	}},
	{name: "request policy values and range", wantField: "spec.devices[0].capacity[memory].requestPolicy", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("10Gi"), ValidValues: []resource.Quantity{q("10Gi")},
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("1Gi")}})
	}},
	{name: "request policy range", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("2Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("1Gi"), Max: qp("80Gi"), Step: qp("1Gi")}})
	}},
	{name: "request policy range without min", wantField: "spec.devices[0].capacity[memory].requestPolicy.validRange.min", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("2Gi"), ValidRange: &resourceapi.CapacityRequestPolicyRange{Max: qp("8Gi")}})
	}},
	{name: "request policy range default off step", wantField: "spec.devices[0].capacity[memory].requestPolicy.validRange.step", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1536Mi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("1Gi"), Step: qp("1Gi")}})
	}},
	{name: "request policy range without default", wantField: "spec.devices[0].capacity[memory].requestPolicy.default", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("1Gi")}})
	}},
	{name: "request policy fractional range", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		d := dev0(s)
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"cores": {Value: q("4"),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: qp("500m"),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("250m"), Step: qp("250m")}}}}
	}},
	{name: "taint without effect", wantField: "spec.devices[0].taints[0].effect", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Taints = []resourceapi.DeviceTaint{{Key: "example.com/x"}}
	}},
	{name: "taint bad effect", wantField: "spec.devices[0].taints[0].effect", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Taints = []resourceapi.DeviceTaint{{Key: "example.com/x", Effect: "PreferNoSchedule"}}
	}},
	{name: "taint effect None", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Taints = []resourceapi.DeviceTaint{{Key: "example.com/x", Effect: resourceapi.DeviceTaintEffectNone}}
	}},
	{name: "taint bad key", wantField: "spec.devices[0].taints[0].key", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Taints = []resourceapi.DeviceTaint{{Key: "bad key", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}},
	{name: "taint bad value", wantField: "spec.devices[0].taints[0].value", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Taints = []resourceapi.DeviceTaint{{Key: "x", Value: "not a label value", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}},
	{name: "17 taints", wantField: "spec.devices[0].taints", mutate: func(s *resourceapi.ResourceSlice) {
		for i := 0; i < 17; i++ {
			dev0(s).Taints = append(dev0(s).Taints, resourceapi.DeviceTaint{Key: fmt.Sprintf("t%d", i), Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
	}},
	{name: "counter sets only", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = counterSets(8, 32)
	}},
	{name: "counters and devices in one slice", wantField: "spec", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.SharedCounters = counterSets(1, 1)
	}},
	{name: "9 counter sets", wantField: "spec.sharedCounters", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = counterSets(9, 1)
	}},
	{name: "33 counters in a set", wantField: "spec.sharedCounters[0].counters", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = counterSets(1, 33)
	}},
	{name: "counter set without counters", wantField: "spec.sharedCounters[0].counters", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "set-0"}}
	}},
	{name: "counter set bad name", wantField: "spec.sharedCounters[0].name", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = counterSets(1, 1)
		s.Spec.SharedCounters[0].Name = "Set_0"
	}},
	{name: "duplicate counter sets", wantField: "spec.sharedCounters[1]", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = counterSets(2, 1)
		s.Spec.SharedCounters[1].Name = "set-0"
	}},
	{name: "consumes counters of another slice", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-set", Counters: map[string]resourceapi.Counter{"memory": {Value: q("10Gi")}}}}
	}},
	{name: "consumes from 3 sets", wantField: "spec.devices[0].consumesCounters", mutate: func(s *resourceapi.ResourceSlice) {
		for i := 0; i < 3; i++ {
			dev0(s).ConsumesCounters = append(dev0(s).ConsumesCounters, resourceapi.DeviceCounterConsumption{
				CounterSet: fmt.Sprintf("s%d", i), Counters: map[string]resourceapi.Counter{"m": {Value: q("1")}}})
		}
	}},
	{name: "consumes without counters", wantField: "spec.devices[0].consumesCounters[0].counters", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "s0"}}
	}},
	{name: "consumes same set twice", wantField: "spec.devices[0].consumesCounters[1]", mutate: func(s *resourceapi.ResourceSlice) {
		c := resourceapi.DeviceCounterConsumption{CounterSet: "s0", Counters: map[string]resourceapi.Counter{"m": {Value: q("1")}}}
		dev0(s).ConsumesCounters = []resourceapi.DeviceCounterConsumption{c, c}
	}},
	{name: "65 devices one consuming counters", wantField: "spec.devices", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = plainDevices(65)
		s.Spec.Devices[3].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "s0", Counters: map[string]resourceapi.Counter{"m": {Value: q("1")}}}}
	}},
	{name: "binding conditions", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		d := dev0(s)
		d.BindingConditions = []string{"example.com/attached"}
		d.BindingFailureConditions = []string{"example.com/failed"}
		d.BindsToNode = ptr.To(true)
	}},
	{name: "binding conditions without failure", wantField: "spec.devices[0].bindingFailureConditions", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).BindingConditions = []string{"attached"}
	}},
	{name: "binding conditions overlap", wantField: "spec.devices[0].bindingFailureConditions[0]", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).BindingConditions = []string{"attached"}
		dev0(s).BindingFailureConditions = []string{"attached"}
	}},
	{name: "5 binding conditions", wantField: "spec.devices[0].bindingConditions", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).BindingConditions = []string{"a", "b", "c", "d", "e"}
		dev0(s).BindingFailureConditions = []string{"f"}
	}},
	{name: "per-device node name without per-device selection", wantField: "spec.devices[0]", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).NodeName = ptr.To("node-1")
	}},
	{name: "per-device node selection", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.PerDeviceNodeSelection = ptr.To(true)
		dev0(s).NodeName = ptr.To("node-1")
	}},
	{name: "per-device node selection missing on device", wantField: "spec.devices[0]", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.PerDeviceNodeSelection = ptr.To(true)
	}},
	{name: "list attribute only (dropped, then empty)", wantField: "spec.devices[0].attributes[x]", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "x", resourceapi.DeviceAttribute{IntValues: []int64{1, 2}})
	}},
	{name: "generate name", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Name = ""
		s.GenerateName = "00-gpu.example.com-node-1-"
	}},
	{name: "attribute domain upper case", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "Example.COM/x", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "attribute domain 64 chars", wantField: "spec.devices[0].attributes", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, strings.Repeat("d", 60)+".com/x", resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	}},
	{name: "driver name trailing dot", wantField: "spec.driver", mutate: func(s *resourceapi.ResourceSlice) { s.Spec.Driver = "gpu.example.com." }},
	{name: "negative counter and capacity", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = nil
		s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "s", Counters: map[string]resourceapi.Counter{"m": {Value: q("-5")}}}}
	}},
	{name: "negative capacity", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: q("-1Gi")}}
	}},
	{name: "request policy default only", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("100Gi")})
	}},
	{name: "request policy 11 values", wantField: "spec.devices[0].capacity[memory].requestPolicy.validValues", mutate: func(s *resourceapi.ResourceSlice) {
		var vs []resource.Quantity
		for i := 1; i <= 11; i++ {
			vs = append(vs, q(fmt.Sprintf("%dGi", i)))
		}
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1Gi"), ValidValues: vs})
	}},
	{name: "request policy values equal after rounding", wantField: "spec.devices[0].capacity[memory].requestPolicy.validValues[1]", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("500m"), ValidValues: []resource.Quantity{q("500m"), q("1")}})
	}},
	{name: "request policy duplicate values", wantField: "spec.devices[0].capacity[memory].requestPolicy.validValues[1]", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1Gi"), ValidValues: []resource.Quantity{q("1Gi"), q("1024Mi")}})
	}},
	{name: "request policy max below min", wantField: "spec.devices[0].capacity[memory].requestPolicy.validRange.max", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("4Gi"), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("4Gi"), Max: qp("2Gi")}})
	}},
	{name: "request policy step zero", wantField: "spec.devices[0].capacity[memory].requestPolicy.validRange.step", mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("4Gi"), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("4Gi"), Step: qp("0")}})
	}},
	{name: "request policy fractional default integer range (rounded up)", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1500m"), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("1"), Step: qp("1")}})
	}},
	{name: "request policy sub-milli value (rounded up)", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1"), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("100u"), Step: qp("1m")}})
	}},
	{name: "node selector bad field key", wantField: "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.uid", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}},
		}}}
	}},
	{name: "node selector Gt with two values", wantField: "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values", mutate: func(s *resourceapi.ResourceSlice) {
		s.Spec.NodeName = nil
		s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"1", "2"}}},
		}}}
	}},
	{name: "taint with time", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		tm := metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		dev0(s).Taints = []resourceapi.DeviceTaint{{Key: "example.com/x", Effect: resourceapi.DeviceTaintEffectNoExecute, TimeAdded: &tm}}
	}},
	{name: "consumes 2 sets of 32 counters", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		for _, cs := range counterSets(2, 32) {
			dev0(s).ConsumesCounters = append(dev0(s).ConsumesCounters, resourceapi.DeviceCounterConsumption{CounterSet: cs.Name, Counters: cs.Counters})
		}
	}},
	{name: "consumes 33 counters", wantField: "spec.devices[0].consumesCounters[0].counters", mutate: func(s *resourceapi.ResourceSlice) {
		cs := counterSets(1, 33)[0]
		dev0(s).ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: cs.Name, Counters: cs.Counters}}
	}},
	{name: "version 64 bytes", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "v", resourceapi.DeviceAttribute{VersionValue: ptr.To("1.2.3-" + strings.Repeat("a", 58))})
	}},
	{name: "version 65 bytes", wantField: "spec.devices[0].attributes[v].version", mutate: func(s *resourceapi.ResourceSlice) {
		attr(s, "v", resourceapi.DeviceAttribute{VersionValue: ptr.To("1.2.3-" + strings.Repeat("a", 59))})
	}},
	{name: "binding condition duplicate", wantField: "spec.devices[0].bindingConditions[1]", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).BindingConditions = []string{"a", "a"}
		dev0(s).BindingFailureConditions = []string{"f"}
	}},
	{name: "binding condition bad key", wantField: "spec.devices[0].bindingConditions[0]", mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).BindingConditions = []string{"not valid"}
		dev0(s).BindingFailureConditions = []string{"f"}
	}},
	{name: "binds to node alone", valid: true, mutate: func(s *resourceapi.ResourceSlice) { dev0(s).BindsToNode = ptr.To(true) }},
	{name: "multiple allocations without capacity", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		dev0(s).AllowMultipleAllocations = ptr.To(true)
	}},
	{name: "long generate name", valid: true, mutate: func(s *resourceapi.ResourceSlice) {
		s.Name = ""
		s.GenerateName = strings.Repeat("g", 100) + "-"
	}},
	{name: "object name 254 chars", wantField: "metadata.name", mutate: func(s *resourceapi.ResourceSlice) { s.Name = strings.Repeat("n", 254) }},
	{name: "bad object name", wantField: "metadata.name", mutate: func(s *resourceapi.ResourceSlice) { s.Name = "Bad_Name" }},
}
