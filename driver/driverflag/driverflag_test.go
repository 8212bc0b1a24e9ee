package driverflag_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
)

// writeKubeconfig writes a kubeconfig whose only cluster is at server.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// notInCluster makes rest.InClusterConfig fail as it does outside a pod.
func notInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

func TestLoadRESTConfigOrder(t *testing.T) {
	notInCluster(t)
	flagFile := writeKubeconfig(t, "https://flag.example:6443")
	envFile := writeKubeconfig(t, "https://env.example:6443")
	for _, tc := range []struct {
		name, path, env, wantHost string
		wantErr                   error
	}{
		{name: "flag beats $KUBECONFIG", path: flagFile, env: envFile, wantHost: "https://flag.example:6443"},
		{name: "$KUBECONFIG without flag", env: envFile, wantHost: "https://env.example:6443"},
		{name: "$KUBECONFIG list, first file wins", env: envFile + string(os.PathListSeparator) + flagFile, wantHost: "https://env.example:6443"},
		{name: "nothing outside a pod", wantErr: driverflag.ErrNoConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			cfg, err := driverflag.LoadRESTConfig(tc.path)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost {
				t.Errorf("host %q, want %q", cfg.Host, tc.wantHost)
			}
		})
	}
}

func TestLoadRESTConfigInCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	// Outside a pod the service account token is missing: the error must
	// be about the in-cluster config, not ErrNoConfig.
	_, err := driverflag.LoadRESTConfig("")
	if err == nil || errors.Is(err, driverflag.ErrNoConfig) || !strings.Contains(err.Error(), "in-cluster") {
		t.Fatalf("error %v, want an in-cluster config error", err)
	}
}

func TestLoadRESTConfigBadFile(t *testing.T) {
	_, err := driverflag.LoadRESTConfig(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("error %v, want one naming the file", err)
	}
}

// parse registers the flags on a fresh set and parses args.
func parse(t *testing.T, args ...string) *driverflag.Flags {
	t.Helper()
	fs := flag.NewFlagSet("driver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := driverflag.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestOptions(t *testing.T) {
	notInCluster(t)
	t.Setenv("NODE_NAME", "")
	kc := writeKubeconfig(t, "https://flag.example:6443")
	t.Run("node name required", func(t *testing.T) {
		_, err := parse(t, "--kubeconfig", kc).Options()
		if err == nil || !strings.Contains(err.Error(), "--node-name") {
			t.Fatalf("error %v, want one naming --node-name", err)
		}
	})
	t.Run("no client config", func(t *testing.T) {
		t.Setenv("KUBECONFIG", "")
		_, err := parse(t, "--node-name", "n").Options()
		if !errors.Is(err, driverflag.ErrNoConfig) {
			t.Fatalf("error %v, want ErrNoConfig", err)
		}
	})
	t.Run("rolling update owner", func(t *testing.T) {
		f := parse(t, "--node-name", "n", "--kubeconfig", kc, "--pod-uid", "u",
			"--rolling-update-owner", "gpus/nvidia-dra-driver")
		if f.RollingUpdateOwner != "gpus/nvidia-dra-driver" {
			t.Errorf("owner %q, want gpus/nvidia-dra-driver", f.RollingUpdateOwner)
		}
		if _, err := f.Options(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("node name from the environment", func(t *testing.T) {
		t.Setenv("NODE_NAME", "from-env")
		if f := parse(t); f.NodeName != "from-env" {
			t.Errorf("node name %q, want from-env", f.NodeName)
		}
	})
	dir := t.TempDir()
	for _, tc := range []struct {
		name       string
		args       []string
		wantSocket string
	}{
		{"folders reach the driver", []string{"--plugin-data-dir", dir}, filepath.Join(dir, "dra.sock")},
		{"default plugin folder", nil, filepath.Join(driverflag.DefaultPluginDataDir("x.example.com"), "dra.sock")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := parse(t, append([]string{"--node-name", "n", "--kubeconfig", kc}, tc.args...)...).Options()
			if err != nil {
				t.Fatal(err)
			}
			d, err := driver.New("x.example.com", append(opts,
				driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: "x.example.com"}}),
				driver.WithPreparer(nopPreparer{}))...)
			if err != nil {
				t.Fatal(err)
			}
			if d.DRASocket() != tc.wantSocket {
				t.Errorf("socket %s, want %s", d.DRASocket(), tc.wantSocket)
			}
		})
	}
}

// TestHealthTimeoutFlag: --health-timeout reaches the runtime (a value
// below the runtime's floor is refused by driver.New, naming the option)
// and a negative one is refused by Options, naming the flag.
func TestHealthTimeoutFlag(t *testing.T) {
	notInCluster(t)
	kc := writeKubeconfig(t, "https://flag.example:6443")
	newDriver := func(args ...string) error {
		opts, err := parse(t, append([]string{"--node-name", "n", "--kubeconfig", kc}, args...)...).Options()
		if err != nil {
			return err
		}
		_, err = driver.New("x.example.com", append(opts,
			driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: "x.example.com"}}),
			driver.WithPreparer(nopPreparer{}))...)
		return err
	}
	if err := newDriver("--health-timeout", "45s"); err != nil {
		t.Errorf("--health-timeout 45s: %v", err)
	}
	if err := newDriver("--health-timeout", "1s"); err == nil || !strings.Contains(err.Error(), "WithHealthTimeout") {
		t.Errorf("--health-timeout 1s: error %v, want the runtime's WithHealthTimeout refusal", err)
	}
	if err := newDriver("--health-timeout", "-5s"); err == nil || !strings.Contains(err.Error(), "--health-timeout") {
		t.Errorf("--health-timeout -5s: error %v, want one naming --health-timeout", err)
	}
}

func TestRegisterKeepsExistingKlogFlags(t *testing.T) {
	fs := flag.NewFlagSet("driver", flag.ContinueOnError)
	fs.Int("v", 0, "the program's own verbosity flag")
	driverflag.Register(fs) // must not panic with "flag redefined: v"
	if fs.Lookup("node-name") == nil {
		t.Error("no --node-name flag")
	}
}

type nopPreparer struct{}

func (nopPreparer) PrepareDevice(context.Context, driver.Claim, driver.AllocatedDevice) (driver.PreparedDevice, error) {
	return driver.PreparedDevice{}, nil
}

func (nopPreparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil
}

func TestClientLimits(t *testing.T) {
	notInCluster(t)
	kc := writeKubeconfig(t, "https://flag.example:6443")
	for _, tc := range []struct {
		name      string
		args      []string
		wantQPS   float32
		wantBurst int
		wantErr   string
	}{
		{"defaults", nil, driver.DefaultQPS, driver.DefaultBurst, ""},
		{"raised", []string{"--kube-api-qps", "1000", "--kube-api-burst", "2000"}, 1000, 2000, ""},
		{"no limit", []string{"--kube-api-qps", "-1"}, -1, driver.DefaultBurst, ""},
		{"zero qps is refused", []string{"--kube-api-qps", "0"}, 0, 0, "--kube-api-qps"},
		{"zero burst is refused", []string{"--kube-api-burst", "0"}, 0, 0, "--kube-api-burst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, append([]string{"--kubeconfig", kc}, tc.args...)...).RESTConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tc.wantQPS || cfg.Burst != tc.wantBurst {
				t.Errorf("QPS %v burst %d, want %v and %d", cfg.QPS, cfg.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}
