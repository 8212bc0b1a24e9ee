package deploy

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig"
)

// SharedWorkload is a pod, as the story's, that asks for an MPS share of
// a shared GPU (class nvdriver.ClassShared) with memory of its memory
// and the default compute: a small model of a fleet. Its container
// prints its MPS limits (CUDA_MPS_*) with the driver's variables.
func SharedWorkload(ns, image, name, memory string) Workload {
	requests := map[resourceapi.QualifiedName]resource.Quantity{
		mig.CapMemory: resource.MustParse(memory)}
	req := resourceapi.DeviceRequest{Name: "share", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: nvdriver.ClassShared,
		Capacity:        &resourceapi.CapacityRequirements{Requests: requests},
	}}
	ask := "an MPS share of a GPU with " + memory + " of its memory (class " +
		nvdriver.ClassShared + ")"
	return claimWorkload(ns, image, name, ask, 1,
		resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}})
}
