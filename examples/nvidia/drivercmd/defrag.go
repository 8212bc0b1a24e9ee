package drivercmd

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver/driverflag"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig/defrag"
)

// DefragCommand is the first argument that makes Run run the MIG
// defragmenter (package mig/defrag) instead of the driver: what the
// chart's defrag Deployment runs, from the driver's own image.
const DefragCommand = "defrag-controller"

// runDefrag runs the MIG defragmenter for the driver's devices until
// SIGINT or SIGTERM, when the MIGDefragmenter feature gate is on.
func runDefrag(args []string) error {
	fs := flag.NewFlagSet("nvidia-dra-driver "+DefragCommand, flag.ExitOnError)
	kubeconfig := fs.String(
		"kubeconfig",
		"",
		"kubeconfig of the cluster (default $KUBECONFIG, then the pod's service account)",
	)
	var f defrag.Flags
	f.Register(fs, nvdriver.DriverName)
	f.ClassProfile = nvdriver.ClassProfile
	std, err := parseComponent(fs, args)
	if err != nil {
		return err
	}
	if !std.FeatureGate.Enabled(MIGDefragmenter) {
		return fmt.Errorf(
			"%s: the %s feature gate (alpha) is off: it evicts pods; pass "+
				"--feature-gates=%s=true to run it: %w",
			DefragCommand,
			MIGDefragmenter,
			MIGDefragmenter,
			errGateOff,
		)
	}
	cfg, err := driverflag.LoadRESTConfig(*kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", DefragCommand, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", DefragCommand, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("defrag"))
	return f.Run(ctx, client, os.Stdout)
}
