// Command instinct is a DRA driver for AMD Instinct MI300X-like GPUs,
// partitioned when a claim is prepared. It lives in a module of its own
// and uses only drakit's public packages, as a vendor's driver does.
//
// A card's 8 XCDs form 1, 2, 4 or 8 partitions (XCPs) by its compute
// partition mode (SPX, DPX, QPX, CPX), set independently of its memory
// partition mode (NPS1: the 192 GiB interleaved over all 8 HBM stacks
// and shared; NPS4: four NUMA nodes of two stacks, a QPX partition on its
// own node, two CPX partitions sharing one, modelled as a stack each).
// Each valid
// combination but SPX/NPS1, which is the card whole, is a profile of
// Scheme named "<compute>/<memory>" and its card-wide mode: compute is
// placed on XCDs, memory on HBM stacks for NPS4 only, and a card holds
// partitions of one combination at a time.
//
// The cards are found in sysfs (/sys/class/drm/card*/device with a
// current_compute_partition); every one is dynamic. Package
// partition/lifecycle makes a claim's partition at prepare with amd-smi
// (amdSMI) and destroys it when the claim is unprepared, crash-safely; the
// node publishes, card by card, only the devices that still fit, in the
// planner's order.
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/lifecycle"
)

// DriverName is the driver's name. A container gets each device's
// partition ID in EnvVar + "_" + the device name in upper case with '_'
// for '-' (INSTINCT_XCP_GPU_0_CPX_NPS4_3=xcp-...), the card's unique_id
// for a card whole.
const DriverName, EnvVar = "instinct.drakit.dev", "INSTINCT_XCP"

// Scheme is the MI300X's partition scheme, in AMD's words. Its input is
// constant: TestScheme checks that it builds.
var Scheme, _ = partition.NewScheme(func() partition.Scheme {
	const gib = int64(1) << 30
	s := partition.Scheme{Name: "MI300X", MemoryBytes: 192 * gib, Compute: partition.Units{Count: 8, Placed: true}, Memory: partition.Units{Count: 8, Placed: true},
		Names: partition.Names{Card: "GPU", Partition: "XCP", ComputeUnit: "XCD", MemoryUnit: "HBM stack", Device: "gpu",
			ComputeCounter: "xcd-", MemoryCounter: "hbm-", CardType: "gpu", PartitionType: "xcp"}}
	for i, name := range []string{"DPX/NPS1", "QPX/NPS1", "QPX/NPS4", "CPX/NPS1", "CPX/NPS4"} {
		n := xcps[name[:3]]
		// An NPS4 partition takes the HBM stacks next to its XCDs.
		p := partition.Profile{Name: name, ID: i + 1, Mode: name, Compute: 8 / n, Memory: 8 / n * strings.Count(name, "NPS4"), MemoryBytes: 192 * gib / int64(n), MaxCount: n}
		for x := range n {
			p.Placements = append(p.Placements, partition.Placement{Start: x, Compute: x * 8 / n, Memory: x * p.Memory})
		}
		s.Profiles = append(s.Profiles, p)
	}
	return s
}())

// XCPConfig is a device's opaque configuration (apiVersion
// instinct.drakit.dev/v1): XNACK "on" or "off" sets the container's
// HSA_XNACK (the GPU retries page faults, for unified memory); empty
// keeps ROCm's default.
type XCPConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	XNACK      string `json:"xnack,omitempty"`
}

// Configs decodes and checks XCPConfig at prepare (and in a webhook);
// TestConfig checks that it builds.
var Configs, _ = driver.NewConfigScheme(DriverName, driver.NewConfigType(DriverName+"/v1", "XCPConfig", func(c *XCPConfig) error {
	if c.XNACK != "" && c.XNACK != "on" && c.XNACK != "off" {
		return fmt.Errorf("xnack %q: want on or off", c.XNACK)
	}
	return nil
}))

// DeviceClasses are the driver's classes, for its chart (render them
// with device.ClassesYAML): gpu.instinct.drakit.dev for cards whole
// (extended resource amd.com/gpu) and one per profile, e.g.
// cpx-nps4.instinct.drakit.dev (amd.com/cpx_nps4).
func DeviceClasses() []device.Class {
	typ := fmt.Sprintf("device.attributes[%q].type == ", DriverName)
	out := []device.Class{{Name: "gpu." + DriverName, Driver: DriverName, Selectors: []string{typ + `"gpu"`}, ExtendedResourceName: "amd.com/gpu"}}
	for _, p := range Scheme.ProfileNames() {
		low, sel := strings.ToLower(p), fmt.Sprintf(`%s"xcp" && device.attributes[%q].profile == %q`, typ, DriverName, p)
		out = append(out, device.Class{Name: strings.ReplaceAll(low, "/", "-") + "." + DriverName, Driver: DriverName,
			Selectors: []string{sel}, ExtendedResourceName: "amd.com/" + strings.ReplaceAll(low, "/", "_")})
	}
	return out
}

// wrapTool lets the tests stop a driver at a tool call.
var wrapTool = func(t lifecycle.Tool) lifecycle.Tool { return t }

// instinct is the driver's preparer: the lifecycle makes and destroys the
// partitions (its embedded Manager), PrepareDevice hands them out.
type instinct struct {
	*lifecycle.Manager
	node  string
	ids   []string // the cards' unique_id, by index
	tool  amdSMI
	model partition.CounterModel
	disc  *device.DynamicDiscoverer
}

// open finds the GPUs under sysfs and opens the lifecycle's state folder.
func open(node, sysfs, state string, opts ...lifecycle.Option) (*instinct, error) {
	d := &instinct{node: node, tool: amdSMI{}}
	d.disc, _ = device.NewDynamicDiscoverer(d.inventory, device.PollHealth(10*time.Second, d.health))   // fails for nil arguments only
	files, _ := filepath.Glob(filepath.Join(sysfs, "class/drm/card*/device/current_compute_partition")) // ErrBadPattern only
	var cards []partition.Card
	for i, f := range files {
		id, err := os.ReadFile(filepath.Join(filepath.Dir(f), "unique_id"))
		if err != nil {
			return d, fmt.Errorf("discover GPUs: %w", err)
		}
		d.ids = append(d.ids, strings.TrimSpace(string(id)))
		d.tool[d.ids[i]] = filepath.Dir(f)
		cards = append(cards, partition.Card{Index: i, Scheme: Scheme, UUID: d.ids[i]})
	}
	var err error
	if d.model, err = partition.NewCounterModel(cards); err != nil {
		return d, fmt.Errorf("discover GPUs: %w", err)
	}
	opts = append([]lifecycle.Option{lifecycle.WithDynamicCards(d.ids...),
		lifecycle.WithRepublish(d.disc.Changed, lifecycle.DefaultRepublishDelay, lifecycle.DefaultRepublishInterval)}, opts...)
	d.Manager, err = lifecycle.Open(state, wrapTool(d.tool), d.keyOf, opts...)
	return d, err
}

// inventory publishes what still fits beside the partitions claims hold.
func (d *instinct) inventory(context.Context) (*device.Inventory, error) {
	intents, err := d.Intents()
	fleet := make([]partition.FleetCard, len(d.ids))
	for i := range fleet {
		fleet[i] = partition.FleetCard{Node: d.node, Index: i, Scheme: Scheme}
	}
	for _, in := range intents {
		if i := slices.Index(d.ids, in.Card); i >= 0 && !in.Whole && !in.Released() {
			fleet[i].Layout = append(fleet[i].Layout, partition.Instance{Profile: in.Profile, Start: in.Start, InUse: true})
		}
	}
	pools, perr := d.model.CardPools(d.node, fleet, partition.WithFitOnly())
	return &device.Inventory{Driver: DriverName, Pools: pools}, errors.Join(err, perr)
}

// health reports a card whose sysfs amd-smi cannot read as unhealthy,
// with all its partitions.
func (d *instinct) health(context.Context) (out []device.HealthReport, _ error) {
	for i, id := range d.ids {
		r := device.HealthReport{Device: device.DeviceID{Pool: Scheme.PoolName(d.node, i), Device: Scheme.CounterSetName(i)}, Health: device.Healthy}
		if _, err := d.tool.read(id); err != nil {
			r.Health, r.Reason = device.Unhealthy, err.Error()
		}
		out = append(out, r)
	}
	return out, nil
}

// keyOf names a device's partition: by the key its prepare recorded, or
// by its name.
func (d *instinct) keyOf(dev driver.AllocatedDevice, data json.RawMessage) (lifecycle.Key, bool) {
	var k lifecycle.Key
	if json.Unmarshal(data, &k) == nil && k.Card != "" {
		return k, true
	}
	ref, err := Scheme.ParseDeviceName(dev.Device)
	if err != nil || ref.Card >= len(d.ids) {
		return k, false
	}
	return lifecycle.Key{Card: d.ids[ref.Card], Profile: ref.Profile, Start: ref.Start, Whole: ref.Profile == ""}, true
}

// PrepareDevice hands the container the partition PrepareClaim made (the
// card's unique_id for a card whole) and its XCPConfig.
func (d *instinct) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	cfg, err := driver.DecodeAs[XCPConfig](Configs, dev)
	k, _ := d.keyOf(dev, nil)
	p, _ := d.Made(k)
	if k.Whole {
		p.ID = k.Card
	} else if p.ID == "" && err == nil {
		err = fmt.Errorf("device %s: its partition was not made", dev.Device)
	}
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	data, err := json.Marshal(k)
	edits := (&cdi.Edits{}).Env(EnvVar+"_"+strings.ToUpper(strings.ReplaceAll(dev.Device, "-", "_")), p.ID)
	if cfg != nil && cfg.XNACK != "" {
		edits.Env("HSA_XNACK", map[string]string{"on": "1", "off": "0"}[cfg.XNACK])
	}
	return driver.PreparedDevice{Edits: edits, Data: data}, err
}

// UnprepareDevice has nothing to do: the embedded Manager's
// UnprepareClaim destroys the claim's partitions.
func (d *instinct) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil // UnprepareClaim destroys the partition
}

func main() {
	std := driverflag.Register(flag.CommandLine)
	sysfs := flag.String("sysfs-root", "/sys", "where sysfs is mounted")
	state := flag.String("state-dir", "/var/lib/instinct-dra", "the partition lifecycle's state folder, on the host")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, err := std.Options()
	d, oerr := open(std.NodeName, *sysfs, *state)
	rt, nerr := driver.New(DriverName, append(opts, driver.WithDiscoverer(d.disc), driver.WithPreparer(d))...)
	if err = errors.Join(err, oerr, nerr); err == nil {
		err = rt.Run(ctx)
	}
	if err != nil {
		klog.Fatal(err)
	}
}

// xcps is how many partitions (XCPs) of the 8 XCDs each compute partition
// mode makes, and nps the memory partition modes each allows on MI300X:
// SPX and DPX with NPS1 only, QPX and CPX with NPS1 or NPS4 (the Linux
// kernel's amdgpu, aqua_vanjaram.c: the compatible NPS modes of each
// compute partition mode, masked by the NPS modes MI300X supports, NPS1
// and NPS4).
var xcps = map[string]int{"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
var nps = map[string][]string{"SPX": {"NPS1"}, "DPX": {"NPS1"}, "QPX": {"NPS1", "NPS4"}, "CPX": {"NPS1", "NPS4"}}

// amdSMI stands in for amd-smi's partition commands on the cards' sysfs
// folders (/sys/class/drm/cardN/device): current_compute_partition and
// current_memory_partition hold the card's modes, and a made partition is
// a file xcp/<index> holding its ID. It enforces the hardware's rules: a
// mode combination the card does not support is refused, and so is a mode
// change while any partition of the card exists (the kernel refuses to
// repartition a card in use); SPX is the card whole. It implements
// lifecycle.Tool and lifecycle.WholeSwitcher; Key.Profile is
// "<compute mode>/<memory mode>" and Key.Start the XCP's index.
// The lifecycle never calls it twice at once for one card.
type amdSMI map[string]string // card unique_id → its sysfs device folder

// card is what amd-smi reads of one card.
type card struct {
	dir, compute, memory string
	parts                []lifecycle.Partition
}

func (a amdSMI) read(id string) (card, error) {
	c := card{dir: a[id]}
	if _, err := os.Stat(c.dir); c.dir == "" || errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("amd-smi: GPU %s: %w", id, lifecycle.ErrCardGone)
	}
	cm, err1 := os.ReadFile(filepath.Join(c.dir, "current_compute_partition"))
	mm, err2 := os.ReadFile(filepath.Join(c.dir, "current_memory_partition"))
	ents, err3 := os.ReadDir(filepath.Join(c.dir, "xcp"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return c, fmt.Errorf("amd-smi: GPU %s: %w", id, err)
	}
	c.compute, c.memory = strings.TrimSpace(string(cm)), strings.TrimSpace(string(mm))
	for _, e := range ents { // "<index>-<ID>"
		x, xid, _ := strings.Cut(e.Name(), "-")
		start, _ := strconv.Atoi(x)
		k := lifecycle.Key{Card: id, Profile: c.compute + "/" + c.memory, Start: start}
		c.parts = append(c.parts, lifecycle.Partition{Key: k, ID: xid, Complete: true})
	}
	return c, nil
}

// setModes sets the card's compute and memory partition modes.
func (c card) setModes(compute, memory string) error {
	switch {
	case c.compute == compute && c.memory == memory:
		return nil
	case !slices.Contains(nps[compute], memory):
		return fmt.Errorf("amd-smi: %s/%s: MI300X supports SPX and DPX with NPS1, QPX and CPX with NPS1 or NPS4", compute, memory)
	case len(c.parts) > 0:
		return fmt.Errorf("amd-smi: cannot set %s/%s: %d partitions of %s/%s are in use", compute, memory, len(c.parts), c.compute, c.memory)
	}
	return errors.Join(os.WriteFile(filepath.Join(c.dir, "current_compute_partition"), []byte(compute+"\n"), 0o644),
		os.WriteFile(filepath.Join(c.dir, "current_memory_partition"), []byte(memory+"\n"), 0o644))
}

// Create makes the partition at k, setting the card's modes first when
// it has no partition.
func (a amdSMI) Create(_ context.Context, k lifecycle.Key) (lifecycle.Partition, error) {
	c, err := a.read(k.Card)
	compute, memory, _ := strings.Cut(k.Profile, "/")
	switch {
	case err != nil:
		return lifecycle.Partition{}, err
	case c.compute == "SPX":
		return lifecycle.Partition{}, fmt.Errorf("amd-smi: GPU %s is in SPX mode: %w", k.Card, lifecycle.ErrWholeMode)
	case k.Start < 0 || k.Start >= xcps[compute]:
		return lifecycle.Partition{}, fmt.Errorf("amd-smi: %s has no XCP %d", k.Profile, k.Start)
	}
	if i := slices.IndexFunc(c.parts, func(p lifecycle.Partition) bool { return p.Key == k }); i >= 0 {
		return c.parts[i], nil
	}
	if err := c.setModes(compute, memory); err != nil {
		return lifecycle.Partition{}, err
	}
	p := lifecycle.Partition{Key: k, ID: "xcp-" + rand.Text()[:12], Complete: true}
	return p, os.WriteFile(filepath.Join(c.dir, "xcp", fmt.Sprint(k.Start, "-", p.ID)), nil, 0o644)
}

// Destroy removes the partition at k, if it is there.
func (a amdSMI) Destroy(_ context.Context, k lifecycle.Key) error {
	c, err := a.read(k.Card)
	for _, p := range c.parts {
		if p.Key == k {
			return os.Remove(filepath.Join(c.dir, "xcp", fmt.Sprint(k.Start, "-", p.ID)))
		}
	}
	return err
}

// List returns the card's partitions.
func (a amdSMI) List(_ context.Context, id string) ([]lifecycle.Partition, error) {
	c, err := a.read(id)
	return c.parts, err
}

// SetWhole sets the card to SPX/NPS1 (whole), or from SPX to CPX.
func (a amdSMI) SetWhole(_ context.Context, id string, whole bool) error {
	c, err := a.read(id)
	if err != nil || !whole && c.compute != "SPX" {
		return err
	} else if whole {
		return c.setModes("SPX", "NPS1")
	}
	return c.setModes("CPX", c.memory)
}
