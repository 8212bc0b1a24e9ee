package device

import (
	"context"
	"errors"
	"time"
)

// Discoverer is what a vendor implements to tell the runtime which devices
// exist. Both methods must be safe to call concurrently with each other.
type Discoverer interface {
	// Inventory returns the complete current inventory. The runtime calls
	// it at start and after every EventInventoryChanged. The runtime does
	// not modify the result; the Discoverer must not modify it afterwards
	// either (return a fresh value or a [Inventory.Clone]).
	Inventory(ctx context.Context) (*Inventory, error)
	// Watch sends events until ctx is done, then returns nil. It must not
	// block forever on a full channel after ctx is done. A Discoverer
	// without changes returns [ErrNoChanges] at once. Any other error ends
	// watching; the runtime logs it and calls Watch again after a delay.
	Watch(ctx context.Context, events chan<- Event) error
}

// ErrNoChanges is returned by [Discoverer.Watch] when the inventory never
// changes and there are no health events.
var ErrNoChanges = errors.New("discoverer has no changes to report")

// EventType says what an [Event] reports.
type EventType string

const (
	// EventInventoryChanged: devices appeared, disappeared or changed
	// (hot-plug, repartitioning); call [Discoverer.Inventory] again.
	EventInventoryChanged EventType = "InventoryChanged"
	// EventHealth: the health of the devices in [Event.Health] changed.
	EventHealth EventType = "Health"
)

// Event is one change reported by [Discoverer.Watch].
type Event struct {
	Type EventType
	// Health is set for EventHealth: the new health of some devices.
	// Devices not listed keep their previous health.
	Health []HealthReport
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
	// value of the health taint when it is a valid label value.
	Reason string
	// Message is a human-readable explanation.
	Message string
	// Time is when the health was observed; zero means now.
	Time time.Time
}

// StaticDiscoverer is a [Discoverer] of an inventory that never changes.
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
