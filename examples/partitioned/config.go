package main

import (
	"fmt"

	"github.com/drakit/drakit/driver"
)

// The driver's opaque configuration, in a claim or a DeviceClass:
//
//	config:
//	- opaque:
//	    driver: partitioned.drakit.dev
//	    parameters:
//	      apiVersion: partitioned.drakit.dev/v1
//	      kind: CardConfig
//	      clock: Boost
const (
	ConfigAPIVersion = DriverName + "/v1"
	ConfigKind       = "CardConfig"
)

// CardConfig is a card's configuration: its clock profile, which a
// container gets in ClockEnvVar with the device's suffix
// (PARTITIONED_CLOCK_CARD_0_A=Boost).
type CardConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Clock is Base (the default) or Boost.
	Clock string `json:"clock,omitempty"`
}

// ClockEnvVar prefixes the variable with a device's clock profile.
const ClockEnvVar = "PARTITIONED_CLOCK"

// validate checks a CardConfig on its own: at prepare, and at admission
// (the webhook refuses a claim with a bad one when it is created).
func (c *CardConfig) validate() error {
	switch c.Clock {
	case "", "Base", "Boost":
		return nil
	}
	return fmt.Errorf("clock %q: want Base or Boost", c.Clock)
}

// Scheme is the driver's configuration types: prepare decodes with it,
// and so does its admission webhook (`partitioned webhook`, package
// admission), so that a bad claim is refused when it is created with the
// message prepare would give.
var Scheme = func() *driver.ConfigScheme {
	typ := driver.NewConfigType(ConfigAPIVersion, ConfigKind, (*CardConfig).validate)
	s, err := driver.NewConfigScheme(DriverName, typ)
	if err != nil {
		panic(err) // constant: every test of the package would fail
	}
	return s
}()

// clock is the device's configured clock profile.
func clock(dev driver.AllocatedDevice) (string, error) {
	c, err := driver.DecodeAs[CardConfig](Scheme, dev)
	if err != nil || c == nil || c.Clock == "" {
		return "Base", err
	}
	return c.Clock, nil
}
