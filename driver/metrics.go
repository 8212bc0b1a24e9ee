package driver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Error reasons used in the drakit_driver_errors_total metric and in logs.
const (
	ReasonGuard      = "DeviceInUse"
	ReasonConfig     = "InvalidConfig"
	ReasonVendor     = "VendorError"
	ReasonCheckpoint = "CheckpointError"
	ReasonCDI        = "CDIError"
	ReasonRollback   = "RollbackFailed"
	ReasonAllocation = "BadAllocation"
	ReasonCorrupt    = "CorruptCheckpoint"
	ReasonPublish    = "PublishError"
	ReasonAPI        = "APIError"
	ReasonDiscovery  = "DiscoveryError"
)

// metrics are the runtime's Prometheus metrics, in a registry of their own
// so that two drivers in one process (tests) do not collide.
type metrics struct {
	registry         *prometheus.Registry
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
			Help: "1 when the API server answered the last readiness check (or the first slice publish), 0 when it did not.", ConstLabels: labels,
		}),
		orphanedSpecs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drakit", Subsystem: "driver", Name: "orphaned_cdi_specs",
			Help: "CDI specs of claims not prepared that the last collection could not remove.", ConstLabels: labels,
		}),
	}
	m.registry.MustRegister(m.prepareSeconds, m.unprepareSeconds, m.errors, m.preparedClaims, m.publishedDevices, m.unhealthyDevices, m.apiReachable, m.orphanedSpecs,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(h prometheus.Histogram, start time.Time) {
	h.Observe(time.Since(start).Seconds())
}

func (m *metrics) error(op, reason string) {
	m.errors.WithLabelValues(op, reason).Inc()
}
