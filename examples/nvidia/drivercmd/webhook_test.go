package drivercmd_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/admission"
	kit "github.com/drakit/drakit/driver"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// admissionCases are the reference driver's admission cases: a claim for
// one full GPU (request "gpu") with these configurations, and what the
// webhook answers (the message prepare gives; "" is allowed).
var admissionCases = []struct {
	name    string
	config  []resourceapi.DeviceClaimConfiguration
	wantErr string
}{
	{
		name: "correct",
		config: []resourceapi.DeviceClaimConfiguration{
			gpuConfig(
				`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
					`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			),
		},
	},
	{
		name: "unknown-field",
		config: []resourceapi.DeviceClaimConfiguration{
			gpuConfig(
				`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
					`{"strategy":"TimeSlicing","timeSlicingConfig":{"intervall":"Long"}}}`,
			),
		},
		wantErr: `invalid opaque device configuration: request "gpu": GpuConfig ` +
			`(gpu.nvidia.drakit.dev/v1alpha1) from the claim: json: unknown field "intervall"`,
	},
	{
		name: "bad-value",
		config: []resourceapi.DeviceClaimConfiguration{
			gpuConfig(
				`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
					`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`,
			),
		},
		wantErr: `invalid opaque device configuration: request "gpu": GpuConfig ` +
			`(gpu.nvidia.drakit.dev/v1alpha1): sharing.timeSlicingConfig.interval "Forever": ` +
			`want Default, Short, Medium or Long`,
	},
	{
		name: "other-driver",
		config: []resourceapi.DeviceClaimConfiguration{
			{
				DeviceConfiguration: resourceapi.DeviceConfiguration{
					Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: "resource.nvidia.com",
						Parameters: runtime.RawExtension{
							Raw: []byte(
								`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig",` +
									`"whatever":1}`,
							),
						}},
				},
			},
		},
	},
}

func gpuConfig(p string) resourceapi.DeviceClaimConfiguration {
	return resourceapi.DeviceClaimConfiguration{
		DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: nvdriver.DriverName, Parameters: runtime.RawExtension{Raw: []byte(p)}},
		},
	}
}

// TestWebhookSaysWhatPrepareSays: for each case, the webhook's answer
// (nvdriver.ConfigScheme) and the driver's PrepareClaim on the simulator
// for the same configuration on a full GPU: the same message, or both
// accept it.
func TestWebhookSaysWhatPrepareSays(t *testing.T) {
	v, err := admission.NewValidator(nvdriver.ConfigScheme())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithMIGEnabled(false),
	)
	if err != nil {
		t.Fatal(err)
	}
	d, err := nvdriver.New(sim, "node-1", nvdriver.WithStateDir(filepath.Join(dir, "state")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range admissionCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{
					{
						Name: "gpu",
						Exactly: &resourceapi.ExactDeviceRequest{
							DeviceClassName: "gpu.nvidia.drakit.dev",
							AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
							Count:           1,
						},
					},
				},
				Config: tc.config}}
			admitted := v.ValidateClaimSpec(&spec)
			// What the runtime hands the driver for the claim's device.
			dev := kit.AllocatedDevice{Request: "gpu", Pool: "node-1", Device: "gpu-0"}
			for _, c := range tc.config {
				if c.Opaque.Driver == nvdriver.DriverName {
					dev.Config = append(
						dev.Config,
						kit.OpaqueConfig{Parameters: json.RawMessage(c.Opaque.Parameters.Raw)},
					)
				}
			}
			claim := kit.Claim{
				ClaimRef: kit.ClaimRef{
					UID:       types.UID("uid-" + tc.name),
					Namespace: "default",
					Name:      tc.name,
				},
			}
			prepared := d.PrepareClaim(ctx, claim, []kit.AllocatedDevice{dev})
			if prepared == nil {
				_ = d.UnprepareClaim(ctx, claim.ClaimRef, []kit.AllocatedDevice{dev})
			}
			var ce *kit.ConfigError
			switch {
			case tc.wantErr == "":
				if admitted != nil || prepared != nil {
					t.Errorf("webhook %v, prepare %v; want both to accept", admitted, prepared)
				}
			case admitted == nil || admitted.Error() != tc.wantErr:
				t.Errorf("webhook: %v\nwant %s", admitted, tc.wantErr)
			case !errors.As(prepared, &ce) || ce.Error() != admitted.Error():
				t.Errorf("prepare said %v\nthe webhook %v", prepared, admitted)
			}
		})
	}
}
