package drivercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/driver/driverflag"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// WebhookCommand is the first argument that makes Run serve the driver's
// admission webhook (package admission, with nvdriver.ConfigScheme): what
// the chart's webhook Deployment runs, from the driver's own image. It
// refuses a ResourceClaim or ResourceClaimTemplate whose GpuConfig is bad
// with the message prepare would give and, with --layout-allocations (the
// chart's migPublication=layout), an allocation of a device that the
// current slice of its one-slice pool no longer lists
// (admission.LayoutGuard). Its flags are admission.Flags', --feature-gates
// and the logging flags.
const WebhookCommand = "webhook"

// ProbeCommand is the first argument that makes Run ask the driver's
// probe socket for /healthz or /readyz (driverflag.Probe) and return its
// answer: the chart's exec probes, which reach this pod's driver also
// while the other pod of a rolling update holds the HTTP port.
const ProbeCommand = "probe"

// runWebhook serves the admission webhook until SIGINT or SIGTERM.
func runWebhook(args []string) error {
	fs := flag.NewFlagSet("nvidia-dra-driver "+WebhookCommand, flag.ExitOnError)
	var wf admission.Flags
	wf.Register(fs)
	if _, err := parseComponent(fs, args); err != nil {
		return err
	}
	v, err := admission.NewValidator(nvdriver.ConfigScheme())
	if err != nil {
		return err
	}
	srv, err := wf.Server(v)
	if err != nil {
		return fmt.Errorf("%s: %w", WebhookCommand, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(klog.NewContext(ctx, klog.Background().WithName("webhook")))
}

// runProbe asks the probe socket for one path.
func runProbe(args []string) error {
	fs := flag.NewFlagSet("nvidia-dra-driver "+ProbeCommand, flag.ContinueOnError)
	socket := fs.String("socket", "", "the driver's --probe-socket")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" || fs.NArg() != 1 {
		return errors.New("usage: nvidia-dra-driver probe --socket=PATH /healthz|/readyz")
	}
	return driverflag.Probe(context.Background(), *socket, fs.Arg(0))
}
