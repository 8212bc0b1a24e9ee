package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// ContainerScript, run by sh in a container with two claims (the
// environment and devices files the driver gives), prints every device of
// both; ParseSeen reads them back.
func TestContainerScriptTwoClaims(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"ns_a.json": `{"claim":"a"}`, "ns_b.json": `{"claim":"b"}`}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The script ends with a long sleep; here sleep returns at once.
	bin := t.TempDir()
	if err := os.WriteFile(
		filepath.Join(bin, "sleep"), []byte("#!/bin/sh\nexit 0\n"), 0o755,
	); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", deploy.ContainerScript)
	cmd.Env = []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		nvdriver.EnvVisibleDevices + "=" + nvdriver.VisibleDevicesVoid,
		nvdriver.EnvClaimFileDir + "=" + dir,
		nvdriver.EnvDevicePrefix + "GPU_1=GPU-1111",
		nvdriver.EnvDevicePrefix + "GPU_0=GPU-0000",
		nvdriver.EnvDevicePrefix + "GPU_2_1G_18GB_6=MIG-2222",
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh -c ContainerScript: %v: %s", err, out)
	}
	s := deploy.ParseSeen(string(out))
	if !s.Complete || s.VisibleDevices != nvdriver.VisibleDevicesVoid ||
		!slices.Equal(s.UUIDs, []string{"GPU-0000", "GPU-1111", "MIG-2222"}) {
		t.Errorf(
			"ParseSeen of %q = %+v, want void, the three UUIDs in variable order, complete",
			out,
			s,
		)
	}
	for _, content := range files {
		if !strings.Contains(s.DevicesFiles, content) {
			t.Errorf("devices files %q lack %s", s.DevicesFiles, content)
		}
	}
}
