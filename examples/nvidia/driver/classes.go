package driver

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig"
)

// Names of the DeviceClasses DeviceClasses returns.
const (
	// ClassGPU selects full GPUs; extended resource nvidia.com/gpu.
	ClassGPU = "gpu.nvidia.drakit.dev"
	// ClassMIG selects any MIG device, static or dynamic.
	ClassMIG = "mig.nvidia.drakit.dev"
	// ExtendedResourceGPU is the device plugin's resource name for a
	// full GPU.
	ExtendedResourceGPU = "nvidia.com/gpu"
)

var profileReplacer = strings.NewReplacer(".", "-", "+", "-")

// ProfileClass is the DeviceClass of one MIG profile:
// "mig-<profile with . and + as ->.nvidia.drakit.dev", e.g.
// "mig-1g-18gb.nvidia.drakit.dev".
func ProfileClass(profile string) string {
	return "mig-" + profileReplacer.Replace(profile) + ".nvidia.drakit.dev"
}

// ProfileExtendedResource is the NVIDIA device plugin's mixed-strategy
// resource name of a MIG profile, e.g. "nvidia.com/mig-1g.18gb"; a "+"
// (not allowed in resource names) becomes ".", as the device plugin
// writes it ("nvidia.com/mig-1g.18gb.me").
func ProfileExtendedResource(profile string) string {
	return "nvidia.com/mig-" + strings.ReplaceAll(profile, "+", ".")
}

// DeviceClasses returns the driver's DeviceClasses: ClassGPU for full
// GPUs with extendedResourceName nvidia.com/gpu (so an unchanged
// "nvidia.com/gpu: 1" pod runs on this driver), ClassMIG for any MIG
// device, and one ProfileClass per profile in profiles (in the given
// order, repeats dropped) with ProfileExtendedResource as its
// extendedResourceName. Profile names are canonicalized
// (mig.ParseProfileName, so "MIG 1g.18gb" is "1g.18gb"); a name that is
// not a profile name is kept as given, and the API server's validation of
// the class names it.
func DeviceClasses(profiles []string) []*resourceapi.DeviceClass {
	out := []*resourceapi.DeviceClass{
		class(ClassGPU, fmt.Sprintf(`device.attributes[%q].%s == %q`, DriverName, mig.AttrType, TypeGPU), ExtendedResourceGPU),
		class(ClassMIG, fmt.Sprintf(`device.attributes[%q].%s == %q`, DriverName, mig.AttrType, TypeMIG), ""),
	}
	seen := map[string]bool{}
	for _, p := range profiles {
		name := p
		if n, err := mig.ParseProfileName(p); err == nil {
			name = n.String()
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		sel := fmt.Sprintf(`device.attributes[%q].%s == %q && device.attributes[%q].%s == %q`, DriverName, mig.AttrType, TypeMIG, DriverName, mig.AttrProfile, name)
		out = append(out, class(ProfileClass(name), sel, ProfileExtendedResource(name)))
	}
	return out
}

func class(name, sel, extended string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && %s", DriverName, sel),
			}}},
		},
	}
	if extended != "" {
		c.Spec.ExtendedResourceName = ptr.To(extended)
	}
	return c
}
