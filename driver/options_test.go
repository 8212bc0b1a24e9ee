package driver_test

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"

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
		{name: "bad taint key", driver: "a.b", opts: with(driver.WithHealthTaintKey("not a key")), wantErr: `health taint key "not a key"`},
		{name: "empty rolling update uid", driver: "a.b", opts: with(driver.WithRollingUpdate("")), wantErr: "WithRollingUpdate: empty pod UID"},
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
