package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/drakit/drakit/mig/defrag"
	pdefrag "github.com/drakit/drakit/partition/defrag"
)

// migDefragController runs package defrag's controller against the
// cluster of a kubeconfig: "drakit mig defrag-controller".
func migDefragController(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mig defrag-controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: drakit mig defrag-controller [flags]

Moves one or two pods that opted in (annotation `+defrag.AnnotationDefrag+`: `+pdefrag.AllowValue+`)
off a dynamic MIG GPU when a pod waits for a large profile that only
fragmentation blocks: it checks their PodDisruptionBudgets, evicts them
through the Eviction API, taints the freed region (DeviceTaintRules) so that
their replacements go elsewhere, and allocates the waiting claim the freed
device. Every decision is an Event on the pods involved. -dry-run prints
the plan and changes nothing.`)
		fs.PrintDefaults()
	}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, then ~/.kube/config)")
	var f defrag.Flags
	f.Register(fs, "gpu.nvidia.drakit.dev")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	client, err := kubeClient(*kubeconfig)
	if err != nil {
		return err
	}
	return f.Run(ctx, client, stdout)
}
