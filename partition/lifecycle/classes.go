package lifecycle

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/partition"
)

// Classes are the DeviceClasses of a driver whose devices the schemes
// name (render them into its chart with device.ClassesYAML): one for
// cards whole, "<card type>.<driver>" (gpu.example.com for card type
// "gpu"), and one per profile, "<profile>.<driver>" with the profile's
// name as in device names (cpx-nps4.example.com for "CPX/NPS4"); with a
// domain, each serves the extended resource "<domain>/<card type>" or
// "<domain>/<profile with _ for ->" (amd.com/gpu, amd.com/cpx_nps4), so
// that unchanged pods get a card or a partition. Profiles of the same
// name in two schemes share a class; a scheme that leaves out its type
// or profile attribute gets no class that would select on it.
func Classes(driverName, domain string, schemes ...*partition.Scheme) []device.Class {
	var out []device.Class
	add := func(name, sel, resource string) {
		if slices.ContainsFunc(out, func(c device.Class) bool { return c.Name == name }) {
			return
		}
		c := device.Class{Name: name + "." + driverName, Driver: driverName,
			Selectors: []string{sel}}
		if domain != "" {
			c.ExtendedResourceName = domain + "/" + strings.ReplaceAll(resource, "-", "_")
		}
		out = append(out, c)
	}
	attr := func(name string) string {
		return fmt.Sprintf("device.attributes[%q].%s", driverName, name)
	}
	for _, s := range schemes {
		n := s.Names
		if n.TypeAttribute == partition.Omit {
			continue
		}
		typ := attr(n.TypeAttribute) + " == "
		add(n.CardType, typ+strconv.Quote(n.CardType), n.CardType)
		if n.ProfileAttribute == partition.Omit {
			continue
		}
		for _, p := range s.ProfileNames() {
			pr, _ := s.Profile(p)
			name, err := s.DeviceName(0, p, pr.Placements[0].Start)
			if err != nil {
				continue
			}
			dns := strings.TrimPrefix(name, n.Device+"-0-")
			dns = strings.TrimSuffix(dns, "-"+strconv.Itoa(pr.Placements[0].Start))
			sel := fmt.Sprintf("%s%q && %s == %q", typ, n.PartitionType,
				attr(n.ProfileAttribute), p)
			add(dns, sel, dns)
		}
	}
	return out
}
