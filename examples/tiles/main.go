// Command tiles is a DRA driver for a tiled inference accelerator, its
// cards partitioned when a claim is prepared. It lives in a module of its
// own and uses only drakit's public packages, as a vendor's driver does.
//
// A card has 8 tiles in a row, each with its SRAM, and 64 GiB of DRAM
// shared out by size. A partition is 1, 2, 4 or 8 tiles at a multiple of
// its size, with an eighth of the DRAM per tile; a card holds any mix of
// sizes at once (no card-wide mode), and a card with no partition is
// used whole without a switch. When a partition is made, the claim
// chooses how its tiles' SRAM is split (TileConfig: "cache" or
// "scratch"), which the hardware fixes while the partition exists: the
// setting reaches tilectl's create, and two claims share a partition
// only with the same setting.
//
// The cards are the folders under /sys/class/tiles (their serial in
// "serial"); every one is dynamic. Package partition/lifecycle makes a
// claim's partition at prepare (tilectl) and destroys it when the claim
// is unprepared, crash-safely, and publishes, card by card, only the
// devices that still fit.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/lifecycle"
)

// DriverName is the driver's name. A container gets each device's
// partition in EnvVar + "_" + the device name in upper case with '_' for
// '-' (TILES_PARTITION_NPU_0_2T_4=tp-...; the card's serial for a card
// whole), and its SRAM split in EnvVar + "_SRAM".
const DriverName, EnvVar = "tiles.drakit.dev", "TILES_PARTITION"

// Scheme is the card's partition scheme: tiles placed, DRAM counted.
// Its input is constant: TestScheme checks that it builds.
var Scheme, _ = partition.NewScheme(func() partition.Scheme {
	const gib = int64(1) << 30
	s := partition.Scheme{Name: "T8", MemoryBytes: 64 * gib,
		Compute: partition.Units{Count: 8, Placed: true}, Memory: partition.Units{Count: 8},
		Names: partition.Names{Card: "card", Partition: "partition", ComputeUnit: "tile",
			MemoryUnit: "DRAM eighth", Device: "npu", ComputeCounter: "tile-",
			MemoryCounter: "dram", CardType: "npu", PartitionType: "tiles"}}
	for i, n := range []int{1, 2, 4, 8} {
		p := partition.Profile{Name: fmt.Sprint(n, "t"), ID: i + 1, Compute: n, Memory: n,
			MemoryBytes: int64(n) * 8 * gib, MaxCount: 8 / n}
		for start := 0; start < 8; start += n {
			p.Placements = append(p.Placements, partition.Placement{Start: start, Compute: start})
		}
		s.Profiles = append(s.Profiles, p)
	}
	return s
}())

// TileConfig is a partition's opaque configuration (apiVersion
// tiles.drakit.dev/v1): SRAM "cache" (the default) or "scratch".
type TileConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	SRAM       string `json:"sram,omitempty"`
}

// Configs decodes and checks TileConfig at prepare, before anything is
// made (and in a webhook).
var Configs, _ = driver.NewConfigScheme(DriverName, driver.NewConfigType(DriverName+"/v1",
	"TileConfig", func(c *TileConfig) error {
		if c.SRAM != "" && c.SRAM != "cache" && c.SRAM != "scratch" {
			return fmt.Errorf("sram %q: want cache or scratch", c.SRAM)
		}
		return nil
	}))

// DeviceClasses are the driver's classes: npu.tiles.drakit.dev for
// cards whole and one per size, e.g. 2t.tiles.drakit.dev.
func DeviceClasses() []device.Class { return lifecycle.Classes(DriverName, "", Scheme) }

// binding is the driver's part: the cards under sysfs, tilectl, the
// container edits, the configuration and the health check.
func binding(node, sysfs string) (lifecycle.Binding, error) {
	tool := tilectl{}
	health := func(_ context.Context, id string) error { _, err := tool.list(id); return err }
	b := lifecycle.Binding{Driver: DriverName, NodeName: node, Tool: tool, Configs: Configs,
		Edits: edits, Health: health}
	files, _ := filepath.Glob(filepath.Join(sysfs, "class/tiles/*/serial")) // ErrBadPattern only
	for _, f := range files {
		id, err := os.ReadFile(f)
		if err != nil {
			return b, fmt.Errorf("discover cards: %w", err)
		}
		tool[strings.TrimSpace(string(id))] = filepath.Dir(f)
		b.Cards = append(b.Cards, lifecycle.Card{ID: strings.TrimSpace(string(id)), Scheme: Scheme})
	}
	return b, nil
}

// edits hands the container its partition and its SRAM split.
func edits(dev driver.AllocatedDevice, p lifecycle.Partition, cfg any) (*cdi.Edits, error) {
	name := EnvVar + "_" + strings.ToUpper(strings.ReplaceAll(dev.Device, "-", "_"))
	return (&cdi.Edits{}).Env(name, p.ID).Env(name+"_SRAM", sram(cfg)), nil
}

// sram is the SRAM split a configuration asks for.
func sram(cfg any) string {
	if c, _ := cfg.(*TileConfig); c != nil && c.SRAM != "" {
		return c.SRAM
	}
	return "cache"
}

func main() {
	std := driverflag.Register(flag.CommandLine)
	sysfs := flag.String("sysfs-root", "/sys", "where sysfs is mounted")
	state := flag.String("state-dir", "/var/lib/tiles-dra",
		"the partition lifecycle's state folder, on the host")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, err := std.Options()
	b, berr := binding(std.NodeName, *sysfs)
	n, nerr := lifecycle.NewNode(b, *state)
	if err = errors.Join(err, berr, nerr); err == nil {
		opts = append(opts, driver.WithDiscoverer(n), driver.WithPreparer(n))
		var rt *driver.Runtime
		if rt, err = driver.New(DriverName, opts...); err == nil {
			err = rt.Run(ctx)
		}
	}
	if err != nil {
		klog.Fatal(err)
	}
}

// tilectl stands in for the card's partition command on its sysfs
// folder: a partition is a file "<start>-<tiles>t" holding its ID and
// SRAM split. It keeps the hardware's rules: a partition sits at a
// multiple of its size, never overlaps another, and keeps its SRAM split
// while it exists. It is a lifecycle.Tool and ConfigCreator (no
// WholeSwitcher: a card with no partition is the card whole).
type tilectl map[string]string // card serial → its sysfs folder

// part is a partition's file.
type part struct {
	ID   string `json:"id"`
	SRAM string `json:"sram"`
}

func (t tilectl) file(k lifecycle.Key) string {
	return filepath.Join(t[k.Card], fmt.Sprint(k.Start, "-", k.Profile))
}

// list reads the card's partitions.
func (t tilectl) list(id string) (map[lifecycle.Key]part, error) {
	ents, err := os.ReadDir(t[id])
	if t[id] == "" || errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tilectl: card %s: %w", id, lifecycle.ErrCardGone)
	}
	out := map[lifecycle.Key]part{}
	for _, e := range ents {
		k := lifecycle.Key{Card: id}
		if _, err := fmt.Sscanf(e.Name(), "%d-%s", &k.Start, &k.Profile); err != nil {
			continue // serial
		}
		var p part // a file cut short is a partition made in part: no ID
		b, err := os.ReadFile(filepath.Join(t[id], e.Name()))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("tilectl: card %s: %w", id, err)
		}
		_ = json.Unmarshal(b, &p)
		out[k] = p
	}
	return out, nil
}

// Create makes the partition at k with the SRAM split cfg asks for.
func (t tilectl) Create(ctx context.Context, k lifecycle.Key) (lifecycle.Partition, error) {
	return t.CreateWithConfig(ctx, k, nil)
}

// CreateWithConfig makes the partition at k with the SRAM split cfg
// asks for; a partition made before with another split is refused.
func (t tilectl) CreateWithConfig(_ context.Context, k lifecycle.Key, cfg any) (
	lifecycle.Partition, error) {
	parts, err := t.list(k.Card)
	if err != nil {
		return lifecycle.Partition{}, err
	}
	n := size(k.Profile)
	if n == 0 || k.Start%n != 0 || k.Start+n > 8 {
		err := fmt.Errorf("tilectl: no partition of %s at tile %d", k.Profile, k.Start)
		return lifecycle.Partition{}, err
	}
	for o, p := range parts {
		switch {
		case o == k && p.ID == "": // made in part: made again below
		case o == k && p.SRAM != sram(cfg):
			return lifecycle.Partition{}, fmt.Errorf("tilectl: %s exists with SRAM %s", k, p.SRAM)
		case o == k:
			return lifecycle.Partition{Key: k, ID: p.ID, Complete: true}, nil
		case k.Start < o.Start+size(o.Profile) && o.Start < k.Start+n:
			return lifecycle.Partition{}, fmt.Errorf("tilectl: %s overlaps %s", k, o)
		}
	}
	p := part{ID: "tp-" + strings.ToLower(rand.Text()[:12]), SRAM: sram(cfg)}
	b, _ := json.Marshal(p)
	return lifecycle.Partition{Key: k, ID: p.ID, Complete: true}, os.WriteFile(t.file(k), b, 0o644)
}

// size is the tiles of profile "<n>t"; 0 for no profile.
func size(profile string) int {
	var n int
	if _, err := fmt.Sscanf(profile, "%dt", &n); err != nil || n <= 0 || 8%n != 0 {
		return 0
	}
	return n
}

// Destroy removes the partition at k, if it is there.
func (t tilectl) Destroy(_ context.Context, k lifecycle.Key) error {
	if _, err := t.list(k.Card); err != nil {
		return err
	}
	if err := os.Remove(t.file(k)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tilectl: %w", err)
	}
	return nil
}

// List returns the card's partitions.
func (t tilectl) List(_ context.Context, id string) ([]lifecycle.Partition, error) {
	parts, err := t.list(id)
	var out []lifecycle.Partition
	for k, p := range parts {
		out = append(out, lifecycle.Partition{Key: k, ID: p.ID, Complete: p.ID != ""})
	}
	return out, err
}
