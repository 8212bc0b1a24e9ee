package driver

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// Error reasons: the reason label of drakit_driver_errors_total, the
// "reason" of error logs and [ClaimError.Reason].
const (
	// ReasonGuard: a device of the claim is prepared for another claim
	// ([ErrDeviceInUse]).
	ReasonGuard = "DeviceInUse"
	// ReasonConfig: the claim's opaque configuration is invalid
	// ([ErrInvalidConfig]).
	ReasonConfig = "InvalidConfig"
	// ReasonVendor: the vendor's Preparer failed.
	ReasonVendor = "VendorError"
	// ReasonCheckpoint: the checkpoint could not be read or written.
	ReasonCheckpoint = "CheckpointError"
	// ReasonCDI: a CDI spec could not be written or removed.
	ReasonCDI = "CDIError"
	// ReasonRollback: undoing a failed prepare failed too; it is retried.
	ReasonRollback = "RollbackFailed"
	// ReasonAllocation: the claim's allocation is unusable (not for this
	// node, or a device the driver does not publish).
	ReasonAllocation = "BadAllocation"
	// ReasonCorrupt: a checkpoint record was corrupt and quarantined.
	ReasonCorrupt = "CorruptCheckpoint"
	// ReasonPublish: the ResourceSlices could not be published.
	ReasonPublish = "PublishError"
	// ReasonAPI: the API server could not be read.
	ReasonAPI = "APIError"
	// ReasonDiscovery: the discoverer's Inventory or Watch failed.
	ReasonDiscovery = "DiscoveryError"
)

// metrics are the runtime's Prometheus metrics, in a registry of their own
// so that two drivers in one process (tests) do not collide, and also in
// the vendor's registry with [WithRegisterer]. Neither has the Go and
// process collectors: those belong to the program (the runtime's HTTP
// server adds them to what it serves).
type metrics struct {
	registry         *prometheus.Registry
	inFlight         *prometheus.GaugeVec
	state            *stateCollector
	prepareSeconds   prometheus.Histogram
	unprepareSeconds prometheus.Histogram
	errors           *prometheus.CounterVec
	preparedClaims   prometheus.Gauge
	publishedDevices prometheus.Gauge
	unhealthyDevices prometheus.Gauge
	apiReachable     prometheus.Gauge
	orphanedSpecs    prometheus.Gauge
}

func newMetrics(driverName string) *metrics {
	labels := prometheus.Labels{"driver": driverName}
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &metrics{
		registry: prometheus.NewRegistry(),
		prepareSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "prepare_claim_duration_seconds",
			Help: "Time to prepare one claim, from the helper's call to the answer.", ConstLabels: labels, Buckets: buckets,
		}),
		unprepareSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "unprepare_claim_duration_seconds",
			Help: "Time to unprepare one claim.", ConstLabels: labels, Buckets: buckets,
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "errors_total",
			Help: "Errors by operation and reason.", ConstLabels: labels,
		}, []string{"operation", "reason"}),
		preparedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "prepared_claims",
			Help: "Claims currently prepared (checkpointed as prepared).", ConstLabels: labels,
		}),
		publishedDevices: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "published_devices",
			Help: "Devices in the last published inventory.", ConstLabels: labels,
		}),
		unhealthyDevices: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "unhealthy_devices",
			Help: "Devices currently reported unhealthy (and tainted).", ConstLabels: labels,
		}),
		apiReachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "api_server_reachable",
			Help: "1 after a slice publish went through (the first one waits for the API server), 0 after the ResourceSlice controller reported an error, until the next publish.", ConstLabels: labels,
		}),
		orphanedSpecs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "orphaned_cdi_specs",
			Help: "CDI specs of claims not prepared that the last collection could not remove.", ConstLabels: labels,
		}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "requests_in_flight",
			Help: "The kubelet's NodePrepareResources (operation=prepare) and NodeUnprepareResources (unprepare) calls being served, waiting for their turn included.", ConstLabels: labels,
		}, []string{"operation"}),
		state: newStateCollector(labels),
	}
	m.registry.MustRegister(m.collectors()...)
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.prepareSeconds, m.unprepareSeconds, m.errors, m.preparedClaims, m.publishedDevices, m.unhealthyDevices, m.apiReachable, m.orphanedSpecs, m.inFlight, m.state}
}

// register registers the metrics in r too; on failure none stays there.
func (m *metrics) register(r prometheus.Registerer) error {
	var done []prometheus.Collector
	for _, c := range m.collectors() {
		if err := r.Register(c); err != nil {
			for _, d := range done {
				r.Unregister(d)
			}
			return err
		}
		done = append(done, c)
	}
	return nil
}

// withRuntime is g plus the Go and process collectors, for the runtime's
// own HTTP server.
func withRuntime(g prometheus.Gatherer) prometheus.Gatherer {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return prometheus.Gatherers{g, r}
}

func (m *metrics) observe(h prometheus.Histogram, start time.Time) {
	h.Observe(time.Since(start).Seconds())
}

func (m *metrics) error(op, reason string) {
	m.errors.WithLabelValues(op, reason).Inc()
}

// request counts a kubelet call of operation in flight until the
// returned function runs.
func (m *metrics) request(operation string) (done func()) {
	g := m.inFlight.WithLabelValues(operation)
	g.Inc()
	return g.Dec
}

// stateCollector reports, at each scrape, the published devices by
// health and kind and the prepared claims' devices by kind, from the
// runtime's own state (no vendor call, no API request).
type stateCollector struct {
	devices, prepared *prometheus.Desc
	src               atomic.Pointer[stateSource]
}

// stateSource is what the collector reads, set once Run has it.
type stateSource struct {
	published interface{ Inventory() *device.Inventory }
	health    interface {
		Healths(now time.Time) map[device.DeviceID]string
	}
	engine *engine
	kind   func(device.DeviceID) string
}

func newStateCollector(labels prometheus.Labels) *stateCollector {
	return &stateCollector{
		devices: prometheus.NewDesc("drakit_driver_devices",
			"Published devices by health (Healthy, Unhealthy, Unknown: as the kubelet hears it) and kind (WithDeviceKind, e.g. a MIG profile; empty without it).",
			[]string{"health", "kind"}, labels),
		prepared: prometheus.NewDesc("drakit_driver_prepared_devices",
			"Devices of prepared claims by kind (WithDeviceKind); a device shared by several claims counts once per claim.",
			[]string{"kind"}, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.devices
	ch <- c.prepared
}

// Collect implements prometheus.Collector. Before Run has its state
// there is nothing to report.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	kind := src.kind
	if kind == nil {
		kind = func(device.DeviceID) string { return "" }
	}
	byHealth := map[[2]string]int{}
	if inv := src.published.Inventory(); inv != nil {
		health := src.health.Healths(time.Now())
		for _, p := range inv.Pools {
			for _, d := range p.Devices {
				id := device.DeviceID{Pool: p.Name, Device: d.Name()}
				byHealth[[2]string{health[id], kind(id)}]++
			}
		}
	}
	for k, n := range byHealth {
		ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	byKind := map[string]int{}
	for _, id := range src.engine.preparedDevices() {
		byKind[kind(id)]++
	}
	for k, n := range byKind {
		ch <- prometheus.MustNewConstMetric(c.prepared, prometheus.GaugeValue, float64(n), k)
	}
}

// preparedDevices are the devices of the prepared claims.
func (e *engine) preparedDevices() []device.DeviceID {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []device.DeviceID
	for _, r := range e.records {
		if r.State != checkpoint.StatePrepared {
			continue
		}
		for _, d := range r.Devices {
			out = append(out, device.DeviceID{Pool: d.Pool, Device: d.Device})
		}
	}
	return out
}
