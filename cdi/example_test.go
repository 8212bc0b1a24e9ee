package cdi_test

import (
	"context"
	"fmt"
	"os"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/drakit/drakit/cdi"
)

// A driver writes the spec of a prepared claim, returns the IDs to the
// kubelet, and the container runtime injects them.
func ExampleWriter_Write() {
	dir, err := os.MkdirTemp("", "cdi")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	w, err := cdi.NewWriter(dir, "gpu.example.com", "gpu")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ids, err := w.Write(ctx, cdi.Claim{
		UID:       "0b7e5a0c-7f42-4a8e-9a51-3c2b1d0e9f11",
		Namespace: "default", Name: "train",
		Common: new(cdi.Edits).Env("CLAIM", "train"),
		Devices: []cdi.Device{{
			Name:  "gpu-0",
			Edits: new(cdi.Edits).Env("VISIBLE_GPUS", "0").DeviceNode(cdi.DeviceNode{Path: "/dev/gpu0", HostPath: "/dev/null"}),
		}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(ids[0])

	// What the container runtime does with the ID:
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if err := cdi.Inject(spec, []string{dir}, ids...); err != nil {
		panic(err)
	}
	fmt.Println(spec.Process.Env, spec.Linux.Devices[0].Path)

	// After unprepare, and for claims that vanished while the driver was
	// down:
	removed, err := w.GC(ctx, nil)
	fmt.Println(removed, err)
	// Output:
	// gpu.example.com/gpu=0b7e5a0c-7f42-4a8e-9a51-3c2b1d0e9f11_gpu-0
	// [CLAIM=train VISIBLE_GPUS=0] /dev/gpu0
	// [0b7e5a0c-7f42-4a8e-9a51-3c2b1d0e9f11] <nil>
}

// EncodeName makes any string safe inside a CDI device name.
func ExampleEncodeName() {
	fmt.Println(cdi.EncodeName("pool-a/gpu_0"))
	// Output: pool-a_2fgpu_5f0
}

func ExampleParseKind() {
	vendor, class, err := cdi.ParseKind("acme.example.com/fpga")
	fmt.Println(vendor, class, err)
	_, _, err = cdi.ParseKind("acme.example.com/")
	fmt.Println(err)
	// Output:
	// acme.example.com fpga <nil>
	// CDI kind "acme.example.com/": class: must not be empty: invalid name
}

// Edits another CDI generator made join a claim's spec as they are.
func ExampleEditsFromSpec() {
	e, err := cdi.EditsFromSpec(cdispec.ContainerEdits{
		Hooks: []*cdispec.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook",
			Args: []string{"nvidia-cdi-hook", "update-ldcache"}, Env: []string{"NVIDIA_CTK_DEBUG=false"}}},
	})
	if err != nil {
		panic(err)
	}
	w, err := cdi.NewWriter("/var/run/cdi", "example.com", "gpu")
	if err != nil {
		panic(err)
	}
	spec, _, err := w.Spec(cdi.Claim{UID: "0b4e", Namespace: "ns", Name: "c", Devices: []cdi.Device{{Name: "gpu-0", Edits: e}}})
	if err != nil {
		panic(err)
	}
	h := spec.Devices[0].ContainerEdits.Hooks[0]
	fmt.Println(h.HookName, h.Path, h.Args, h.Env)
	// Output: createContainer /usr/bin/nvidia-cdi-hook [nvidia-cdi-hook update-ldcache] [NVIDIA_CTK_DEBUG=false]
}
