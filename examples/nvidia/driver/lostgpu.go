package driver

import (
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// A GPU that NVML lists but cannot read at start (it fell off the bus
// before the driver started, NVML answers GPU_IS_LOST) is not left out:
// the pods that ran on it must be seen, and the scheduler must know the
// GPU is there and unusable. It is published whole from what NVML did
// say, with the health taint of a lost GPU (ReasonGPULost, NoExecute),
// and read again every health heartbeat; once it answers, it is
// published as any other GPU, healthy again, without a restart.

// unreadable fills in dev, GPU g unreadable since the start, with the
// facts NVML gave before it failed.
func (d *Driver) unreadable(dev *device.Device, g *gpuInfo) *device.Device {
	dev.StringAttribute(mig.AttrType, TypeGPU).IntAttribute(mig.AttrIndex, int64(g.Index))
	for attr, v := range map[string]string{
		AttrUUID:         g.UUID,
		AttrProductName:  g.ProductName,
		AttrBrand:        g.Brand,
		AttrArchitecture: g.Architecture,
	} {
		if v != "" {
			dev.StringAttribute(attr, v)
		}
	}
	if g.MemoryMiB > 0 {
		dev.Capacity(mig.CapMemory, mib(g.MemoryMiB), nil)
	}
	return dev
}

// watchBroken marks the GPUs unreadable at start lost and, while one is,
// reads them again every heartbeat until Close.
func (d *Driver) watchBroken() {
	broken := false
	for _, g := range d.hw() {
		if g.broken != nil {
			d.health.markLost(g.Index, g.broken)
			broken = true
		}
	}
	if !broken {
		return
	}
	go func() {
		tick := time.NewTicker(d.o.heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-tick.C:
			}
			if !d.retryBroken() {
				return // every GPU answers
			}
		}
	}()
}

// retryBroken reads the GPUs unreadable since the start again; those that
// answer now are published as any GPU (health Healthy again). It reports
// whether one is still unreadable.
func (d *Driver) retryBroken() bool {
	listed, err := d.nv.GPUs()
	if err != nil {
		klog.Background().
			V(2).
			Info("Could not list the GPUs to read the unreadable ones again", "err", err)
		return true
	}
	gpus := d.hw()
	var fixed []gpuInfo
	left := false
	for _, g := range gpus {
		if g.broken == nil {
			continue
		}
		i := slices.IndexFunc(
			listed,
			func(l nvml.GPU) bool { return l.Index == g.Index && l.Err == nil },
		)
		if i < 0 {
			left = true
			continue
		}
		gi := gpuInfo{GPU: listed[i]}
		var anyMIG, anyProfile bool
		if err := d.readGPU(&gi, &anyMIG, &anyProfile); err != nil {
			left = true
			continue
		}
		fixed = append(fixed, gi)
	}
	if len(fixed) == 0 {
		return left
	}
	d.gpuMu.Lock()
	next := slices.Clone(d.gpus)
	for _, f := range fixed {
		next[f.Index] = f
	}
	d.gpus = next
	d.gpuMu.Unlock()
	m := &d.health
	for _, f := range fixed {
		klog.Background().
			Info(
				"A GPU unreadable since the start answers again; publishing it",
				"gpu",
				f.Index,
				"uuid",
				f.UUID,
			)
		m.mu.Lock()
		m.book.apply(
			nvml.HealthEvent{
				GPU:             f.Index,
				GPUInstance:     -1,
				ComputeInstance: -1,
				Recovered:       true,
				Time:            time.Now().UTC(),
			},
			nil,
		)
		if m.pending == nil {
			m.pending = map[int]bool{}
		}
		m.pending[f.Index] = true
		m.mu.Unlock()
	}
	d.changed() // the republish reports every device's health again
	return left
}
