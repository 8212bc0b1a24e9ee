// Command instinct is a DRA driver for AMD Instinct MI300X-like GPUs,
// partitioned when a claim is prepared. It lives in a module of its own
// and uses only drakit's public packages, as a vendor's driver does.
//
// A card's 8 XCDs form 1, 2, 4 or 8 partitions (XCPs) by its compute
// partition mode (SPX, DPX, QPX, CPX), set independently of its memory
// partition mode (NPS1: the 192 GiB interleaved over all 8 HBM stacks
// and shared; NPS4: four NUMA nodes of two stacks, a QPX partition on its
// own node, two CPX partitions sharing one, modelled as a stack each).
// Each valid combination but SPX/NPS1, which is the card whole, is a
// profile of Scheme named "<compute>/<memory>" and its card-wide mode:
// compute is placed on XCDs, memory on HBM stacks for NPS4 only, and a
// card holds partitions of one combination at a time.
//
// The cards are found in sysfs (/sys/class/drm/card*/device with a
// current_compute_partition); every one is dynamic. Package
// partition/lifecycle makes a claim's partition at prepare with amd-smi
// (amdSMI) and destroys it when the claim is unprepared, crash-safely,
// and publishes, card by card, only the devices that still fit.
package main

import (
	"context"
	"crypto/rand"
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
	units := partition.Units{Count: 8, Placed: true}
	s := partition.Scheme{Name: "MI300X", MemoryBytes: 192 * gib, Compute: units, Memory: units,
		Names: partition.Names{Card: "GPU", Partition: "XCP", ComputeUnit: "XCD",
			MemoryUnit: "HBM stack", Device: "gpu", ComputeCounter: "xcd-", MemoryCounter: "hbm-",
			CardType: "gpu", PartitionType: "xcp"}}
	for i, name := range []string{"DPX/NPS1", "QPX/NPS1", "QPX/NPS4", "CPX/NPS1", "CPX/NPS4"} {
		n := xcps[name[:3]]
		// An NPS4 partition takes the HBM stacks next to its XCDs.
		p := partition.Profile{Name: name, ID: i + 1, Mode: name, Compute: 8 / n, MaxCount: n,
			Memory: 8 / n * strings.Count(name, "NPS4"), MemoryBytes: 192 * gib / int64(n)}
		for x := range n {
			at := partition.Placement{Start: x, Compute: x * 8 / n, Memory: x * p.Memory}
			p.Placements = append(p.Placements, at)
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

// Configs decodes and checks XCPConfig, at prepare before anything is
// made (and in a webhook); TestConfig checks that it builds.
var Configs, _ = driver.NewConfigScheme(DriverName, driver.NewConfigType(DriverName+"/v1",
	"XCPConfig", func(c *XCPConfig) error {
		if c.XNACK != "" && c.XNACK != "on" && c.XNACK != "off" {
			return fmt.Errorf("xnack %q: want on or off", c.XNACK)
		}
		return nil
	}))

// DeviceClasses are the driver's classes, for its chart (render them
// with device.ClassesYAML): gpu.instinct.drakit.dev for cards whole
// (extended resource amd.com/gpu) and one per profile, e.g.
// cpx-nps4.instinct.drakit.dev (amd.com/cpx_nps4).
func DeviceClasses() []device.Class { return lifecycle.Classes(DriverName, "amd.com", Scheme) }

// binding is the driver's part: the GPUs found under sysfs, amd-smi, the
// container edits, the configuration and the health check.
func binding(node, sysfs string) (lifecycle.Binding, error) {
	tool := amdSMI{}
	health := func(_ context.Context, id string) error { _, err := tool.read(id); return err }
	b := lifecycle.Binding{Driver: DriverName, NodeName: node, Tool: tool, Configs: Configs,
		Edits: edits, Health: health}
	pattern := filepath.Join(sysfs, "class/drm/card*/device/current_compute_partition")
	files, _ := filepath.Glob(pattern) // ErrBadPattern only
	for _, f := range files {
		id, err := os.ReadFile(filepath.Join(filepath.Dir(f), "unique_id"))
		if err != nil {
			return b, fmt.Errorf("discover GPUs: %w", err)
		}
		tool[strings.TrimSpace(string(id))] = filepath.Dir(f)
		b.Cards = append(b.Cards, lifecycle.Card{ID: strings.TrimSpace(string(id)), Scheme: Scheme})
	}
	return b, nil
}

// edits hands the container its partition and its XCPConfig.
func edits(dev driver.AllocatedDevice, p lifecycle.Partition, cfg any) (*cdi.Edits, error) {
	name := EnvVar + "_" + strings.ToUpper(strings.ReplaceAll(dev.Device, "-", "_"))
	e := (&cdi.Edits{}).Env(name, p.ID)
	if c, _ := cfg.(*XCPConfig); c != nil && c.XNACK != "" {
		e.Env("HSA_XNACK", map[string]string{"on": "1", "off": "0"}[c.XNACK])
	}
	return e, nil
}

func main() {
	std := driverflag.Register(flag.CommandLine)
	sysfs := flag.String("sysfs-root", "/sys", "where sysfs is mounted")
	state := flag.String("state-dir", "/var/lib/instinct-dra",
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

// xcps is how many partitions (XCPs) of the 8 XCDs each compute partition
// mode makes, and nps the memory partition modes each allows on MI300X:
// SPX and DPX with NPS1 only, QPX and CPX with NPS1 or NPS4 (the Linux
// kernel's amdgpu, aqua_vanjaram.c: the compatible NPS modes of each
// compute partition mode, masked by the NPS modes MI300X supports).
var xcps = map[string]int{"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
var nps = map[string][]string{"SPX": {"NPS1"}, "DPX": {"NPS1"},
	"QPX": {"NPS1", "NPS4"}, "CPX": {"NPS1", "NPS4"}}

// amdSMI stands in for amd-smi's partition commands on the cards' sysfs
// folders (/sys/class/drm/cardN/device): current_compute_partition and
// current_memory_partition hold the card's modes, and a made partition is
// a file xcp/<index>-<ID>. It enforces the hardware's rules: a mode
// combination the card does not support is refused, and so is a mode
// change while any partition of the card exists; SPX is the card whole.
// It is a lifecycle.Tool and WholeSwitcher; Key.Profile is
// "<compute mode>/<memory mode>" and Key.Start the XCP's index.
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
	for _, e := range ents {
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
		return fmt.Errorf("amd-smi: %s/%s: MI300X supports SPX and DPX with NPS1, "+
			"QPX and CPX with NPS1 or NPS4", compute, memory)
	case len(c.parts) > 0:
		return fmt.Errorf("amd-smi: cannot set %s/%s: %d partitions of %s/%s are in use",
			compute, memory, len(c.parts), c.compute, c.memory)
	}
	write := func(mode, v string) error {
		f := filepath.Join(c.dir, "current_"+mode+"_partition")
		return os.WriteFile(f, []byte(v+"\n"), 0o644)
	}
	return errors.Join(write("compute", compute), write("memory", memory))
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
		return lifecycle.Partition{}, fmt.Errorf("amd-smi: GPU %s is in SPX mode: %w",
			k.Card, lifecycle.ErrWholeMode)
	case k.Start < 0 || k.Start >= xcps[compute]:
		return lifecycle.Partition{}, fmt.Errorf("amd-smi: %s has no XCP %d", k.Profile, k.Start)
	}
	for _, p := range c.parts {
		if p.Key == k {
			return p, nil
		}
	}
	if err := c.setModes(compute, memory); err != nil {
		return lifecycle.Partition{}, err
	}
	p := lifecycle.Partition{Key: k, ID: "xcp-" + rand.Text()[:12], Complete: true}
	return p, os.WriteFile(c.xcp(p), nil, 0o644)
}

// xcp is the file of partition p.
func (c card) xcp(p lifecycle.Partition) string {
	return filepath.Join(c.dir, "xcp", fmt.Sprint(p.Start, "-", p.ID))
}

// Destroy removes the partition at k, if it is there.
func (a amdSMI) Destroy(_ context.Context, k lifecycle.Key) error {
	c, err := a.read(k.Card)
	for _, p := range c.parts {
		if p.Key == k {
			return os.Remove(c.xcp(p))
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
