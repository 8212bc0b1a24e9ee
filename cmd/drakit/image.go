package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/drakit/drakit/examples/nvidia/deploy"
)

func init() {
	register(command{
		name:    "image",
		summary: "build a driver's container image (OCI tarball) from its Go package, without a registry or base image",
		run:     runImage,
	})
}

func runImage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: drakit image -o FILE [-package PKG] [-ref NAME:TAG]

Builds Go package PKG as a static linux binary (CGO_ENABLED=0) and writes
it as a one-layer OCI image tarball (the binary its entrypoint, an empty
/tmp) to FILE: no registry, no Dockerfile, no base image. Load it on a
node with: ctr -n k8s.io images import FILE (or docker load, podman load,
skopeo copy oci-archive:FILE ...). The defaults build the reference
NVIDIA driver under the name its Helm chart runs.

Flags:
`)
		fs.PrintDefaults()
	}
	out := fs.String("o", "", "output tarball (required)")
	pkg := fs.String("package", deploy.DriverPackage, "the driver's main package")
	ref := fs.String("ref", deploy.Image, "the image's name, NAME:TAG")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("%w: -o is required", errUsage)
	}
	desc, err := deploy.BuildImage(ctx, *pkg, *ref, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s %s\n", *out, *ref, desc.Digest)
	return nil
}
