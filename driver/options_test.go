package driver_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

func TestNewValidation(t *testing.T) {
	disc := device.StaticDiscoverer{Inv: testInventory(1)}
	ok := []driver.Option{driver.WithDiscoverer(disc), driver.WithPreparer(envPreparer{}), driver.WithRESTConfig(&rest.Config{}), driver.WithNodeName("n")}
	with := func(extra ...driver.Option) []driver.Option {
		return append(append([]driver.Option{}, ok...), extra...)
	}
	tests := []struct {
		name    string
		driver  string
		opts    []driver.Option
		wantErr string
	}{
		{name: "valid", driver: "gpu.example.com", opts: ok},
		{name: "bad name", driver: "GPU_example", opts: ok, wantErr: `name "GPU_example"`},
		{name: "no discoverer", driver: "a.b", opts: ok[1:], wantErr: "WithDiscoverer is required"},
		{name: "no preparer", driver: "a.b", opts: []driver.Option{ok[0], ok[2], ok[3]}, wantErr: "WithPreparer is required"},
		{name: "no client", driver: "a.b", opts: []driver.Option{ok[0], ok[1], ok[3]}, wantErr: "WithKubeClient or WithRESTConfig is required"},
		{name: "no node", driver: "a.b", opts: ok[:3], wantErr: "WithNodeName is required"},
		{name: "nil discoverer", driver: "a.b", opts: with(driver.WithDiscoverer(nil)), wantErr: "WithDiscoverer: nil discoverer"},
		{name: "empty node", driver: "a.b", opts: with(driver.WithNodeName("")), wantErr: "WithNodeName: empty node name"},
		{name: "short health timeout", driver: "a.b", opts: with(driver.WithHealthTimeout(1)), wantErr: "WithHealthTimeout"},
		{name: "empty rolling update uid", driver: "a.b", opts: with(driver.WithRollingUpdate("")), wantErr: "WithRollingUpdate: empty pod UID"},
		{name: "empty rolling update owner", driver: "a.b",
			opts: with(driver.WithRollingUpdateOwner("")), wantErr: "WithRollingUpdateOwner: empty owner"},
		{name: "CDI kind without class", driver: "a.b", opts: with(driver.WithCDIKind("acme.example.com")), wantErr: "WithCDIKind: CDI kind \"acme.example.com\": must be <vendor>/<class>"},
		{name: "bad CDI class", driver: "a.b", opts: with(driver.WithCDIKind("acme.example.com/-fpga")), wantErr: "WithCDIKind"},
		{name: "zero housekeeping interval", driver: "a.b", opts: with(driver.WithHousekeepingInterval(0)), wantErr: "WithHousekeepingInterval"},
		{name: "zero resync interval", driver: "a.b", opts: with(driver.WithResyncInterval(0)), wantErr: "WithResyncInterval"},
		{name: "empty lock dir", driver: "a.b", opts: with(driver.WithLockDir("")), wantErr: "WithLockDir: empty path"},
		{name: "helper nil option", driver: "a.b", opts: with(driver.WithHelperOptions(nil)), wantErr: "WithHelperOptions: nil option"},
		{name: "helper options", driver: "a.b", opts: with(driver.WithHelperOptions(kubeletplugin.GRPCVerbosity(2), kubeletplugin.PluginSocket("x.sock"), rollingUpdate()))},
		{name: "typed helper knobs", driver: "a.b", opts: with(driver.WithGRPCVerbosity(2), driver.WithKubeletAPIVersions(true, false), driver.WithHealthService(false, true, true), driver.WithRegistrarSocketFilename("r.sock"))},
		{name: "no kubelet API version", driver: "a.b", opts: with(driver.WithKubeletAPIVersions(false, false)), wantErr: "WithKubeletAPIVersions: no version left"},
		{name: "health service without versions", driver: "a.b", opts: with(driver.WithHealthService(true, false, false)), wantErr: "WithHealthService"},
		{name: "registrar socket path", driver: "a.b", opts: with(driver.WithRegistrarSocketFilename("a/b.sock")), wantErr: "not a file name"},
		{name: "registrar socket with rolling update", driver: "a.b", opts: with(driver.WithRegistrarSocketFilename("r.sock"), driver.WithRollingUpdate("pod")), wantErr: "mutually exclusive"},
		{name: "nil interceptor", driver: "a.b", opts: with(driver.WithGRPCInterceptor(nil)), wantErr: "WithGRPCInterceptor: nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := driver.New(tc.driver, tc.opts...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// rollingUpdate makes a helper option in a function of its own, which
// the compiler may or may not inline.
//
//go:noinline
func rollingUpdate() kubeletplugin.Option { return kubeletplugin.RollingUpdate("pod") }

// TestRunRefusesNetworkPools: a pool for other nodes fails Run before it
// serves, with an error that says where such pools belong, instead of an
// API server rejection on every publish.
func TestRunRefusesNetworkPools(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for name, pool := range map[string]device.Pool{
		"all nodes": {Name: "fabric", AllNodes: true, Devices: []*device.Device{device.New("nic-0")}},
		"node selector": {Name: "rack-1", Devices: []*device.Device{device.New("fpga-0")}, NodeSelector: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"1"}}}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			inv := &device.Inventory{Driver: testDriver, Pools: []device.Pool{{Name: "node-a", Devices: []*device.Device{device.New("dev-0")}}, pool}}
			d, err := driver.New(testDriver,
				driver.WithDiscoverer(device.StaticDiscoverer{Inv: inv}),
				driver.WithPreparer(envPreparer{}),
				// Nothing listens there: Run must fail before it talks
				// to an API server.
				driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:1"}),
				driver.WithNodeName("node-a"),
				driver.WithRegistrarDir(filepath.Join(dir, "registry")),
				driver.WithPluginDataDir(filepath.Join(dir, "plugin")),
				driver.WithCDIDir(filepath.Join(dir, "cdi")))
			if err != nil {
				t.Fatal(err)
			}
			err = d.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pool %q has a NodeSelector or AllNodes", pool.Name)) || !strings.Contains(err.Error(), "resourceslice.StartController") {
				t.Errorf("Run = %v, want the network-attached pool named and the way to publish it", err)
			}
		})
	}
}
