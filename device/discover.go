package device

import (
	"context"
	"errors"
	"time"
)

// ErrNoChanges is returned by a discoverer's Watch (see
// [github.com/drakit/drakit/driver.Discoverer]) when the inventory never
// changes and there are no health events.
var ErrNoChanges = errors.New("discoverer has no changes to report")

// EventType says what an [Event] reports.
type EventType string

const (
	// EventInventoryChanged: devices appeared, disappeared or changed
	// (hot-plug, repartitioning). The runtime publishes [Event.Inventory]
	// when it is set, else it calls Inventory again.
	EventInventoryChanged EventType = "InventoryChanged"
	// EventHealth: the health of the devices in [Event.Health] changed.
	EventHealth EventType = "Health"
)

// Event is one change reported by a discoverer's Watch.
type Event struct {
	Type EventType
	// Health is set for EventHealth: the new health of some devices.
	// Devices not listed keep their previous health.
	Health []HealthReport
	// Inventory may be set for EventInventoryChanged: the complete new
	// inventory, as Inventory would return it now (a discoverer that
	// just built it saves the runtime a second discovery). The
	// discoverer must not modify it after sending it.
	Inventory *Inventory
}

// Health is the health of a device (KEP-4680 values).
type Health string

const (
	// Healthy: the device works.
	Healthy Health = "Healthy"
	// Unhealthy: the device must not be used; the runtime taints it.
	Unhealthy Health = "Unhealthy"
	// Unknown: the health cannot be told now.
	Unknown Health = "Unknown"
)

// HealthReport is the health of one device.
type HealthReport struct {
	Device DeviceID
	Health Health
	// Reason is a short CamelCase reason ("XidError79"), used as the
	// value of the health taint when it is a valid label value. Only an
	// Unhealthy report has a taint: the Reason of a Healthy or Unknown
	// report is ignored.
	Reason string
	// TaintEffect is the effect of the health taint of an Unhealthy
	// report; empty means [NoSchedule] (no new allocations). Use
	// [NoExecute] for a device that can run nothing any more (a GPU
	// fallen off the bus), so that pods using it are evicted where the
	// cluster runs device taint eviction, or [NoEffect] for a taint that
	// only informs. Another value is refused by the API server when the
	// slice is published, so the runtime publishes [NoSchedule] instead
	// and logs the report. Ignored for a report that is not Unhealthy.
	TaintEffect TaintEffect
	// Message is a human-readable explanation, sent to the kubelet with
	// every health value. A device that is degraded but still serves
	// (corrected memory errors, a throttled link) is reported Healthy
	// with a Message; to make it visible to the scheduler and to users'
	// tolerations without keeping pods off it, the discoverer also puts
	// an informational taint with effect [NoEffect] on the device in its
	// inventory.
	Message string
	// Time is when the health was observed; zero means when the runtime
	// receives the report. The report is valid for the runtime's health
	// timeout from then: the kubelet sees the device as Unknown when no
	// newer report came by then.
	Time time.Time
}

// StaticDiscoverer is a discoverer of an inventory that never changes and
// has no health to report.
type StaticDiscoverer struct {
	Inv *Inventory
}

// Inventory returns a copy of the fixed inventory.
func (s StaticDiscoverer) Inventory(context.Context) (*Inventory, error) {
	if s.Inv == nil {
		return nil, errors.New("static discoverer: no inventory")
	}
	return s.Inv.Clone(), nil
}

// Watch returns [ErrNoChanges].
func (StaticDiscoverer) Watch(context.Context, chan<- Event) error { return ErrNoChanges }
