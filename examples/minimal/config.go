package main

import (
	"fmt"

	"github.com/drakit/drakit/driver"
)

// DeviceConfig is the opaque configuration a DeviceClass or a claim may
// give this driver's devices, e.g. in a ResourceClaim:
//
//	config:
//	- opaque:
//	    driver: minimal.drakit.dev
//	    parameters: {"label": "blue"}
//
// It is decoded strictly ([driver.DecodeConfig]): a field this driver does
// not know, a typo like "lable", fails the prepare with an error that
// names it, instead of being ignored.
type DeviceConfig struct {
	// Label, when set, is given to the container in LabelEnvVar with the
	// device's suffix (MINIMAL_LABEL_DEV_0).
	Label string `json:"label,omitempty"`
}

// LabelEnvVar prefixes the variable a container gets for a device whose
// config sets a label; like EnvName, the device's name completes it, so
// that two devices with different labels do not overwrite each other.
const LabelEnvVar = "MINIMAL_LABEL"

// deviceConfig decodes the device's configs, class ones first, then the
// claim's, each overriding the fields it sets.
func deviceConfig(dev driver.AllocatedDevice) (DeviceConfig, error) {
	var cfg DeviceConfig
	if err := driver.DecodeConfig(dev, &cfg); err != nil {
		return DeviceConfig{}, fmt.Errorf("device %s: %w", dev.ID(), err)
	}
	return cfg, nil
}
