package defrag

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/drakit/drakit/mig"
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
}

// Register adds the flags to fs with driver as the default of -driver.
func (f *Flags) Register(fs *flag.FlagSet, driver string) {
	fs.StringVar(&f.Driver, "driver", driver, "the DRA driver whose dynamic MIG devices (mig's counter model) are defragmented")
	fs.IntVar(&f.MaxMoves, "max-moves", mig.DefaultMaxMoves, "the most pods evicted for one waiting pod (1-8)")
	fs.IntVar(&f.MinCompute, "min-compute", DefaultMinCompute, "the least compute slices of a MIG profile whose waiting pods trigger a move (3: 3g, 4g and 7g)")
	fs.DurationVar(&f.Interval, "interval", DefaultInterval, "how often the cluster is looked at")
	fs.DurationVar(&f.Timeout, "timeout", DefaultTimeout, "how long an operation may take from its evictions until the waiting pod is bound before its taints are removed")
	fs.BoolVar(&f.DryRun, "dry-run", false, "print what would be done (evictions, the freed placement, the claim's device) and change nothing")
	fs.BoolVar(&f.Once, "once", false, "look at the cluster once and exit")
}

// Run makes the controller the flags describe and runs it (one Step with
// Once) until ctx ends; a dry run prints to out.
func (f *Flags) Run(ctx context.Context, client kubernetes.Interface, out io.Writer) error {
	opts := []Option{WithMaxMoves(f.MaxMoves), WithMinCompute(f.MinCompute), WithInterval(f.Interval), WithTimeout(f.Timeout)}
	if f.DryRun {
		opts = append(opts, WithDryRun(out))
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
