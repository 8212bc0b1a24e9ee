// Command partitioned is a DRA driver for a made-up accelerator card that
// a pod gets whole or as one of its two halves. It lives in a module of
// its own and uses only drakit's public packages, as a vendor's driver
// does: copy the folder to start a driver.
//
// Each card is a counter set with two "halves" counters; each half device
// consumes one, the whole-card device both, so the scheduler never hands
// out a half and its whole card at once. The PCI topology of each card
// (pcieRoot, pciBusID, numaNode) comes from sysfs, its health from a
// polled monitor (here: a file per card in --health-dir naming what is
// wrong), applied to the whole card and both halves.
//
// A claim may configure a card's clock (CardConfig, in Scheme); `partitioned
// webhook` is the driver's admission webhook (package admission), which
// refuses a claim with a bad CardConfig when it is created, with the
// message the driver's prepare would give.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
	"github.com/drakit/drakit/topology"
)

// DriverName is the driver's name; a container gets each of its devices'
// names in a variable of its own, EnvVar with the device's suffix
// (PARTITIONED_DEVICE_CARD_0_A=card-0-a; see EnvName).
const DriverName, EnvVar = "partitioned.drakit.dev", "PARTITIONED_DEVICE"

// EnvName is the variable a container gets for the device named dev:
// EnvVar, "_" and the name in upper case with '-' as '_'. One name per
// device, because the runtime applies a container's CDI edits device by
// device and a variable set twice keeps only the last value: a claim
// with two halves must show both.
func EnvName(dev string) string {
	return EnvVar + "_" + strings.ToUpper(strings.ReplaceAll(dev, "-", "_"))
}

// Config describes the node's cards and where their state is read.
type Config struct {
	BusIDs         []string      // the cards' PCI addresses
	SysfsRoot      string        // "/sys" in production
	HealthDir      string        // the simulated monitor: a file per unhealthy card
	HealthInterval time.Duration // how often the monitor is polled
}

// Inventory is the node's pool. Halves come first, card by card, then
// the whole cards: slice order is the scheduler's first-fit order, so
// single-device claims pack into the halves of the first cards and the
// remaining cards stay whole. Whole cards first would give every claim a
// whole card and leave nothing for the next one.
func Inventory(node string, cfg Config) (*device.Inventory, error) {
	pool := device.Pool{Name: node}
	var wholes []*device.Device
	for i, id := range cfg.BusIDs {
		pci, err := topology.ReadPCIDevice(id, topology.WithSysfsRoot(cfg.SysfsRoot))
		if err != nil {
			return nil, err
		}
		card := fmt.Sprintf("card-%d", i)
		set := device.CounterSet{Name: card, Counters: halves(2)}
		pool.CounterSets = append(pool.CounterSets, set)
		for _, h := range []string{"a", "b"} {
			pool.Devices = append(pool.Devices, pci.SetAttributes(device.New(card+"-"+h)).
				StringAttribute("card", card).BoolAttribute("whole", false).
				ConsumesCounters(card, halves(1)))
		}
		wholes = append(wholes, pci.SetAttributes(device.New(card)).
			StringAttribute("card", card).BoolAttribute("whole", true).
			ConsumesCounters(card, halves(2)))
	}
	pool.Devices = append(pool.Devices, wholes...)
	return &device.Inventory{Driver: DriverName, Pools: []device.Pool{pool}}, nil
}

func halves(n int64) map[string]resource.Quantity {
	return map[string]resource.Quantity{"halves": *resource.NewQuantity(n, resource.DecimalSI)}
}

// monitor reports each card's health: Unhealthy when its file exists in
// dir (the file holds the reason), else Healthy. A report on a card (its
// counter set) applies to the card and both halves.
func monitor(node string, cards int, dir string) func(context.Context) (
	[]device.HealthReport, error) {
	return func(context.Context) ([]device.HealthReport, error) {
		var out []device.HealthReport
		for i := range cards {
			id := device.DeviceID{Pool: node, Device: fmt.Sprintf("card-%d", i)}
			r := device.HealthReport{Device: id, Health: device.Healthy}
			data, err := os.ReadFile(filepath.Join(dir, r.Device.Device))
			switch {
			case err == nil:
				r.Health, r.Reason = device.Unhealthy, strings.TrimSpace(string(data))
			case !errors.Is(err, os.ErrNotExist):
				return nil, fmt.Errorf("read card health: %w", err)
			}
			out = append(out, r)
		}
		return out, nil
	}
}

// webhook serves the driver's admission webhook (`partitioned webhook
// --self-signed-secret=ns/name --webhook-configuration=... --dns-names=...`):
// a claim whose CardConfig prepare would refuse is refused when it is
// created, with prepare's message.
func webhook(args []string) error {
	fs := flag.NewFlagSet("partitioned webhook", flag.ExitOnError)
	var wf admission.Flags
	wf.Register(fs)
	std := driverflag.RegisterLogging(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := std.ApplyLogging(); err != nil {
		return err
	}
	v, err := admission.NewValidator(Scheme)
	if err != nil {
		return err
	}
	srv, err := wf.Server(v)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx)
}

// cards prepares a device by handing its name to the container.
type cards struct{}

func (cards) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (
	driver.PreparedDevice, error) {
	clk, err := clock(dev)
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	suffix := strings.TrimPrefix(EnvName(dev.Device), EnvVar)
	edits := (&cdi.Edits{}).Env(EnvName(dev.Device), dev.Device).Env(ClockEnvVar+suffix, clk)
	return driver.PreparedDevice{Edits: edits}, nil
}

func (cards) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice,
	json.RawMessage) error {
	return nil // the simulated card keeps no per-claim state
}

// New returns the driver for node's cards, not running yet.
func New(node string, cfg Config, opts ...driver.Option) (*driver.Runtime, error) {
	inv, err := Inventory(node, cfg)
	if err != nil {
		return nil, err
	}
	health := monitor(node, len(cfg.BusIDs), cfg.HealthDir)
	disc, err := device.NewHealthDiscoverer(inv, device.PollHealth(cfg.HealthInterval, health))
	if err != nil {
		return nil, err
	}
	return driver.New(DriverName, append([]driver.Option{driver.WithNodeName(node),
		driver.WithDiscoverer(disc), driver.WithPreparer(cards{})}, opts...)...)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "webhook" {
		if err := webhook(os.Args[2:]); err != nil {
			klog.Fatal(err)
		}
		return
	}
	std := driverflag.Register(flag.CommandLine)
	var cfg Config
	busIDs := flag.String("cards", "", "comma-separated PCI addresses of the cards")
	flag.StringVar(&cfg.SysfsRoot, "sysfs-root", "/sys", "where sysfs is mounted")
	flag.StringVar(&cfg.HealthDir, "health-dir", "/run/partitioned/health",
		"the card monitor's folder")
	flag.DurationVar(&cfg.HealthInterval, "health-interval", 10*time.Second,
		"how often card health is read")
	flag.Parse()
	cfg.BusIDs = strings.Split(*busIDs, ",")
	opts, err := std.Options()
	if err != nil {
		klog.Fatal(err)
	}
	d, err := New(std.NodeName, cfg, opts...)
	if err != nil {
		klog.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		klog.Fatal(err)
	}
}
