package explain

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// backtrackRequests is the number of interchangeable requests under one
// constraint from which a claim gets a shape warning. The allocator tries
// such requests in every order of the devices they may take; on nodes
// where the claim does not fit, the work grows factorially. Measured
// ("drakit mig bench -fleet", 8 x H100 with dynamic MIG, every GPU one 1g
// short, per node, three runs): 4 requests 16-40 ms, 6 requests 0.45-0.69
// s, 7 requests more than 3 s; one request with the same count 5-10,
// 24-38 and 48-71 ms. The scheduler gives up on a node after its filter
// timeout (10 s by default) and the pod stays pending.
const backtrackRequests = 4

// shapeWarnings returns a warning for each group of at least
// backtrackRequests requests of a claim that ask for the same kind of
// device (same class, selectors and count) one request each, under one
// matchAttribute or distinctAttribute constraint: the shape that makes the
// allocator backtrack. One request with the summed count asks for the
// same devices and the allocator tries each set of devices once.
func shapeWarnings(claims []*resourceapi.ResourceClaim, labels []string) []string {
	var out []string
	for ci, c := range claims {
		for _, con := range c.Spec.Devices.Constraints {
			name := ""
			switch {
			case con.MatchAttribute != nil:
				name = "matchAttribute " + string(*con.MatchAttribute)
			case con.DistinctAttribute != nil:
				name = "distinctAttribute " + string(*con.DistinctAttribute)
			default:
				continue
			}
			groups := map[string][]string{}
			counts := map[string]int64{}
			var order []string
			for _, r := range c.Spec.Devices.Requests {
				if r.Exactly == nil || r.Exactly.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
					continue
				}
				if len(con.Requests) > 0 && !contains(con.Requests, r.Name) {
					continue
				}
				k := requestKind(r.Exactly)
				if _, ok := groups[k]; !ok {
					order = append(order, k)
				}
				groups[k] = append(groups[k], r.Name)
				counts[k] += r.Exactly.Count
			}
			for _, k := range order {
				if len(groups[k]) < backtrackRequests {
					continue
				}
				out = append(out, fmt.Sprintf("claim %s: requests %s ask for the same devices one request each under %s; "+
					"the scheduler's allocator tries such requests in every order, which grows factorially on nodes where they do not fit "+
					"(7 requests took more than 3 s per node in the MIG fleet benchmark; the filter timeout is 10 s): "+
					"ask for one request with count %d and the same constraint instead",
					labels[ci], strings.Join(groups[k], ", "), name, counts[k]))
			}
		}
	}
	return out
}

// requestKind says what a request asks for, apart from its name: its
// class, selectors, count, tolerations, capacity and admin access.
func requestKind(r *resourceapi.ExactDeviceRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|%v|%v", r.DeviceClassName, r.Count, r.AdminAccess != nil && *r.AdminAccess, r.Capacity)
	for _, s := range r.Selectors {
		if s.CEL != nil {
			b.WriteString("|" + s.CEL.Expression)
		}
	}
	for _, t := range r.Tolerations {
		fmt.Fprintf(&b, "|%s %s %s %s", t.Key, t.Operator, t.Value, t.Effect)
	}
	return b.String()
}
