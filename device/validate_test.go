package device

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// objectProblems returns the object-scope problems of slice i.
func objectProblems(err error, i int) []Problem {
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		panic(fmt.Sprintf("Validate returned %T, not *ValidationError", err))
	}
	var out []Problem
	for _, p := range ve.Problems {
		if p.Scope == ScopeObject && p.Slice == i {
			out = append(out, p)
		}
	}
	return out
}

func fields(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Field)
	}
	return out
}

func TestValidateTable(t *testing.T) {
	if len(sliceCases) < 40 {
		t.Fatalf("table has %d cases, want at least 40", len(sliceCases))
	}
	valid, invalid := 0, 0
	for _, tc := range sliceCases {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSlice()
			tc.mutate(s)
			err := Validate(s)
			ps := objectProblems(err, 0)
			if tc.valid != (len(ps) == 0) {
				t.Fatalf("valid = %v, want %v; problems:\n%v", len(ps) == 0, tc.valid, err)
			}
			if tc.wantField != "" && !slices.Contains(fields(ps), tc.wantField) {
				t.Errorf("no problem at %s; got:\n%v", tc.wantField, err)
			}
		})
		if tc.valid {
			valid++
		} else {
			invalid++
		}
	}
	if valid < 10 || invalid < 30 {
		t.Errorf("table has %d valid and %d invalid cases; want both kinds well covered", valid, invalid)
	}
}

func TestValidatePoolConsistency(t *testing.T) {
	inv := &Inventory{Driver: testDriver, Pools: []Pool{{
		Name:        "pool-a",
		CounterSets: []CounterSet{{Name: "gpu-0", Counters: map[string]resource.Quantity{"memory": q("80Gi")}}},
		Devices: []*Device{
			New("mig-0").ConsumesCounters("gpu-0", map[string]resource.Quantity{"memory": q("10Gi")}),
			New("mig-1").ConsumesCounters("gpu-1", map[string]resource.Quantity{"memory": q("10Gi")}),
			New("mig-2").ConsumesCounters("gpu-0", map[string]resource.Quantity{"cores": q("1")}),
			New("full").StringAttribute("model", "a").StringAttribute(testDriver+"/model", "b"),
		},
	}}}
	err := Validate(inv.ResourceSlices("node-1")...)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v, want *ValidationError", err)
	}
	var got []string
	for _, p := range ve.Problems {
		if p.Scope != ScopePool {
			t.Errorf("unexpected object problem: %v", p)
		}
		got = append(got, fmt.Sprintf("%d %s %s", p.Slice, p.Field, p.Type))
	}
	want := []string{
		"1 spec.devices[1].consumesCounters[0].counterSet Not found",
		"1 spec.devices[2].consumesCounters[0].counters[cores] Not found",
		"1 spec.devices[3].attributes[gpu.example.com/model] Duplicate value",
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pool problems (-want +got):\n%s", diff)
	}

	// The inventory reports the same problems with inventory paths.
	err = inv.Validate()
	if !errors.As(err, &ve) {
		t.Fatalf("Inventory.Validate = %v, want *ValidationError", err)
	}
	got = nil
	for _, p := range ve.Problems {
		got = append(got, p.Field)
	}
	slices.Sort(got)
	wantInv := []string{
		"pools[0].devices[1].consumesCounters[0].counterSet",
		"pools[0].devices[2].consumesCounters[0].counters[cores]",
		"pools[0].devices[3].attributes[gpu.example.com/model]",
	}
	if diff := cmp.Diff(wantInv, got); diff != "" {
		t.Errorf("inventory problems (-want +got):\n%s", diff)
	}
	if _, err := inv.DriverResources(); !errors.As(err, &ve) {
		t.Errorf("DriverResources of an invalid inventory = %v, want *ValidationError", err)
	}
}

func TestValidateDuplicateAcrossSlices(t *testing.T) {
	devs := make([]*Device, 130)
	for i := range devs {
		devs[i] = New(fmt.Sprintf("d-%d", i))
	}
	devs[129] = New("d-0")
	inv := &Inventory{Driver: testDriver, Pools: []Pool{{Name: "p", Devices: devs}}}
	ss := inv.ResourceSlices("n")
	if len(ss) != 2 {
		t.Fatalf("got %d slices, want 2", len(ss))
	}
	err := Validate(ss...)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Scope != ScopePool || ve.Problems[0].Slice != 1 {
		t.Fatalf("Validate = %v, want one pool problem in slice 1", err)
	}
	if err := inv.Validate(); err == nil {
		t.Error("Inventory.Validate accepted a duplicate device name")
	}
}

func TestProblemMessages(t *testing.T) {
	inv := &Inventory{Driver: testDriver, Pools: []Pool{{Name: "p", Devices: []*Device{
		New("gpu-0").StringAttribute("model", strings.Repeat("x", 65)).VersionAttribute("driverVersion", "1.2"),
	}}}}
	err := inv.Validate()
	want := "invalid devices: 2 problems:\n" +
		"  pools[0].devices[0].attributes[driverVersion].version: Invalid value \"1.2\": must be a string compatible with semver.org spec 2.0.0\n" +
		"  pools[0].devices[0].attributes[model].string: Too long: may not be more than 64 bytes"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
}

// TestInventoryAgreesWithSlices checks on random inventories that the
// inventory is valid exactly when the slices it becomes are.
func TestInventoryAgreesWithSlices(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		inv := randomInventory(r, []float64{0, 0.01, 0.05, 0.3}[i%4])
		invErr := inv.Validate()
		sliceErr := Validate(inv.ResourceSlices("node-1")...)
		if (invErr == nil) != (sliceErr == nil) {
			t.Fatalf("inventory %d: Inventory.Validate = %v\nValidate(slices) = %v", i, invErr, sliceErr)
		}
	}
}

var _ = resourceapi.ResourceSliceMaxDevices

// TestValidatorFractionalCapacityRange: a range default that is not a
// whole number of steps in milli units passes an API server without
// DRAFractionalCapacityRange (rounded up to integers) and is refused by
// one with it.
func TestValidatorFractionalCapacityRange(t *testing.T) {
	s := baseSlice()
	multiCap(s, &resourceapi.CapacityRequestPolicy{Default: qp("1500m"),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qp("1"), Step: qp("1")}})
	if err := Validate(s); err != nil {
		t.Errorf("default API server: %v", err)
	}
	if err := (Validator{}).Validate(s); err != nil {
		t.Errorf("zero Validator: %v", err)
	}
	err := Validator{FractionalCapacityRange: true}.Validate(s)
	problems := objectProblems(err, 0)
	if len(problems) == 0 || !strings.Contains(problems[0].Field, "requestPolicy") {
		t.Errorf("with DRAFractionalCapacityRange: %v, want a problem in the request policy", err)
	}
}
