package defrag

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	pdefrag "github.com/drakit/drakit/partition/defrag"
	pplan "github.com/drakit/drakit/partition/plan"
)

// Flags are a controller's command-line flags, the same in `drakit mig
// defrag-controller` and in the NVIDIA driver image's
// `nvidia-dra-driver defrag-controller`.
type Flags struct {
	// Driver is the DRA driver whose dynamic MIG devices are defragmented.
	Driver string
	// MaxMoves, MinCompute, Interval and Timeout set WithMaxMoves,
	// WithMinCompute, WithInterval and WithTimeout.
	MaxMoves   int
	MinCompute int
	Interval   time.Duration
	Timeout    time.Duration
	// DryRun prints what the controller would do and changes nothing.
	DryRun bool
	// Once takes one Step and returns instead of running until stopped.
	Once bool
	// Namespaces (comma-separated) sets WithNamespaces; empty, every
	// namespace.
	Namespaces string
	// EvictionsPerHour and EvictionsPerNodePerHour set
	// WithEvictionBudget, Backoff WithBackoff.
	EvictionsPerHour        int
	EvictionsPerNodePerHour int
	Backoff                 time.Duration
	// LeaderElect, LeaseNamespace and LeaseName set WithLeaderElection
	// (the namespace defaults to $POD_NAMESPACE).
	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string
	// OwnerClusterRole sets WithOwner.
	OwnerClusterRole string
	// LayoutNamespace, with ClassProfile (the driver's classes: set by
	// the program, not a flag), sets WithLayoutLedgers.
	LayoutNamespace string
	ClassProfile    func(class string) (string, bool)
}

// Register adds the flags to fs with driver as the default of -driver.
func (f *Flags) Register(fs *flag.FlagSet, driver string) {
	fs.StringVar(&f.Driver, "driver", driver, "the DRA driver whose dynamic MIG devices (mig's counter model) are defragmented")
	fs.IntVar(&f.MaxMoves, "max-moves", pplan.DefaultMaxMoves, "the most pods evicted for one waiting pod (1-8)")
	fs.IntVar(&f.MinCompute, "min-compute", pdefrag.DefaultMinCompute, "the least compute slices of a MIG profile whose waiting pods trigger a move (3: 3g, 4g and 7g)")
	fs.DurationVar(&f.Interval, "interval", pdefrag.DefaultInterval, "how often the cluster is looked at")
	fs.DurationVar(&f.Timeout, "timeout", pdefrag.DefaultTimeout, "how long an operation may take from its evictions until the waiting pod is bound before its taints are removed")
	fs.BoolVar(&f.DryRun, "dry-run", false, "print what would be done (evictions, the freed placement, the claim's device) and change nothing")
	fs.BoolVar(&f.Once, "once", false, "look at the cluster once and exit")
	fs.StringVar(&f.Namespaces, "namespaces", "", "comma-separated namespaces whose opted-in pods may be evicted (default: every namespace)")
	fs.IntVar(&f.EvictionsPerHour, "max-evictions-per-hour", pdefrag.DefaultEvictionsPerHour, "the most pods evicted in any hour, cluster-wide")
	fs.IntVar(&f.EvictionsPerNodePerHour, "max-evictions-per-node-per-hour", pdefrag.DefaultEvictionsPerNodePerHour, "the most pods evicted from one node in any hour")
	fs.DurationVar(&f.Backoff, "backoff", pdefrag.DefaultBackoff, "how long a waiting pod whose operation was abandoned waits before another")
	fs.BoolVar(&f.LeaderElect, "leader-elect", false, "step only while holding a coordination.k8s.io Lease (run several replicas safely)")
	fs.StringVar(&f.LeaseNamespace, "leader-elect-namespace", "", "the Lease's namespace (default $POD_NAMESPACE)")
	fs.StringVar(&f.LeaseName, "leader-elect-name", "mig-defrag", "the Lease's name")
	fs.StringVar(&f.OwnerClusterRole, "owner-cluster-role", "", "the ClusterRole that owns the controller's DeviceTaintRules: deleting it (uninstall) deletes them")
	fs.StringVar(&f.LayoutNamespace, "layout-namespace", "", "the driver publishes layouts, with its layout ledgers in this namespace: act on the layout planner's reserved cards")
}

// Options are the options the flags describe.
func (f *Flags) Options() ([]pdefrag.Option, error) {
	opts := []pdefrag.Option{pdefrag.WithMaxMoves(f.MaxMoves),
		pdefrag.WithMinCompute(f.MinCompute), pdefrag.WithInterval(f.Interval),
		pdefrag.WithTimeout(f.Timeout),
		pdefrag.WithEvictionBudget(f.EvictionsPerHour, f.EvictionsPerNodePerHour),
		pdefrag.WithBackoff(f.Backoff)}
	if f.Namespaces != "" {
		var names []string
		for _, ns := range strings.Split(f.Namespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				names = append(names, ns)
			}
		}
		opts = append(opts, pdefrag.WithNamespaces(names...))
	}
	if f.LeaderElect {
		ns := f.LeaseNamespace
		if ns == "" {
			ns = os.Getenv("POD_NAMESPACE")
		}
		if ns == "" {
			return nil, errors.New("--leader-elect needs --leader-elect-namespace (or $POD_NAMESPACE)")
		}
		opts = append(opts, pdefrag.WithLeaderElection(ns, f.LeaseName))
	}
	if f.OwnerClusterRole != "" {
		opts = append(opts, pdefrag.WithOwner(f.OwnerClusterRole))
	}
	if f.LayoutNamespace != "" {
		if f.ClassProfile == nil {
			return nil, errors.New("--layout-namespace needs the driver's class mapping (Flags.ClassProfile)")
		}
		opts = append(opts, pdefrag.WithLayoutLedgers(f.LayoutNamespace, f.ClassProfile))
	}
	return opts, nil
}

// Run makes the controller the flags describe and runs it (one Step with
// Once) until ctx ends; a dry run prints to out.
func (f *Flags) Run(ctx context.Context, client kubernetes.Interface, out io.Writer) error {
	opts, err := f.Options()
	if err != nil {
		return err
	}
	if f.DryRun {
		opts = append(opts, pdefrag.WithDryRun(out))
	}
	c, err := New(client, f.Driver, opts...)
	if err != nil {
		return err
	}
	if !f.Once {
		return c.Run(ctx)
	}
	op, err := c.Step(ctx)
	if err != nil {
		return err
	}
	if op == nil && f.DryRun {
		fmt.Fprintln(out, "no pod waits for a MIG placement that moving opted-in pods would free")
	}
	return nil
}
