package driver

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/claimwatch"
	"github.com/drakit/drakit/partition/fleet"
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
// device, ClassShared for MPS shares of GPUs with extendedResourceName
// nvidia.com/gpu.shared, and one ProfileClass per profile in profiles (in the given
// order, repeats dropped) with ProfileExtendedResource as its
// extendedResourceName. Profile names are canonicalized
// (mig.ParseProfileName, so "MIG 1g.18gb" is "1g.18gb"); a name that is
// not a profile name is kept as given, and the API server's validation of
// the class names it.
func DeviceClasses(profiles []string) []*resourceapi.DeviceClass {
	out := []*resourceapi.DeviceClass{
		class(
			ClassGPU,
			fmt.Sprintf(`device.attributes[%q].%s == %q`, DriverName, mig.AttrType, TypeGPU),
			ExtendedResourceGPU,
		),
		class(
			ClassMIG,
			fmt.Sprintf(`device.attributes[%q].%s == %q`, DriverName, mig.AttrType, TypeMIG),
			"",
		),
		class(ClassShared, fmt.Sprintf(
			`device.attributes[%q].%s == %q && device.attributes[%q].%s == %q`,
			DriverName, mig.AttrType, TypeShared, DriverName, AttrSharing, SharingMPS),
			ExtendedResourceShared),
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
		sel := fmt.Sprintf(
			`device.attributes[%q].%s == %q && device.attributes[%q].%s == %q`,
			DriverName,
			mig.AttrType,
			TypeMIG,
			DriverName,
			mig.AttrProfile,
			name,
		)
		out = append(out, class(ProfileClass(name), sel, ProfileExtendedResource(name)))
	}
	return out
}

func class(name, sel, extended string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{
		TypeMeta: metav1.TypeMeta{
			APIVersion: resourceapi.SchemeGroupVersion.String(),
			Kind:       "DeviceClass",
		},
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

// ClassProfile is what a request of DeviceClass class asks of a dynamic
// MIG GPU's layout: the profile of a ProfileClass, or
// partition.WholeCard for ClassGPU; false for any other class (ClassMIG
// takes any profile, so it asks for none in particular). It inverts
// ProfileClass for every profile name mig.ParseProfileName reads.
func ClassProfile(class string) (string, bool) {
	if class == ClassGPU {
		return partition.WholeCard, true
	}
	s, ok := strings.CutPrefix(class, "mig-")
	if !ok {
		return "", false
	}
	if s, ok = strings.CutSuffix(s, ".nvidia.drakit.dev"); !ok {
		return "", false
	}
	return profileFromParts(strings.Split(s, "-"))
}

// ExtendedResourceProfile is what an extended resource asks of a
// dynamic MIG GPU's layout: the profile of a ProfileExtendedResource, or
// partition.WholeCard for ExtendedResourceGPU; false for any other.
func ExtendedResourceProfile(name corev1.ResourceName) (string, bool) {
	if name == ExtendedResourceGPU {
		return partition.WholeCard, true
	}
	s, ok := strings.CutPrefix(string(name), "nvidia.com/mig-")
	if !ok {
		return "", false
	}
	return profileFromParts(strings.Split(s, "."))
}

// profileFromParts reads ["1g", "18gb", "me"] as "1g.18gb+me".
func profileFromParts(parts []string) (string, bool) {
	if len(parts) < 2 {
		return "", false
	}
	name := parts[0] + "." + parts[1]
	for _, p := range parts[2:] {
		name += "+" + p
	}
	n, err := mig.ParseProfileName(name)
	if err != nil {
		return "", false
	}
	return n.String(), true
}

// PlannerOptions are the partition/fleet options of the driver's layout
// planner: its classes and extended resources (ClassProfile,
// ExtendedResourceProfile) and its MIG products' schemes (Schemes).
func PlannerOptions() []fleet.Option {
	return []fleet.Option{
		fleet.WithClassProfile(ClassProfile),
		fleet.WithExtendedResource(ExtendedResourceProfile),
		fleet.WithSchemes(Schemes),
	}
}

// LayoutWatchOptions are the claimwatch options of the driver's classes
// and extended resources (ClassProfile, ExtendedResourceProfile).
//
// Deprecated: node agents no longer watch claims (every node held every
// claim of the cluster); the planner does, with PlannerOptions.
func LayoutWatchOptions() []claimwatch.Option {
	return []claimwatch.Option{
		claimwatch.WithClassFunc(ClassProfile),
		claimwatch.WithExtendedResourceFunc(ExtendedResourceProfile),
	}
}
