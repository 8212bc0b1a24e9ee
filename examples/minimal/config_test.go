package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver"
)

// TestDeviceConfigStrict: a claim's opaque config with a field the driver
// does not know fails the prepare with an error naming the field; a
// known one reaches the container.
func TestDeviceConfigStrict(t *testing.T) {
	dev := func(params ...string) driver.AllocatedDevice {
		d := driver.AllocatedDevice{Request: "gpu", Pool: "node", Device: "dev-0"}
		for i, p := range params {
			fromClass := i == 0 && len(params) > 1
			cfg := driver.OpaqueConfig{FromClass: fromClass, Parameters: json.RawMessage(p)}
			d.Config = append(d.Config, cfg)
		}
		return d
	}
	ctx := context.Background()
	_, err := simulated{}.PrepareDevice(ctx, driver.Claim{}, dev(`{"lable":"blue"}`))
	if !errors.Is(err, driver.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), `unknown field "lable"`) ||
		!strings.Contains(err.Error(), `request "gpu"`) {
		t.Errorf("prepare with an unknown config field = %v, "+
			"want %v naming the field and the request", err, driver.ErrInvalidConfig)
	}
	// The claim's config overrides the class's.
	both := dev(`{"label":"red"}`, `{"label":"blue"}`)
	out, err := simulated{}.PrepareDevice(ctx, driver.Claim{}, both)
	if err != nil {
		t.Fatal(err)
	}
	// What a container gets: the spec written and injected as a runtime
	// would.
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, "minimal.drakit.dev", "claim")
	if err != nil {
		t.Fatal(err)
	}
	devs := []cdi.Device{{Name: "dev-0", Edits: out.Edits}}
	ids, err := w.Write(ctx, cdi.Claim{UID: "c1", Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if err := cdi.Inject(spec, []string{dir}, ids...); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Process.Env, envName(LabelEnvVar, "dev-0")+"=blue") {
		t.Errorf("container env %v lacks %s=blue", spec.Process.Env, envName(LabelEnvVar, "dev-0"))
	}
}

// TestTwoDevicesKeepTheirEnv: a container that gets two devices of a
// claim sees both devices' variables (the runtime applies one device's
// CDI edits after the other's; a shared name would keep only the last),
// each with its own label.
func TestTwoDevicesKeepTheirEnv(t *testing.T) {
	var devs []cdi.Device
	for i, label := range []string{"red", "blue"} {
		name := []string{"dev-0", "dev-1"}[i]
		cfg := driver.OpaqueConfig{Parameters: json.RawMessage(`{"label":"` + label + `"}`)}
		out, err := simulated{}.PrepareDevice(context.Background(), driver.Claim{},
			driver.AllocatedDevice{Request: "gpu", Pool: "node", Device: name,
				Config: []driver.OpaqueConfig{cfg}})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, cdi.Device{Name: name, Edits: out.Edits})
	}
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, "minimal.drakit.dev", "claim")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := w.Write(context.Background(), cdi.Claim{UID: "c2", Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if err := cdi.Inject(spec, []string{dir}, ids...); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MINIMAL_DEVICE_DEV_0=dev-0", "MINIMAL_DEVICE_DEV_1=dev-1",
		"MINIMAL_LABEL_DEV_0=red", "MINIMAL_LABEL_DEV_1=blue"} {
		if !slices.Contains(spec.Process.Env, want) {
			t.Errorf("container env %v lacks %s", spec.Process.Env, want)
		}
	}
}
