package main

import (
	"context"
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver"
)

// TestBothHalvesVisible: a container that gets both halves of a card in
// one claim sees both (the runtime applies one device's CDI edits after
// the other's; a shared variable name would keep only the last).
func TestBothHalvesVisible(t *testing.T) {
	var devs []cdi.Device
	for _, name := range []string{"card-0-a", "card-0-b"} {
		dev := driver.AllocatedDevice{Request: "half", Pool: "node", Device: name}
		out, err := cards{}.PrepareDevice(context.Background(), driver.Claim{}, dev)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, cdi.Device{Name: name, Edits: out.Edits})
	}
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, DriverName, "card")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := w.Write(context.Background(), cdi.Claim{UID: "c1", Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if err := cdi.Inject(spec, []string{dir}, ids...); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PARTITIONED_DEVICE_CARD_0_A=card-0-a",
		"PARTITIONED_DEVICE_CARD_0_B=card-0-b"} {
		if !slices.Contains(spec.Process.Env, want) {
			t.Errorf("container env %v lacks %s", spec.Process.Env, want)
		}
	}
}
