package defrag_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/mig/defrag"
	pdefrag "github.com/drakit/drakit/partition/defrag"
)

// The controller of a cluster's dynamic MIG GPUs, as the NVIDIA chart's
// Deployment runs it: in the cluster, for the reference driver's
// devices, at most two evictions per waiting pod. The options are
// partition/defrag's; with pdefrag.WithDryRun it would only print its
// plans.
func ExampleNew() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	c, err := defrag.New(client, "gpu.nvidia.drakit.dev",
		pdefrag.WithMaxMoves(2), pdefrag.WithInterval(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_ = c.Run(ctx)
}

// Options are checked when the controller is made.
func ExampleNew_invalidOption() {
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:6443"})
	_, err := defrag.New(client, "gpu.nvidia.drakit.dev", pdefrag.WithMaxMoves(9))
	fmt.Println(err)
	// Output: new defrag controller: max moves 9: must be between 1 and 8
}
