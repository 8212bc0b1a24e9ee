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
	"github.com/drakit/drakit/partition/fleet"
	"github.com/drakit/drakit/partition/ledger"
)

// PlannerCommand is the first argument that makes Run run the fleet's
// layout planner (package partition/fleet) for the driver's MIG layout
// instead of the driver: what the chart's planner Deployment runs, from
// the driver's own image. Its flags: --kubeconfig, --layout-namespace
// (the ledgers'), --lease-name (leader election among replicas; empty:
// none), --aging, --feature-gates and the logging flags.
const PlannerCommand = "planner"

// runPlanner runs the planner until SIGINT or SIGTERM.
func runPlanner(args []string) error {
	fs := flag.NewFlagSet("nvidia-dra-driver "+PlannerCommand, flag.ExitOnError)
	kubeconfig := fs.String(
		"kubeconfig",
		"",
		"kubeconfig of the cluster (default $KUBECONFIG, then the pod's service account)",
	)
	ns := fs.String(
		"layout-namespace",
		os.Getenv(podNamespaceEnv),
		"the namespace of the layout ledgers and of the lease (default $"+podNamespaceEnv+")",
	)
	lease := fs.String(
		"lease-name",
		"",
		"the Lease that elects one planning replica (empty: no election)",
	)
	aging := fs.Duration(
		"aging",
		0,
		"how long a request waits before it is planned before younger ones, whatever their"+
			" sizes (default partition.DefaultAging)",
	)
	if _, err := parseComponent(fs, args); err != nil {
		return err
	}
	if *ns == "" {
		return fmt.Errorf(
			"%s: -layout-namespace (or $%s) is needed",
			PlannerCommand,
			podNamespaceEnv,
		)
	}
	cfg, err := driverflag.LoadRESTConfig(*kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", PlannerCommand, err)
	}
	// One component for the fleet: client-go's default 5 requests/s would
	// queue the ledgers' writes of a burst.
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", PlannerCommand, err)
	}
	store, err := ledger.NewStore(client, *ns, nvdriver.DriverName)
	if err != nil {
		return fmt.Errorf("%s: %w", PlannerCommand, err)
	}
	opts := nvdriver.PlannerOptions()
	if *lease != "" {
		opts = append(opts, fleet.WithLeaderElection(*ns, *lease))
	}
	if *aging > 0 {
		opts = append(opts, fleet.WithAging(*aging))
	}
	p, err := fleet.New(client, store, nvdriver.DriverName, opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", PlannerCommand, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(klog.NewContext(ctx, klog.Background().WithName("planner")))
}
