package deploy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// Workload is one step of the story the demo tells and the end-to-end
// test checks: a pod (and the claim template it uses, if any) that asks
// the driver for devices in one of the ways users ask.
type Workload struct {
	// Name is the pod's name (and its template's).
	Name string
	// Ask says, for a newcomer, what the pod asks for.
	Ask string
	// Template is the pod's ResourceClaimTemplate; nil for a pod that
	// asks the old way (resources.limits) and gets a claim from the
	// scheduler.
	Template *resourceapi.ResourceClaimTemplate
	// Pod runs busybox and prints what it received: NVIDIA_VISIBLE_DEVICES,
	// the driver's NVIDIA_DRAKIT_* variables and its claim's devices file
	// (ContainerScript).
	Pod *corev1.Pod
	// Devices is how many devices the pod gets.
	Devices int
	// Fits is false for the request that cannot fit on the node: it stays
	// Pending with the scheduler's reason.
	Fits bool
}

// ContainerScript is what every story pod's container runs: it prints
// the devices it received (the driver's variables, an MPS share's limits
// and its claims' devices files), then sleeps until deleted.
const ContainerScript = `echo "` + nvdriver.EnvVisibleDevices + `=$` + nvdriver.EnvVisibleDevices +
	`"; env | grep -E '^(NVIDIA_DRAKIT_|CUDA_MPS_)' | sort; ` +
	`[ -n "$` + nvdriver.EnvClaimFileDir + `" ] && cat "$` + nvdriver.EnvClaimFileDir +
	`"/*.json; echo; echo END; sleep 3600`

// Story returns the workloads, in the demo's order, for pods in namespace
// ns running image (a busybox with sh, env, grep, cat, sleep; pull policy
// Never): a full GPU, a 1g and a 3g MIG device, two MIG devices on the
// same GPU (matchAttribute on the parent's UUID), a full GPU and a 1g MIG
// device the old way (resources.limits: nvidia.com/gpu, nvidia.com/mig-1g.18gb,
// served through the DeviceClasses' extendedResourceName), and nine full
// GPUs, which an eight-GPU node cannot give.
func Story(ns, image string) []Workload {
	one := func(name, class string) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{
			Name:    name,
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class},
		}
	}
	mig := func(profile string) string { return nvdriver.ProfileClass(profile) }
	ws := []Workload{
		claimWorkload(
			ns,
			image,
			"gpu",
			"one full GPU (ResourceClaimTemplate, class "+nvdriver.ClassGPU+")",
			1,
			resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{one("gpu", nvdriver.ClassGPU)},
			},
		),
		claimWorkload(
			ns,
			image,
			"mig-1g",
			"a 1g.18gb MIG device (class "+mig("1g.18gb")+")",
			1,
			resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{one("mig", mig("1g.18gb"))},
			},
		),
		claimWorkload(
			ns,
			image,
			"mig-3g",
			"a 3g.71gb MIG device (class "+mig("3g.71gb")+")",
			1,
			resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{one("mig", mig("3g.71gb"))},
			},
		),
		claimWorkload(
			ns,
			image,
			"mig-pair",
			"a 1g.18gb and a 2g.35gb MIG device on the same GPU (matchAttribute "+
				nvdriver.DriverName+"/"+nvdriver.AttrParentUUID+")",
			2,
			resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{
					one("small", mig("1g.18gb")),
					one("medium", mig("2g.35gb")),
				},
				Constraints: []resourceapi.DeviceConstraint{{
					MatchAttribute: ptr.To(
						resourceapi.FullyQualifiedName(
							nvdriver.DriverName + "/" + nvdriver.AttrParentUUID,
						),
					),
				}},
			},
		),
		limitsWorkload(ns, image, "legacy-gpu", nvdriver.ExtendedResourceGPU),
		limitsWorkload(ns, image, "legacy-mig", nvdriver.ProfileExtendedResource("1g.18gb")),
	}
	tooBig := claimWorkload(
		ns,
		image,
		"nine-gpus",
		"nine full GPUs at once (the node has eight)",
		9,
		resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{
				{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: nvdriver.ClassGPU,
					AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
					Count:           9,
				}},
			},
		},
	)
	tooBig.Fits = false
	return append(ws, tooBig)
}

func storyPod(ns, image, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "nvidia-dra-driver-story"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "ctr", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", ContainerScript},
			}},
		},
	}
}

func claimWorkload(
	ns, image, name, ask string,
	devices int,
	claim resourceapi.DeviceClaim,
) Workload {
	pod := storyPod(ns, image, name)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{
		{Name: "devices", ResourceClaimTemplateName: ptr.To(name)},
	}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "devices"}}
	return Workload{
		Name: name, Ask: ask, Devices: devices, Fits: true, Pod: pod,
		Template: &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimTemplateSpec{
				Spec: resourceapi.ResourceClaimSpec{Devices: claim},
			},
		},
	}
}

func limitsWorkload(ns, image, name, extended string) Workload {
	pod := storyPod(ns, image, name)
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		corev1.ResourceName(extended): resource.MustParse("1"),
	}
	return Workload{
		Name: name,
		Ask: fmt.Sprintf(
			"resources.limits %s: 1, the old way (no claim in its spec)",
			extended,
		),
		Devices: 1,
		Fits:    true,
		Pod:     pod,
	}
}

// Seen is what a story pod's container printed, parsed.
type Seen struct {
	// VisibleDevices is NVIDIA_VISIBLE_DEVICES as the container saw it:
	// nvdriver.VisibleDevicesVoid from the driver (its devices come from
	// CDI).
	VisibleDevices string
	// UUIDs are the device UUIDs the driver gave the container, one per
	// device variable (nvdriver.EnvDevicePrefix), in the variables'
	// order.
	UUIDs []string
	// Env are the NVIDIA_DRAKIT_* variables, and an MPS share's CUDA_MPS_*.
	Env map[string]string
	// DevicesFiles is the content of the devices files of the
	// container's claims.
	DevicesFiles string
	// Complete is true once the container printed everything (END).
	Complete bool
}

// ParseSeen parses the output of [ContainerScript].
func ParseSeen(log string) Seen {
	s := Seen{Env: map[string]string{}}
	var file []string
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(line, nvdriver.EnvVisibleDevices+"="):
			s.VisibleDevices = strings.TrimPrefix(line, nvdriver.EnvVisibleDevices+"=")
		case strings.HasPrefix(line, "NVIDIA_DRAKIT_") || strings.HasPrefix(line, "CUDA_MPS_"):
			k, v, _ := strings.Cut(line, "=")
			s.Env[k] = v
			if strings.HasPrefix(k, nvdriver.EnvDevicePrefix) {
				s.UUIDs = append(s.UUIDs, v)
			}
		case line == "END":
			s.Complete = true
		default:
			file = append(file, line)
		}
	}
	s.DevicesFiles = strings.TrimSpace(strings.Join(file, "\n"))
	return s
}
