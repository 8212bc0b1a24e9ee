package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/internal/cluster"
)

// TestToolsModule checks that the embedded module pins the Kubernetes
// version the cluster runs and that every component it builds resolves in
// it (a stale go.sum or a missing requirement fails here, not on a fresh
// machine 20 minutes into a setup).
func TestToolsModule(t *testing.T) {
	dir := t.TempDir()
	if code := run(context.Background(), []string{"setup", "--write-tools-module", dir}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
		t.Fatalf("drakit setup --write-tools-module: exit %d", code)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "require k8s.io/kubernetes " + cluster.Version + "\n"; !strings.Contains(string(mod), want) {
		t.Errorf("tools module does not %q (cluster.Version)", strings.TrimSpace(want))
	}
	if testing.Short() {
		return
	}
	// The setup builds these; listing their dependencies needs every
	// module in go.sum (from the module cache the setup filled, or the
	// proxy).
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}",
		"go.etcd.io/etcd/server/v3", "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-scheduler",
		"k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kubectl")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("the tools module does not resolve its commands: %v\n%s", err, out)
	}
}

// TestSetupCached runs drakit setup where everything is installed: it
// checks and changes nothing.
func TestSetupCached(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the setup script; skipped with -short")
	}
	if _, err := os.Stat(filepath.Join(cluster.BinDir(), "kube-apiserver")); err != nil {
		t.Skip("the cluster binaries are not installed; this test only checks an installed cache")
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"setup"}, &stdout, &stderr); code != 0 {
		t.Fatalf("drakit setup: exit %d\n%s", code, stderr.String())
	}
	for _, want := range []string{"kube-apiserver: cached", "containerd: cached", "helm: cached", "ready in"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("setup output lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestHelmInstalled checks the helm binary setup built: the release
// cluster.HelmVersion, as `helm version` reports it.
func TestHelmInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("checks the installed cache")
	}
	if _, err := os.Stat(filepath.Join(cluster.BinDir(), "kube-apiserver")); err != nil {
		t.Skip("the cluster binaries are not installed; this test only checks an installed cache")
	}
	out, err := exec.Command(cluster.HelmBinary(), "version", "--template", "{{.Version}}").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s (drakit setup builds it)", cluster.HelmBinary(), err, out)
	}
	if got := strings.TrimSpace(string(out)); got != cluster.HelmVersion {
		t.Errorf("helm reports version %q, want %s", got, cluster.HelmVersion)
	}
}

func TestSetupUsage(t *testing.T) {
	if code := run(context.Background(), []string{"setup", "extra"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("drakit setup extra: exit %d, want 2", code)
	}
}

// TestPoolCachePatchApplies checks that setup/poolcache.patch (the opt-in
// kube-scheduler-poolcache) still applies to the
// k8s.io/dynamic-resource-allocation the tools module requires: a version
// bump that breaks it fails here, without building anything.
func TestPoolCachePatchApplies(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the tools module's k8s.io/dynamic-resource-allocation from the module cache")
	}
	if _, err := exec.LookPath("patch"); err != nil {
		t.Skip("patch is not installed")
	}
	dir := t.TempDir()
	if err := writeToolsModule(dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/dynamic-resource-allocation")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download k8s.io/dynamic-resource-allocation: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: no folder in %s (%v)", out, err)
	}
	p := exec.Command("patch", "--dry-run", "-p1", "-d", mod.Dir)
	p.Stdin = bytes.NewReader(poolCachePatch)
	if out, err := p.CombinedOutput(); err != nil {
		t.Fatalf("poolcache.patch does not apply to %s: %v\n%s", mod.Dir, err, out)
	}
}
