package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/conformance"
)

func TestParseConformanceFlags(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantErr   string
		wantStart []string
		wantSkip  []string
		wantGates map[string]bool
	}{
		{name: "no driver", args: []string{"--registration", "/r"}, wantErr: "--driver is required"},
		{name: "no registration", args: []string{"--driver", "d.example.com"}, wantErr: "--registration is required"},
		{name: "bad path map", args: []string{"--driver", "d", "--registration", "/r", "--path-map", "/a"}, wantErr: "want FROM=TO"},
		{name: "both start forms", args: []string{"--driver", "d", "--registration", "/r", "--start", "x", "--", "y"}, wantErr: "not both"},
		{name: "start after --", args: []string{"--driver", "d", "--registration", "/r", "--skip", "restart,health", "--skip", "robust.garbage-names", "--", "drv", "-v", "2"},
			wantStart: []string{"drv", "-v", "2"}, wantSkip: []string{"restart", "health", "robust.garbage-names"}},
		{name: "cluster without kubeconfig", args: []string{"--cluster", "--driver", "d", "--node", "n", "--image", "busybox"}, wantErr: "needs --kubeconfig"},
		{name: "cluster without node", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--image", "busybox"}, wantErr: "needs --node"},
		{name: "cluster without image", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n"}, wantErr: "needs --image"},
		{name: "cluster with a driver command", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n", "--image", "b", "--", "drv"}, wantErr: "give no driver command"},
		{name: "cluster with half a driver pod", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n", "--image", "b", "--driver-namespace", "x"}, wantErr: "together"},
		{name: "cluster bad pull policy", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n", "--image", "b", "--image-pull-policy", "Sometimes"}, wantErr: "want Never"},
		{name: "cluster", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n", "--image", "b"}, wantStart: []string{}},
		{name: "cluster with a restart command", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n", "--image", "b", "--restart-command", "kill -9 $(pidof drv); drv &"}, wantStart: []string{}},
		{name: "cluster with two ways to restart", args: []string{"--cluster", "--driver", "d", "--kubeconfig", "k", "--node", "n", "--image", "b", "--driver-namespace", "x", "--driver-pod-selector", "app=d", "--restart-command", "true"}, wantErr: "not both"},
		{name: "bad feature gate", args: []string{"--driver", "d", "--registration", "/r", "--feature-gates", "DRAListTypeAttributes"}, wantErr: "want NAME=true"},
		{name: "feature gates", args: []string{"--driver", "d", "--registration", "/r", "--feature-gates", "DRAListTypeAttributes=true, Other=false"},
			wantStart: []string{}, wantGates: map[string]bool{"DRAListTypeAttributes": true, "Other": false}},
		{name: "start flag", args: []string{"--driver", "d", "--registration", "/r", "--start", "drv  --x=1"}, wantStart: []string{"drv", "--x=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseConformanceFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errUsage) {
					t.Fatalf("got %v, want usage error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStart, f.start); diff != "" {
				t.Errorf("start (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSkip, []string(f.skip)); diff != "" {
				t.Errorf("skip (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantGates, f.featureGates); diff != "" {
				t.Errorf("feature gates (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConformanceHelp: --help says what the exit status means, what
// --path-map translates and how long the health checks wait.
func TestConformanceHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseConformanceFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{
		"Exit status: 0 when every MUST check passed",
		"--path-map FROM=TO translates the paths the driver reports about itself",
		"health.refresh waits",
		"-feature-gates",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestConformanceHelpModes: the help says what each mode's driver
// arguments do where that mode is described: arguments after -- start
// the driver in socket mode only; cluster mode restarts one with its pod
// or --restart-command.
func TestConformanceHelpModes(t *testing.T) {
	var out strings.Builder
	if _, err := parseConformanceFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	socket, cluster, gates := strings.Index(help, "Socket mode (the default)"), strings.Index(help, "Cluster mode (--cluster)"), strings.Index(help, "Feature gates:")
	if socket < 0 || cluster < socket || gates < cluster {
		t.Fatalf("--help lacks a socket mode, a cluster mode and a feature gates section, in that order:\n%s", help)
	}
	if i := strings.Index(help, "arguments after -- (or --start) start it"); i < socket || i > cluster {
		t.Errorf("the driver command is not described under socket mode")
	}
	clusterPart := help[cluster:gates]
	for _, want := range []string{"--restart-command", "--driver-pod-selector", "restart checks skip, and the verdict", "takes no driver command"} {
		if !strings.Contains(clusterPart, want) {
			t.Errorf("cluster mode's help lacks %q", want)
		}
	}
	if !strings.Contains(help[gates:], "Without --kubeconfig the local control plane runs with them") {
		t.Errorf("the help does not say the local control plane gets the feature gates")
	}
}

// TestConformanceClusterHelp: --cluster --help lists every check of
// cluster mode with its level.
func TestConformanceClusterHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseConformanceFlags([]string{"--cluster", "--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--cluster --help: %v", err)
	}
	for _, c := range conformance.ClusterChecks() {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.ID) + ` +` + string(c.Level) + ` `).MatchString(out.String()) {
			t.Errorf("--cluster --help does not list %s (%s)", c.ID, c.Level)
		}
	}
}

func TestReadObjects(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	const doc = `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two}
spec:
  spec:
    devices:
      requests: [{name: pair, exactly: {deviceClassName: gpu, count: 2}}]
`
	if err := os.WriteFile(good, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	classes, claims, err := readObjects(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(classes) != 1 || classes[0].Name != "gpu" || len(claims) != 1 || claims[0].Devices.Requests[0].Exactly.Count != 2 {
		t.Errorf("got classes %v claims %v", classes, claims)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readObjects(bad); err == nil || !strings.Contains(err.Error(), `kind "Pod"`) {
		t.Errorf("got %v, want an error naming kind Pod", err)
	}
}

// TestConformanceFeatureGates: without --kubeconfig, --feature-gates
// reaches the suite's own control plane. A driver that publishes a
// list-valued pcieRoot passes every check with DRAListTypeAttributes=true;
// without the gate the API server refuses its slices, and
// slices.published says so with the API server's message (not "no
// ResourceSlice" after the publish timeout).
func TestConformanceFeatureGates(t *testing.T) {
	// Parallel: shares nothing with the package's other tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two control planes; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "conformance-testdriver")
	build := exec.Command("go", "build", "-o", bin, "github.com/drakit/drakit/conformance/internal/testdriver/conformance-testdriver")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test driver: %v\n%s", err, out)
	}
	conformanceRun := func(t *testing.T, flags ...string) (int, string) {
		// Unix socket paths are limited to 108 bytes: keep the folder short.
		dir, err := os.MkdirTemp("", "cfg")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		const driver = "gates.conformance.drakit.dev"
		reg, plugins, cdi := filepath.Join(dir, "reg"), filepath.Join(dir, "p"), filepath.Join(dir, "cdi")
		args := append([]string{"conformance", "--driver", driver, "--registration", reg, "--cdi-dir", cdi,
			"--driver-log", filepath.Join(dir, "driver.log"), "--skip", "restart"}, flags...)
		args = append(args, "--", bin, "-driver-name", driver, "-registrar-dir", reg, "-plugin-dir", plugins, "-cdi-dir", cdi,
			"-health-timeout", "2s", "-pcie-root-list")
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, &stdout, &stderr)
		if t.Failed() || code != 0 {
			t.Logf("stderr (tail):\n%s", lastBytes(stderr.String(), 3000))
		}
		return code, stdout.String()
	}
	t.Run("gate on", func(t *testing.T) {
		code, out := conformanceRun(t, "--feature-gates", "DRAListTypeAttributes=true")
		if code != 0 || !strings.Contains(out, "PASSED") {
			t.Errorf("exit %d, want 0 and PASSED:\n%s", code, out)
		}
		if !regexp.MustCompile(`slices\.standard-attributes\s+MUST\s+pass`).MatchString(out) {
			t.Errorf("slices.standard-attributes did not pass:\n%s", out)
		}
	})
	t.Run("gate off", func(t *testing.T) {
		code, out := conformanceRun(t, "--only", "slices.published")
		if code == 0 {
			t.Errorf("exit 0 for slices the API server refuses:\n%s", out)
		}
		for _, want := range []string{"the API server refuses the driver's ResourceSlices", "pcieRoot", "--feature-gates"} {
			if !strings.Contains(out, want) {
				t.Errorf("the report does not say %q:\n%s", want, out)
			}
		}
	})
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
