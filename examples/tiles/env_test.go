package main

import (
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/testenv"
)

// TestConformance runs drakit's conformance suite against the driver as a
// process on a fake node of two cards, with a claim of the driver's own:
// two 2-tile partitions. Every check must pass or skip.
func TestConformance(t *testing.T) {
	env := testenv.Start(t)
	root := t.TempDir()
	if _, err := writeMachine(root, 2); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := env.ConformanceConfig(DriverName)
	c.StartCommand = append([]string{self, "--sysfs-root", root, "--state-dir",
		filepath.Join(t.TempDir(), "state")}, env.DriverArgs(DriverName)...)
	c.StartEnv = []string{runAsDriver + "=1"}
	sel := `device.attributes["` + DriverName + `"].profile == "2t"`
	two := &resourceapi.ExactDeviceRequest{Count: 2,
		Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: sel}}}}
	c.ExtraClaims = []resourceapi.ResourceClaimSpec{{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "tiles", Exactly: two}}}}}
	rep := conformance.Test(t, c)
	counts := map[conformance.Status]int{}
	for _, res := range rep.Results {
		counts[res.Status]++
	}
	t.Logf("conformance: %v", counts)
}
