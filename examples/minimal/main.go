// Command minimal is the smallest complete DRA driver built with drakit:
// it publishes N simulated devices on its node, and a container that gets
// one sees the environment variable MINIMAL_DEVICE set to the device's
// name. Everything else (kubelet protocol, checkpoint, CDI specs, slices,
// health, metrics) is the drakit runtime's job.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// EnvVar is the variable a container gets for its device.
const EnvVar = "MINIMAL_DEVICE"

// Config is what the driver needs to run; flags fill it in main.
type Config struct {
	DriverName string
	NodeName   string
	Devices    int
	REST       *rest.Config
	// Folders; empty means the kubelet's defaults.
	RegistrarDir, PluginDataDir, CDIDir string
	HTTPAddress                         string
}

// simulated prepares a device by handing out an environment variable.
type simulated struct{}

func (simulated) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	cfg, err := deviceConfig(dev)
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	edits := (&cdi.Edits{}).Env(EnvVar, dev.Device)
	if cfg.Label != "" {
		edits.Env(LabelEnvVar, cfg.Label)
	}
	return driver.PreparedDevice{Edits: edits}, nil
}

func (simulated) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil // nothing was configured on the (simulated) hardware
}

// Run runs the driver until ctx is canceled.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Devices < 1 || cfg.Devices > 128 {
		return fmt.Errorf("devices: %d is not in 1..128", cfg.Devices)
	}
	pool := device.Pool{Name: cfg.NodeName}
	for i := range cfg.Devices {
		pool.Devices = append(pool.Devices, device.New(fmt.Sprintf("dev-%d", i)).String("model", "simulated"))
	}
	opts := []driver.Option{
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: cfg.DriverName, Pools: []device.Pool{pool}}}),
		driver.WithPreparer(simulated{}),
		driver.WithRESTConfig(cfg.REST),
		driver.WithNodeName(cfg.NodeName),
	}
	for _, o := range []struct {
		val string
		opt func(string) driver.Option
	}{{cfg.RegistrarDir, driver.WithRegistrarDir}, {cfg.PluginDataDir, driver.WithPluginDataDir}, {cfg.CDIDir, driver.WithCDIDir}, {cfg.HTTPAddress, driver.WithHTTPAddress}} {
		if o.val != "" {
			opts = append(opts, o.opt(o.val))
		}
	}
	d, err := driver.New(cfg.DriverName, opts...)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

func main() {
	cfg := Config{}
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; empty means in-cluster config")
	flag.StringVar(&cfg.DriverName, "driver-name", "minimal.drakit.dev", "DRA driver name")
	flag.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	flag.IntVar(&cfg.Devices, "devices", 4, "number of simulated devices")
	flag.StringVar(&cfg.RegistrarDir, "registrar-dir", "", "kubelet plugin registry folder")
	flag.StringVar(&cfg.PluginDataDir, "plugin-data-dir", "", "driver's own folder (sockets, checkpoint)")
	flag.StringVar(&cfg.CDIDir, "cdi-dir", "", "CDI spec folder of the container runtime")
	flag.StringVar(&cfg.HTTPAddress, "http-address", ":8080", "address of /metrics and /healthz")
	klog.InitFlags(nil)
	flag.Parse()
	var err error
	if cfg.REST, err = clientcmd.BuildConfigFromFlags("", *kubeconfig); err != nil {
		klog.Fatalf("kube config: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		klog.Fatalf("driver: %v", err)
	}
}
