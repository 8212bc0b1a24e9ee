package driver

import (
	"strings"

	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
)

// MetricMIGDevices is the driver's own metric: the MIG devices (GPU
// instances) on each GPU, by profile and by who owns them (mode dynamic:
// made by the driver; static: an administrator's), read from NVML at each
// scrape. The chart's dashboard graphs it per GPU over time.
const MetricMIGDevices = "drakit_nvidia_mig_devices"

// DeviceKind is a device's kind in the runtime's metrics
// (kit.WithDeviceKind): the profile of a MIG device ("1g.18gb"), "gpu"
// for a GPU whole, "mps" for a shared GPU's device; read from the name,
// so a device no longer published has its kind too.
func DeviceKind(id device.DeviceID) string {
	if strings.HasSuffix(id.Device, SharedSuffix) {
		return SharingMPS
	}
	ref, err := mig.ParseDeviceName(id.Device)
	switch {
	case err != nil:
		return ""
	case ref.Profile == "":
		return TypeGPU
	}
	return ref.Profile
}

// migCollector is the Collector of MetricMIGDevices.
type migCollector struct {
	d    *Driver
	desc *prometheus.Desc
}

// Collector returns the driver's own Prometheus metrics (MetricMIGDevices),
// for the runtime's registry (Options adds it with kit.WithCollectors).
func (d *Driver) Collector() prometheus.Collector {
	return &migCollector{d: d, desc: prometheus.NewDesc(
		MetricMIGDevices,
		"MIG devices (GPU instances) on each GPU now, by profile and owner (mode: dynamic, made "+
			"by this driver; static, an administrator's), read from NVML at each scrape.",
		[]string{"gpu", "uuid", "profile", "mode"},
		prometheus.Labels{"node": d.node},
	)}
}

// Describe implements prometheus.Collector.
func (c *migCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: one NVML query per MIG-capable
// GPU. A GPU NVML cannot read is left out (and logged at V(4)).
func (c *migCollector) Collect(ch chan<- prometheus.Metric) {
	gpus := c.d.hw()
	for i := range gpus {
		g := &gpus[i]
		if g.product == nil || g.broken != nil {
			continue
		}
		gis, err := c.d.nv.GPUInstances(g.Index)
		if err != nil {
			klog.Background().
				V(4).
				Info("MIG metrics: cannot list MIG devices", "gpu", g.Index, "err", err)
			continue
		}
		mode := ModeStatic
		if c.d.dynamic(g) {
			mode = ModeDynamic
		}
		byProfile := map[string]int{}
		for _, gi := range gis {
			name := strconv.Itoa(gi.ProfileID)
			for _, p := range g.product.Profiles {
				if p.ID == gi.ProfileID {
					name = p.Name
				}
			}
			byProfile[name]++
		}
		for p, n := range byProfile {
			ch <- prometheus.MustNewConstMetric(
				c.desc, prometheus.GaugeValue, float64(n), strconv.Itoa(g.Index), g.UUID, p, mode,
			)
		}
	}
}
