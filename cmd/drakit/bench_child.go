package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// The drivers bench prepare runs, each in its own process so that its
// CPU time and memory are its own: "drakit bench floor" and "drakit
// bench driver".
const (
	benchFloorCmd  = "floor"
	benchDriverCmd = "driver"
)

// runBenchChild runs one of the drivers until SIGTERM.
func runBenchChild(ctx context.Context, which string, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench "+which, flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	node := fs.String("node", "", "node name")
	dir := fs.String("dir", "", "folder for sockets, checkpoint and CDI specs")
	name := fs.String("driver", "", "driver name")
	pool := fs.String("pool", "", "pool whose devices are accepted unchecked")
	qps := fs.Float64("qps", -1, "client QPS (negative: no limit)")
	burst := fs.Int("burst", 0, "client burst")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *node == "" || *dir == "" || *name == "" {
		return fmt.Errorf("%w: bench %s needs -kubeconfig, -node, -dir and -driver", errUsage, which)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = float32(*qps), *burst
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Silent: klog's default verbosity logs nothing per call on either
	// side (the helper logs gRPC traffic at V(6)).
	ctx = klog.NewContext(ctx, klog.Background())
	if which == benchFloorCmd {
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		helper, err := kubeletplugin.Start(ctx, noopPlugin{dir: *dir, seq: new(atomic.Int64)}, kubeletplugin.DriverName(*name), kubeletplugin.KubeClient(client),
			kubeletplugin.NodeName(*node), kubeletplugin.RegistrarDirectoryPath(*dir), kubeletplugin.PluginDataDirectoryPath(*dir),
			kubeletplugin.Serialize(false))
		if err != nil {
			return fmt.Errorf("start floor driver: %w", err)
		}
		<-ctx.Done()
		helper.Stop()
		return nil
	}
	drv, err := driver.New(*name,
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: *name, Pools: []device.Pool{{Name: *pool, Devices: []*device.Device{device.New("dev-0")}}}}}),
		driver.WithPreparer(envPreparer{}), driver.WithRESTConfig(rc), driver.WithNodeName(*node),
		driver.WithRegistrarDir(*dir), driver.WithPluginDataDir(*dir), driver.WithCDIDir(filepath.Join(*dir, "cdi")),
		driver.WithUncheckedPools(*pool)) // claims are allocated without a scheduler
	if err != nil {
		return err
	}
	if err := drv.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// fsyncOnce writes 1 KiB to a temporary file, fsyncs it and renames it.
func fsyncOnce(dir string, i int64) error {
	tmp := filepath.Join(dir, fmt.Sprintf("fsync-%d.tmp", i))
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, 1024))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("fsync-%d", i%16)))
	}
	return err
}

// noopPlugin is the floor: it answers every claim with its allocated
// devices and does nothing else but write, fsync and rename one 1 KiB
// file per prepare call: the least a crash-safe driver must do.
type noopPlugin struct {
	dir string
	seq *atomic.Int64
}

func (p noopPlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if err := fsyncOnce(p.dir, p.seq.Add(1)); err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		for _, d := range c.Status.Allocation.Devices.Results {
			r.Devices = append(r.Devices, kubeletplugin.Device{Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device})
		}
		out[c.UID] = r
	}
	return out, nil
}

func (noopPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (noopPlugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).V(2).Info(msg, "err", err)
}

func (noopPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// envPreparer is the built-in driver's vendor part: one env var.
type envPreparer struct{}

func (envPreparer) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	return driver.PreparedDevice{Edits: (&cdi.Edits{}).Env("BENCH_DEVICE", dev.Device)}, nil
}

func (envPreparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil
}
