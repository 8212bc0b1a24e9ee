package driver

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// WithoutWholeDynamicGPUs offers dynamic GPUs as MIG devices only: the
// driver never turns a dynamic GPU's MIG mode off to hand it out whole
// (the device gpu-<i> of a dynamic GPU is not published, and a claim
// allocated it is refused). Without it, a dynamic GPU is offered whole
// only where its MIG mode can be left (Hopper and later, not a vGPU
// guest) and while no other NVML client holds it (nvml.ProcessLister,
// read again at every health heartbeat and before a whole-GPU prepare):
// the NVIDIA driver refuses the mode change then, and the claim's pod
// would wait in ContainerCreating on an allocation nothing changes.
// What the DynamicMIGWholeGPU feature gate switches off (package
// drivercmd). A claim that holds a dynamic GPU
// whole keeps it until it is unprepared.
func WithoutWholeDynamicGPUs() Option {
	return func(o *options) error { o.noWholeDynamic = true; return nil }
}

// isWhole reports whether a device of the counter model is a GPU whole.
func isWhole(d *device.Device) bool {
	ref, err := mig.ParseDeviceName(d.Name())
	return err == nil && ref.Profile == ""
}

// others is what NVML last said of the processes holding one GPU: a
// dynamic GPU is offered whole only while none does (Driver.wholeNow).
// Shared by every copy of the GPU's gpuInfo.
type others struct {
	mu    sync.Mutex
	read  bool
	procs []nvml.Process
	err   error
}

// readOthers asks NVML again which processes hold GPU g and reports
// whether the answer changed whether g can be offered whole.
func (d *Driver) readOthers(g *gpuInfo) (changed bool) {
	if g.others == nil {
		return false
	}
	var procs []nvml.Process
	err := fmt.Errorf(
		"this NVML backend cannot list the processes holding a GPU: %w",
		nvml.ErrNotSupported,
	)
	if pl, ok := d.nv.(nvml.ProcessLister); ok {
		procs, err = pl.Processes(g.Index)
	}
	o := g.others
	o.mu.Lock()
	defer o.mu.Unlock()
	was := o.read && o.err == nil && len(o.procs) == 0
	o.read, o.procs, o.err = true, procs, err
	return was != (err == nil && len(procs) == 0)
}

// heldByOthers says why other NVML clients keep g from being offered
// whole ("" when none holds it), reading NVML the first time.
func (d *Driver) heldByOthers(g *gpuInfo) string {
	if g.others == nil {
		return ""
	}
	g.others.mu.Lock()
	read := g.others.read
	g.others.mu.Unlock()
	if !read {
		d.readOthers(g)
	}
	o := g.others
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.err != nil:
		return fmt.Sprintf(
			"the processes holding it cannot be listed (%v), and its MIG mode is changed only "+
				"when none does",
			o.err,
		)
	case len(o.procs) > 0:
		ps := make([]string, len(o.procs))
		for i, p := range o.procs {
			ps[i] = fmt.Sprintf("%d (%s)", p.PID, p.Kind)
		}
		slices.Sort(ps)
		return fmt.Sprintf(
			"other NVML clients hold it (processes %s), and the NVIDIA driver refuses to change "+
				"its MIG mode while they do",
			strings.Join(ps, ", "),
		)
	}
	return ""
}

// wholeNow says whether dynamic GPU g is offered whole now, and why not:
// WithoutWholeDynamicGPUs not given, its MIG mode can be left
// (gpuInfo.wholeOK), and no other NVML client holds it.
func (d *Driver) wholeNow(g *gpuInfo) (bool, string) {
	if d.o.noWholeDynamic {
		return false, "dynamic GPUs are offered as MIG devices only (the DynamicMIGWholeGPU " +
			"gate is off)"
	}
	if ok, why := g.wholeOK(); !ok {
		return false, why
	}
	// A claim that holds it whole has its own processes on it.
	if why := d.heldByOthers(g); why != "" && !d.heldWhole(g) {
		return false, why
	}
	return true, ""
}

// heldWhole reports whether the lifecycle's journal says a claim holds g
// whole.
func (d *Driver) heldWhole(g *gpuInfo) bool {
	intents, err := d.lc.Intents()
	if err != nil {
		return true // unknown: keep what may be in use
	}
	return slices.ContainsFunc(intents, func(in lifecycle.Intent) bool {
		return in.Key == lifecycle.WholeCard(g.UUID) && len(in.Claims) > 0
	})
}

// pollOthers reads again which processes hold each dynamic GPU and
// schedules a republish when that changed whether one is offered whole.
func (d *Driver) pollOthers() {
	changed := false
	gpus := d.hw()
	for i := range gpus {
		g := &gpus[i]
		if g.product != nil && g.broken == nil && d.dynamic(g) && d.readOthers(g) {
			changed = true
		}
	}
	if changed {
		d.changed()
	}
}

// dynamicWhole is the dynamic GPU that dev names whole, if it does.
func (d *Driver) dynamicWhole(dev kit.AllocatedDevice) (*gpuInfo, bool) {
	ref, err := mig.ParseDeviceName(dev.Device)
	gpus := d.hw()
	if err != nil || ref.Profile != "" || ref.GPU < 0 || ref.GPU >= len(gpus) ||
		!d.dynamic(&gpus[ref.GPU]) {
		return nil, false
	}
	return &gpus[ref.GPU], true
}
