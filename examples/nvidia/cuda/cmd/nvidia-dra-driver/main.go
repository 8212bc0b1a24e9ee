// Command nvidia-dra-driver is drakit's reference NVIDIA DRA driver as its
// image ships it: examples/nvidia/cmd/nvidia-dra-driver's command line
// (package drivercmd) with the CUDA container edits of package cuda, so
// that on real GPUs a container gets the driver's libraries, binaries and
// hooks, not only device nodes. -nvidia-cdi-hook-path names
// nvidia-cdi-hook on the node; with -nvidia-cdi-hook-from (the image's
// own hook, built from the same toolkit version as nvcdi) the driver
// first copies that file there, into a host folder mounted at the same
// path, as NVIDIA's driver does.
package main

import (
	"errors"
	"flag"
	"os"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/examples/nvidia/cuda"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/examples/nvidia/nvml"
)

func main() {
	hook := cuda.DefaultHookPath
	var from string
	err := drivercmd.Run(
		os.Args[1:],
		drivercmd.WithFlags(func(fs *flag.FlagSet) {
			fs.StringVar(
				&hook,
				"nvidia-cdi-hook-path",
				hook,
				"path of nvidia-cdi-hook on the node, run by the container runtime for the CUDA "+
					"container edits",
			)
			fs.StringVar(
				&from,
				"nvidia-cdi-hook-from",
				"",
				"copy this nvidia-cdi-hook (the image's) to -nvidia-cdi-hook-path at start, "+
					"which must then be in a host folder mounted at the same path",
			)
		}),
		drivercmd.WithContainerEditor(
			func(nv nvml.Interface, root nvdriver.DriverRoot) (nvdriver.ContainerEditor, error) {
				r, ok := nv.(*nvml.Real)
				if !ok || r.Library() == nil {
					return nil, errors.New("the CUDA container edits need the real NVML")
				}
				if from != "" {
					if err := cuda.InstallHook(from, hook); err != nil {
						return nil, err
					}
				}
				return cuda.New(r.Library(), root, cuda.WithHookPath(hook))
			},
		),
	)
	if err != nil {
		klog.Fatal(err)
	}
}
