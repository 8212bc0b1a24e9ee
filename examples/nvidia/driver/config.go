package driver

import (
	"errors"
	"fmt"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// ConfigAPIVersion and ConfigKind identify the driver's opaque
// configuration in a claim or class:
//
//	config:
//	- opaque:
//	    driver: gpu.nvidia.drakit.dev
//	    parameters:
//	      apiVersion: gpu.nvidia.drakit.dev/v1alpha1
//	      kind: GpuConfig
//	      sharing:
//	        strategy: TimeSlicing
//	        timeSlicingConfig:
//	          interval: Long
//
// The field names are those of NVIDIA's own driver (resource.nvidia.com
// GpuConfig), so that a migrating user's sharing block pastes unchanged;
// the driver and apiVersion lines are this driver's.
const (
	ConfigAPIVersion = DriverName + "/v1alpha1"
	ConfigKind       = "GpuConfig"
)

// GPUConfig is the driver's opaque device configuration. Unknown fields
// are an error that names them (ConfigScheme); a claim's config overrides
// its class's field by field.
type GPUConfig struct {
	// APIVersion must be ConfigAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind must be ConfigKind.
	Kind string `json:"kind"`
	// Sharing says how the containers that share the device share it;
	// nil is the GPU's default.
	Sharing *Sharing `json:"sharing,omitempty"`
}

// SharingStrategy is how a device is shared.
type SharingStrategy string

// The sharing strategies.
const (
	// TimeSlicing gives each process the full GPU in turns of a
	// time-slice (a full GPU's setting; MIG devices are not time-sliced).
	TimeSlicing SharingStrategy = "TimeSlicing"
)

// Sharing configures sharing of a device.
type Sharing struct {
	// Strategy must be TimeSlicing.
	Strategy SharingStrategy `json:"strategy"`
	// TimeSlicingConfig holds the time-slicing settings (NVIDIA's field
	// name).
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	// TimeSlicing is the former name of TimeSlicingConfig, still read.
	//
	// Deprecated: use TimeSlicingConfig; setting both is an error.
	TimeSlicing *TimeSlicingConfig `json:"timeSlicing,omitempty"`
}

// timeSlicing is the time-slicing settings under either name.
func (s *Sharing) timeSlicing() *TimeSlicingConfig {
	if s.TimeSlicingConfig != nil {
		return s.TimeSlicingConfig
	}
	return s.TimeSlicing
}

// TimeSlicingConfig is the time-slicing setting of a GPU.
type TimeSlicingConfig struct {
	// Interval is the time-slice: Default, Short, Medium or Long.
	Interval nvml.TimeSlice `json:"interval"`
}

// ConfigScheme is the driver's opaque configuration types (GPUConfig),
// the decoder its prepare and its admission webhook (package admission,
// `nvidia-dra-driver webhook`) share: a claim refused at admission gets
// the message its prepare would give.
func ConfigScheme() *kit.ConfigScheme { return configScheme }

var configScheme = func() *kit.ConfigScheme {
	s, err := kit.NewConfigScheme(
		DriverName,
		kit.NewConfigType(ConfigAPIVersion, ConfigKind, (*GPUConfig).validate),
	)
	if err != nil {
		panic(err) // a constant scheme: every test of the package would fail
	}
	return s
}()

// validate checks what a GPUConfig means on its own, at prepare and at
// admission; decodeConfig checks what depends on the device.
func (c *GPUConfig) validate() error {
	s := c.Sharing
	switch {
	case s == nil:
	case s.Strategy != TimeSlicing:
		return fmt.Errorf("sharing.strategy %q: want %s", s.Strategy, TimeSlicing)
	case s.TimeSlicing != nil && s.TimeSlicingConfig != nil:
		return errors.New(
			"sharing.timeSlicing and sharing.timeSlicingConfig are both set: keep " +
				"timeSlicingConfig",
		)
	case s.timeSlicing() != nil && !s.timeSlicing().Interval.Valid():
		return fmt.Errorf(
			"sharing.timeSlicingConfig.interval %q: want Default, Short, Medium or Long",
			s.timeSlicing().Interval,
		)
	}
	return nil
}

// decodeConfig decodes and checks the device's opaque configurations
// (ConfigScheme), then what depends on the device: a MIG device is not
// time-sliced. An error wraps kit.ErrInvalidConfig. devType is TypeGPU or
// TypeMIG.
func decodeConfig(dev kit.AllocatedDevice, devType string) (GPUConfig, error) {
	c, err := kit.DecodeAs[GPUConfig](configScheme, dev)
	if err != nil || c == nil {
		return GPUConfig{}, err
	}
	if s := c.Sharing; s != nil && devType != TypeGPU {
		return *c, &kit.ConfigError{Request: dev.Request, Type: configScheme.Types()[0].String(),
			Err: fmt.Errorf("sharing.strategy %s: only full GPUs are time-sliced, %s is %s",
				s.Strategy, dev.Device, kindOf(devType))}
	}
	return *c, nil
}

// timeSlice is the configured interval; "" when time-slicing is not
// configured.
func (c GPUConfig) timeSlice() nvml.TimeSlice {
	if c.Sharing == nil || c.Sharing.Strategy != TimeSlicing {
		return ""
	}
	if ts := c.Sharing.timeSlicing(); ts != nil && ts.Interval != "" {
		return ts.Interval
	}
	return nvml.TimeSliceDefault
}

// kindOf names a device type for a message.
func kindOf(devType string) string {
	if devType == TypeShared {
		return "an MPS share of a GPU"
	}
	return "a MIG device"
}
