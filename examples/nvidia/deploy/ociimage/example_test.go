package ociimage_test

import (
	"fmt"
	"io"

	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// A driver's image from its static binary: one file, run as the
// entrypoint, imported with `ctr -n k8s.io images import image.tar`.
func Example() {
	binary := []byte("\x7fELF...") // os.ReadFile of a CGO_ENABLED=0 build
	desc, err := ociimage.Write(io.Discard, ociimage.Image{
		Ref:          "drakit.dev/nvidia-dra-driver:dev",
		Files:        []ociimage.File{{Path: "/nvidia-dra-driver", Mode: 0o755, Content: binary}},
		Dirs:         []string{"/tmp"},
		Entrypoint:   []string{"/nvidia-dra-driver"},
		Architecture: "amd64",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(desc.MediaType, desc.Annotations[ociimage.AnnotationContainerdName])
	// Output: application/vnd.oci.image.manifest.v1+json drakit.dev/nvidia-dra-driver:dev
}
