package device

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// benchInventory is a node with 10,000 devices: 8 attributes and 2
// capacities each; every 10th device consumes counters of one of 100
// counter sets, every 100th is tainted.
func benchInventory(n int) *Inventory {
	p := Pool{Name: "node-1"}
	for i := 0; i < 100; i++ {
		p.CounterSets = append(p.CounterSets, CounterSet{Name: fmt.Sprintf("gpu-%d", i),
			Counters: map[string]resource.Quantity{"memory": resource.MustParse("80Gi"), "sm": resource.MustParse("132")}})
	}
	for i := 0; i < n; i++ {
		d := New(fmt.Sprintf("dev-%d", i)).
			StringAttribute("model", "h100-sxm5-80gb").
			StringAttribute("uuid", fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", i)).
			IntAttribute("index", int64(i)).
			IntAttribute("minor", int64(i%256)).
			BoolAttribute("mig", i%10 == 0).
			VersionAttribute("driverVersion", "580.65.6").
			VersionAttribute("cudaVersion", "12.8.0").
			StringAttribute(KubernetesDomain+"/pcieRoot", fmt.Sprintf("pci0000:%02x", i%64)).
			Capacity("memory", resource.MustParse("80Gi"), nil).
			Capacity("sm", resource.MustParse("132"), nil)
		if i%10 == 0 {
			d.ConsumesCounters(fmt.Sprintf("gpu-%d", i%100), map[string]resource.Quantity{"memory": resource.MustParse("10Gi")})
		}
		if i%100 == 0 {
			d.Taint(Taint{Key: "gpu.example.com/unhealthy", Effect: NoSchedule})
		}
		p.Devices = append(p.Devices, d)
	}
	return &Inventory{Driver: "gpu.example.com", Pools: []Pool{p}}
}

// BenchmarkDriverResources10k: validate and convert 10,000 devices into
// the slices PublishResources takes.
func BenchmarkDriverResources10k(b *testing.B) {
	inv := benchInventory(10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := inv.DriverResources(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateSlices10k: validate the ResourceSlice objects of
// 10,000 devices (what "drakit slices validate" does).
func BenchmarkValidateSlices10k(b *testing.B) {
	slices := benchInventory(10000).ResourceSlices("node-1")
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(slices...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResourceSlices10k: conversion alone, without validation.
func BenchmarkResourceSlices10k(b *testing.B) {
	inv := benchInventory(10000)
	b.ReportAllocs()
	for b.Loop() {
		_ = inv.ResourceSlices("node-1")
	}
}
