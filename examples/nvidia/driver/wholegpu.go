package driver

import (
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
)

// WithoutWholeDynamicGPUs offers dynamic GPUs as MIG devices only: the
// driver never turns a dynamic GPU's MIG mode off to hand it out whole
// (the device gpu-<i> of a dynamic GPU is not published, and a claim
// allocated it is refused). What the DynamicMIGWholeGPU feature gate
// switches off (package drivercmd). A claim that holds a dynamic GPU
// whole keeps it until it is unprepared.
func WithoutWholeDynamicGPUs() Option {
	return func(o *options) error { o.noWholeDynamic = true; return nil }
}

// isWhole reports whether a device of the counter model is a GPU whole.
func isWhole(d *device.Device) bool {
	ref, err := mig.ParseDeviceName(d.Name())
	return err == nil && ref.Profile == ""
}
