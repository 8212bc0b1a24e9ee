package cdi

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// EditsFromSpec keeps every field Edits has and copies deeply; what
// Edits cannot hold is refused.
func TestEditsFromSpec(t *testing.T) {
	in := cdispec.ContainerEdits{
		Env:         []string{"A=1"},
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0", HostPath: "/run/nvidia/driver/dev/nvidia0", Type: "c", Major: 195}},
		Mounts:      []*cdispec.Mount{{HostPath: "/h/libcuda.so.580.95.05", ContainerPath: "/usr/lib/libcuda.so.580.95.05", Type: "bind", Options: []string{"ro", "rbind"}}},
		Hooks: []*cdispec.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"},
			Env: []string{"NVIDIA_CTK_DEBUG=false"}}},
		AdditionalGIDs: []uint32{44},
	}
	e, err := EditsFromSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, e.spec()); d != "" {
		t.Errorf("edits differ from the spec's (-in +edits):\n%s", d)
	}
	in.Mounts[0].Options[0] = "rw"
	in.Hooks[0].Env[0] = "X=1"
	if got := e.spec(); got.Mounts[0].Options[0] != "ro" || got.Hooks[0].Env[0] != "NVIDIA_CTK_DEBUG=false" {
		t.Errorf("the edits share memory with the spec: %+v %+v", got.Mounts[0], got.Hooks[0])
	}
	if _, err := EditsFromSpec(cdispec.ContainerEdits{NetDevices: []*cdispec.LinuxNetDevice{{HostInterfaceName: "eth0", Name: "net0"}}}); err == nil {
		t.Error("network devices were accepted")
	}
}
