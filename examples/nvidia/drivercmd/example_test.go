package drivercmd_test

import (
	"fmt"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// A binary that gives real GPUs' containers more than device nodes passes
// an editor factory; here the driver only prints its DeviceClasses.
func ExampleRun() {
	err := drivercmd.Run(
		[]string{"-print-device-classes", "-mig-profiles=3g.71gb"},
		drivercmd.WithContainerEditor(
			func(nv nvml.Interface, root nvdriver.DriverRoot) (nvdriver.ContainerEditor, error) {
				return nil, fmt.Errorf("not called: no driver runs")
			},
		),
	)
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// ---
	// apiVersion: resource.k8s.io/v1
	// kind: DeviceClass
	// metadata:
	//   name: gpu.nvidia.drakit.dev
	// spec:
	//   extendedResourceName: nvidia.com/gpu
	//   selectors:
	//   - cel:
	//       expression: device.driver == "gpu.nvidia.drakit.dev" && device.attributes["gpu.nvidia.drakit.dev"].type
	//         == "gpu"
	// ---
	// apiVersion: resource.k8s.io/v1
	// kind: DeviceClass
	// metadata:
	//   name: mig.nvidia.drakit.dev
	// spec:
	//   selectors:
	//   - cel:
	//       expression: device.driver == "gpu.nvidia.drakit.dev" && device.attributes["gpu.nvidia.drakit.dev"].type
	//         == "mig"
	// ---
	// apiVersion: resource.k8s.io/v1
	// kind: DeviceClass
	// metadata:
	//   name: shared.gpu.nvidia.drakit.dev
	// spec:
	//   extendedResourceName: nvidia.com/gpu.shared
	//   selectors:
	//   - cel:
	//       expression: device.driver == "gpu.nvidia.drakit.dev" && device.attributes["gpu.nvidia.drakit.dev"].type
	//         == "shared" && device.attributes["gpu.nvidia.drakit.dev"].sharing == "mps"
	// ---
	// apiVersion: resource.k8s.io/v1
	// kind: DeviceClass
	// metadata:
	//   name: mig-3g-71gb.nvidia.drakit.dev
	// spec:
	//   extendedResourceName: nvidia.com/mig-3g.71gb
	//   selectors:
	//   - cel:
	//       expression: device.driver == "gpu.nvidia.drakit.dev" && device.attributes["gpu.nvidia.drakit.dev"].type
	//         == "mig" && device.attributes["gpu.nvidia.drakit.dev"].profile == "3g.71gb"
}
