// Command minimal is the smallest complete DRA driver built with drakit:
// it publishes N simulated devices on its node, and a container that gets
// one sees an environment variable named after the device and set to its
// name (MINIMAL_DEVICE_DEV_0=dev-0), so that a container with several
// devices sees each of them. Everything else (kubelet protocol, checkpoint, CDI specs, slices,
// health, metrics) is the drakit runtime's job, and the command line
// (node name, kubeconfig, folders, -v) is driverflag's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
)

// EnvVar prefixes the variable a container gets for each of its devices;
// EnvName says the whole name.
const EnvVar = "MINIMAL_DEVICE"

// EnvName is the variable a container gets for the device named dev:
// EnvVar, "_" and the name in upper case with '-' as '_'
// (MINIMAL_DEVICE_DEV_0 for dev-0). Every device of a claim needs its own
// name: the runtime applies the CDI edits of a container's devices one
// after the other, and a variable two devices set keeps only the last
// value.
func EnvName(dev string) string { return envName(EnvVar, dev) }

func envName(prefix, dev string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(dev, "-", "_"))
}

// simulated prepares a device by handing out an environment variable.
type simulated struct{}

func (simulated) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (
	driver.PreparedDevice, error) {
	cfg, err := deviceConfig(dev)
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	edits := (&cdi.Edits{}).Env(EnvName(dev.Device), dev.Device)
	if cfg.Label != "" {
		edits.Env(envName(LabelEnvVar, dev.Device), cfg.Label)
	}
	return driver.PreparedDevice{Edits: edits}, nil
}

func (simulated) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice,
	json.RawMessage) error {
	return nil // nothing was configured on the (simulated) hardware
}

// New returns the driver named name with devices simulated devices on
// node, not running yet; opts say how it reaches the API server and the
// kubelet (driverflag's options, or a test's).
func New(name, node string, devices int, opts ...driver.Option) (*driver.Runtime, error) {
	if devices < 1 || devices > 1024 {
		return nil, fmt.Errorf("devices: %d is not in 1..1024", devices)
	}
	pool := device.Pool{Name: node}
	for i := range devices {
		dev := device.New(fmt.Sprintf("dev-%d", i)).StringAttribute("model", "simulated")
		pool.Devices = append(pool.Devices, dev)
	}
	inv := &device.Inventory{Driver: name, Pools: []device.Pool{pool}}
	return driver.New(name, append([]driver.Option{
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: inv}),
		driver.WithPreparer(simulated{}),
		driver.WithNodeName(node),
	}, opts...)...)
}

func main() {
	std := driverflag.Register(flag.CommandLine)
	name := flag.String("driver-name", "minimal.drakit.dev", "DRA driver name")
	devices := flag.Int("devices", 4, "number of simulated devices")
	flag.Parse()
	opts, err := std.Options()
	if err != nil {
		klog.Fatal(err)
	}
	d, err := New(*name, std.NodeName, *devices, opts...)
	if err != nil {
		klog.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		klog.Fatalf("driver: %v", err)
	}
}
