package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/drakit/drakit/internal/cluster"
)

func init() {
	register(command{
		name:    "cluster",
		summary: "run a local Kubernetes 1.37 cluster (up, down, status)",
		run:     runCluster,
	})
}

func defaultClusterDir() string {
	if d := os.Getenv("DRAKIT_CLUSTER_DIR"); d != "" {
		return d
	}
	return filepath.Join(cluster.CacheDir(), "cluster")
}

func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "usage: drakit cluster up|down|status [flags]"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	fs := flag.NewFlagSet("cluster "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", defaultClusterDir(), "folder of the cluster's state (env DRAKIT_CLUSTER_DIR)")
	node := fs.Bool("node", true, "up: run a real node (kubelet, containerd, runc); false: control plane only")
	gang := fs.Bool("gang-scheduling", false, "up: serve the Workload/PodGroup APIs and enable gang and topology-aware scheduling")
	fakeNodes := fs.Int("fake-nodes", 0, "up: also create this many fake nodes (no kubelet) named fake-0, fake-1, ...")
	schedQPS := fs.Int("scheduler-qps", 0, "up: kube-scheduler's client QPS and burst (0: the scheduler's defaults, 50 and 100; upstream's scheduler_perf uses 5000)")
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stdout, "%s\n\n  up      start a local cluster (control plane, a real node unless -node=false)\n  down    stop it and undo its host changes\n  status  show its components\n\nflags:\n", usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "up":
		if *schedQPS < 0 {
			return fmt.Errorf("%w: -scheduler-qps %d is negative", errUsage, *schedQPS)
		}
		return clusterUp(ctx, *dir, *node, *gang, *fakeNodes, *schedQPS, stdout, stderr)
	case "down":
		if err := cluster.StopDir(*dir, stderr); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cluster in %s stopped\n", *dir)
		return nil
	case "status":
		st, err := cluster.ReadStatus(*dir)
		if errors.Is(err, cluster.ErrNoCluster) {
			fmt.Fprintf(stdout, "no cluster in %s (start one with: drakit cluster up)\n", *dir)
			return nil
		}
		if err != nil {
			return err
		}
		printStatus(stdout, st)
		if !st.Running() {
			return errors.New("cluster is not fully running")
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown cluster command %q; %s", errUsage, args[0], usage)
	}
}

func clusterUp(ctx context.Context, dir string, node, gang bool, fakeNodes, schedQPS int, stdout, stderr io.Writer) error {
	if st, err := cluster.ReadStatus(dir); err == nil && st.Running() {
		fmt.Fprintf(stdout, "a cluster is already running in %s\n", dir)
		printUsage(stdout, st.Kubeconfig, st.Node, dir)
		return nil
	}
	opts := []cluster.Option{cluster.WithDir(dir), cluster.WithLogWriter(stderr)}
	if node {
		opts = append(opts, cluster.WithNode())
	}
	if gang {
		opts = append(opts, cluster.WithGangScheduling())
	}
	if schedQPS > 0 {
		opts = append(opts, cluster.WithSchedulerClient(float32(schedQPS), schedQPS))
	}
	t0 := time.Now()
	c, err := cluster.Start(ctx, opts...)
	if err != nil {
		return err
	}
	for i := range fakeNodes {
		if err := c.AddFakeNode(ctx, fmt.Sprintf("fake-%d", i), nil, nil); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "cluster up in %s\n", time.Since(t0).Round(10*time.Millisecond))
	printUsage(stdout, c.Kubeconfig, c.NodeName, dir)
	if c.NodeName != "" {
		fmt.Fprintf(stdout, "  plugin registry: %s\n  plugins folder:  %s\n  CDI folder:      %s\n  images:          %s, %s (imagePullPolicy: Never, hostNetwork: true)\n",
			c.PluginRegistryDir, c.PluginsDir, c.CDIDir, c.Images.Busybox, c.Images.Pause)
	}
	return nil
}

func printUsage(w io.Writer, kubeconfig, node, dir string) {
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n  %s get nodes\n", kubeconfig, filepath.Join(cluster.BinDir(), "kubectl"))
	if node != "" {
		fmt.Fprintf(w, "  node: %s\n", node)
	}
	fmt.Fprintf(w, "  logs: %s/logs\n  stop: drakit cluster down --dir %s\n", dir, dir)
}

func printStatus(w io.Writer, st *cluster.Status) {
	fmt.Fprintf(w, "cluster in %s\n  kubeconfig: %s\n", st.Dir, st.Kubeconfig)
	if st.Node != "" {
		fmt.Fprintf(w, "  node: %s\n", st.Node)
	}
	for _, c := range st.Components {
		state := "running"
		if !c.Running {
			state = "NOT RUNNING"
		}
		fmt.Fprintf(w, "  %-24s pid %-7d %s\n", c.Name, c.PID, state)
	}
}
