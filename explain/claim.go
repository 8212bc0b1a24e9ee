package explain

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// explainClaim explains a claim whose requests each fit on their own. It
// returns the claim's reasons and whether the claim as a whole fits.
func (n *nodeCtx) explainClaim(claim *resourceapi.ResourceClaim, label string) ([]Reason, bool) {
	if ok, _, err := n.run(n.base, []*resourceapi.ResourceClaim{claim}); err != nil {
		return []Reason{{Kind: AllocatorError, Claim: label, Message: fmt.Sprintf("the allocator fails: %v", err)}}, false
	} else if ok {
		return nil, true
	}
	free := *claim
	free.Spec.Devices.Constraints = nil
	if ok, _, _ := n.run(n.base, []*resourceapi.ResourceClaim{&free}); !ok {
		reqs := free.Spec.Devices.Requests
		var names []string
		for _, r := range reqs {
			names = append(names, r.Name)
		}
		pairs := conflicts(len(reqs), func(i, j int) bool {
			two := free
			two.Spec.Devices.Requests = []resourceapi.DeviceRequest{reqs[i], reqs[j]}
			ok, _, _ := n.run(n.base, []*resourceapi.ResourceClaim{&two})
			return ok
		}, func(i int) string { return reqs[i].Name })
		return []Reason{{Kind: Together, Claim: label,
			Message: fmt.Sprintf("requests %s each fit on their own, but not all together: they compete for the same devices or counters%s", strings.Join(names, ", "), pairs)}}, false
	}
	var out []Reason
	for i, c := range claim.Spec.Devices.Constraints {
		one := *claim
		one.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{c}
		if ok, _, _ := n.run(n.base, []*resourceapi.ResourceClaim{&one}); ok {
			continue
		}
		out = append(out, n.constraintReason(claim, label, i))
	}
	if len(out) == 0 {
		out = append(out, Reason{Kind: Constraint, Claim: label,
			Message: "each constraint can be met on its own, but not all of them at once"})
	}
	return out, false
}

// maxConflictItems bounds the pairs conflicts tries (n*(n-1)/2 allocator
// runs).
const maxConflictItems = 8

// conflicts returns "; X and Y do not fit together, ..." for the pairs
// of n items (requests or claims) for which fit is false, or "" when
// every pair fits (only more of them at once do not) or n is too large to
// try every pair.
func conflicts(n int, fit func(i, j int) bool, name func(int) string) string {
	if n <= 2 || n > maxConflictItems {
		return ""
	}
	var pairs []string
	for i := range n {
		for j := i + 1; j < n; j++ {
			if !fit(i, j) {
				pairs = append(pairs, name(i)+" and "+name(j))
			}
		}
	}
	if len(pairs) == 0 {
		return "; every two of them fit together"
	}
	return "; not together: " + strings.Join(pairs, ", ")
}

// constraintReason describes constraint i of claim: the attribute's
// values among the free devices that match each request it covers.
func (n *nodeCtx) constraintReason(claim *resourceapi.ResourceClaim, label string, i int) Reason {
	c := claim.Spec.Devices.Constraints[i]
	var attr resourceapi.FullyQualifiedName
	kind := ""
	switch {
	case c.MatchAttribute != nil:
		attr, kind = *c.MatchAttribute, "matchAttribute"
	case c.DistinctAttribute != nil:
		attr, kind = *c.DistinctAttribute, "distinctAttribute"
	default:
		return Reason{Kind: Constraint, Claim: label, Message: fmt.Sprintf("constraint #%d has no known type", i)}
	}
	covered := map[string]bool{}
	for _, r := range c.Requests {
		covered[r] = true
	}
	groups := map[string]map[string]int{}
	var needs []string
	for _, r := range claim.Spec.Devices.Requests {
		for _, rs := range specsOf(&r) {
			if len(covered) > 0 && !covered[r.Name] && !covered[rs.name] {
				continue
			}
			if rs.all {
				needs = append(needs, rs.name+" (all)")
			} else {
				needs = append(needs, fmt.Sprintf("%s (%d)", rs.name, rs.count))
			}
			for _, d := range n.freeMatching(rs) {
				v := missingVal
				if a, ok := lookupQualified(d, attr); ok {
					v = formatAttribute(a)
				}
				if groups[v] == nil {
					groups[v] = map[string]int{}
				}
				groups[v][rs.name]++
			}
		}
	}
	var out []AttributeGroup
	for v, g := range groups {
		out = append(out, AttributeGroup{Value: v, Devices: g})
	}
	sort.Slice(out, func(a, b int) bool { return naturalLess(out[a].Value, out[b].Value) })
	var parts []string
	for _, g := range out {
		var per []string
		for _, k := range sortedKeys(g.Devices) {
			per = append(per, fmt.Sprintf("%s %d", k, g.Devices[k]))
		}
		parts = append(parts, fmt.Sprintf("%s: %s", g.Value, strings.Join(per, ", ")))
	}
	verb := "the same value of"
	if kind == "distinctAttribute" {
		verb = "different values of"
	}
	return Reason{Kind: Constraint, Claim: label, Constraint: kind + " " + string(attr), Groups: out,
		Message: fmt.Sprintf("requests %s need devices with %s %s; free matching devices by value: %s",
			strings.Join(needs, ", "), verb, attr, orNone(strings.Join(parts, "; ")))}
}

// freeMatching returns the devices that match rs and are neither
// allocated nor tainted against it.
func (n *nodeCtx) freeMatching(rs reqSpec) []devInfo {
	class, err := n.classes.Get(rs.class)
	if err != nil {
		return nil
	}
	all := n.everyDevice()
	var out []devInfo
	for _, i := range n.filter(n.filter(all, class.Spec.Selectors), rs.selectors) {
		d := n.devices[i]
		if !n.state.AllocatedDevices.Has(d.id) && len(untolerated(d.dev, rs.tolerations)) == 0 {
			out = append(out, d)
		}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
