package device

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzSanitizeName: the result is always a DNS label, a DNS label is
// kept, and the function is deterministic.
func FuzzSanitizeName(f *testing.F) {
	for _, s := range []string{"", "gpu-0", "0000:3b:00.0", "GPU_0", "-", "a--b", "é", "x\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := SanitizeName(s)
		if msgs := validation.IsDNS1123Label(got); len(msgs) > 0 {
			t.Fatalf("SanitizeName(%q) = %q: not a DNS label: %v", s, got, msgs)
		}
		if len(validation.IsDNS1123Label(s)) == 0 && got != s {
			t.Fatalf("SanitizeName(%q) changed a valid name to %q", s, got)
		}
		if SanitizeName(s) != got {
			t.Fatal("not deterministic")
		}
	})
}

// FuzzDeviceBuilder feeds arbitrary names and values through the
// builder. Validation must never panic, must report problems only as
// *ValidationError, and an inventory it accepts must convert into slices
// that Validate accepts as well.
func FuzzDeviceBuilder(f *testing.F) {
	f.Add("gpu-0", "model", "a100", "driverVersion", "1.2.3", "memory", "80Gi", "pool-a", "gpu-0-set", "example.com/t", int64(3))
	f.Add("GPU_0", "my-attr", string(make([]byte, 70)), "v", "1.2", "mem-ory", "-1", "a//b", "Set", "bad key", int64(-1))
	f.Add("", "", "", "", "", "", "0", "", "", "", int64(0))
	f.Add("x", "a.com/b/c", "é", "resource.kubernetes.io/x", "0.0.0-0", "a/", "1e3", "p/q", "s", "k", int64(1<<40))
	f.Fuzz(func(t *testing.T, devName, attrName, attrValue, verName, verValue, capName, capValue, poolName, setName, taintKey string, n int64) {
		qty, err := resource.ParseQuantity(capValue)
		if err != nil {
			qty = resource.MustParse("1")
		}
		d := New(devName).
			StringAttribute(attrName, attrValue).
			VersionAttribute(verName, verValue).
			IntAttribute("n", n).
			Capacity(capName, qty, &RequestPolicy{Default: &qty, Min: &qty}).
			ConsumesCounters(setName, map[string]resource.Quantity{"c": qty}).
			Taint(Taint{Key: taintKey, Effect: NoSchedule})
		if n%2 == 0 {
			d.AllowMultipleAllocations()
		}
		inv := &Inventory{Driver: testDriver, Pools: []Pool{{
			Name:        poolName,
			CounterSets: []CounterSet{{Name: setName, Counters: map[string]resource.Quantity{"c": qty}}},
			Devices:     []*Device{d, New("other")},
		}}}
		err = inv.Validate()
		var ve *ValidationError
		if err != nil && !errors.As(err, &ve) {
			t.Fatalf("Validate returned %T: %v", err, err)
		}
		sliceErr := Validate(inv.ResourceSlices("node-1")...)
		if (err == nil) != (sliceErr == nil) {
			t.Fatalf("Inventory.Validate = %v, Validate(slices) = %v", err, sliceErr)
		}
		if err == nil {
			if _, err := inv.DriverResources(); err != nil {
				t.Fatalf("DriverResources of a valid inventory: %v", err)
			}
		}
	})
}
