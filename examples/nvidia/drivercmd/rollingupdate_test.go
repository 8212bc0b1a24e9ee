package drivercmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

// TestRollingUpdateNeedsOwner: a driver told its pod's UID (a rolling
// update) without the DaemonSet it belongs to is refused at start, naming
// the flag: its folders' locks could not tell its other pod from a second
// release of the driver on the node.
func TestRollingUpdateNeedsOwner(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	err := drivercmd.Run([]string{"-node-name=node-1", "-kubeconfig=" + kubeconfig,
		"-pod-uid=pod-1", "-nvml-sim=dgx-h200"})
	if err == nil || !strings.Contains(err.Error(), "--rolling-update-owner") {
		t.Errorf("-pod-uid without -rolling-update-owner: %v, want a refusal naming the flag", err)
	}
}
