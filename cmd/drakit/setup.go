package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/drakit/drakit/internal/cluster"
)

// The setup script and the module that pins the cluster's components. They
// are embedded so that "go run github.com/drakit/drakit/cmd/drakit setup"
// works from any module that requires drakit, without a checkout.
var (
	//go:embed setup/setup.sh
	setupScript []byte
	//go:embed setup/tools.mod
	toolsMod []byte
	//go:embed setup/tools.sum
	toolsSum []byte
	//go:embed setup/tools.go.txt
	toolsGo []byte
	//go:embed setup/poolcache.sh
	poolCacheScript []byte
	//go:embed setup/poolcache.patch
	poolCachePatch []byte
)

// poolCacheScheduler is the opt-in kube-scheduler with poolcache.patch
// ("drakit setup -scheduler-pool-cache"), in cluster.BinDir() beside the
// default one, which it never replaces.
const poolCacheScheduler = "kube-scheduler-poolcache"

func init() {
	register(command{
		name:    "setup",
		summary: "install what the local cluster needs (binaries, Helm, images, Debian packages) into the cache",
		run:     runSetup,
	})
}

func runSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	writeTools := fs.String("write-tools-module", "", "only write the module that pins the components' versions to `DIR` (to change a version)")
	poolCache := fs.Bool("scheduler-pool-cache", false, "only build "+poolCacheScheduler+": kube-scheduler with a prototype cache of the pools GatherPools converts and validates (setup/poolcache.patch on a copy of k8s.io/dynamic-resource-allocation in the cache), for \"drakit bench sched -pool-cache\"; never part of the default setup")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: drakit setup [flags]\n\n"+
			"Installs, once and idempotently, what drakit's local cluster (drakit cluster, package testenv)\n"+
			"needs: Kubernetes %s components and containerd built from the Go module proxy into\n"+
			"%s (and Helm %s, for charts), the pause and busybox images into %s, and the node's Debian\n"+
			"packages (as root). Cold builds take 10-20 minutes on 2 cores. $DRAKIT_CACHE moves the cache.\n\nFlags:\n",
			cluster.Version, cluster.BinDir(), cluster.HelmVersion, cluster.ImageDir())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	if *writeTools != "" {
		return writeToolsModule(*writeTools)
	}
	work, err := os.MkdirTemp("", "drakit-setup-")
	if err != nil {
		return fmt.Errorf("create setup folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	tools := filepath.Join(work, "tools")
	if err := writeToolsModule(tools); err != nil {
		return err
	}
	script := filepath.Join(work, "setup.sh")
	if err := os.WriteFile(script, setupScript, 0o700); err != nil {
		return fmt.Errorf("write setup script: %w", err)
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "K8S_VERSION="+cluster.Version, "BIN="+cluster.BinDir(), "IMAGES="+cluster.ImageDir(), "TOOLS="+tools, "HELM_VERSION="+cluster.HelmVersion)
	if *poolCache {
		patch := filepath.Join(work, "poolcache.patch")
		if err := os.WriteFile(script, poolCacheScript, 0o700); err != nil {
			return fmt.Errorf("write setup script: %w", err)
		}
		if err := os.WriteFile(patch, poolCachePatch, 0o644); err != nil {
			return fmt.Errorf("write setup patch: %w", err)
		}
		cmd.Env = append(cmd.Env, "SRC="+filepath.Join(filepath.Dir(cluster.BinDir()), "src"), "PATCH="+patch)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}

// writeToolsModule writes the tools module (go.mod, go.sum, tools.go) to dir.
func writeToolsModule(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write tools module: %w", err)
	}
	for name, data := range map[string][]byte{"go.mod": toolsMod, "go.sum": toolsSum, "tools.go": toolsGo} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("write tools module: %w", err)
		}
	}
	return nil
}
