package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/explain"
)

// roomFirst returns the scheduler's slices with the devices of each
// slice in the order in which the suite's claims for any device take
// them: devices that consume no counters first, in the driver's order,
// then those that consume counters, the smallest share of their counter
// sets first. A partitionable driver lists each card's whole device
// first (the order it wants the scheduler to fill cards in); the suite's
// first claims would take whole cards and leave nothing for the checks
// after them. Which devices the suite's claims get does not change what
// a check judges; allocation.every-device and prepare.every-device
// allocate every device by itself, whole cards included.
func (s *scheduler) roomFirst() []*resourceapi.ResourceSlice {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roomy == nil {
		s.roomy = roomFirst(s.slices)
	}
	return s.roomy
}

func roomFirst(slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	// The capacity of every counter, by pool, set and name.
	capacity := map[string]map[string]map[string]float64{}
	for _, sl := range slices {
		for _, cs := range sl.Spec.SharedCounters {
			pool := capacity[sl.Spec.Pool.Name]
			if pool == nil {
				pool = map[string]map[string]float64{}
				capacity[sl.Spec.Pool.Name] = pool
			}
			set := map[string]float64{}
			for name, c := range cs.Counters {
				set[name] = c.Value.AsApproximateFloat64()
			}
			pool[cs.Name] = set
		}
	}
	share := func(pool string, d *resourceapi.Device) float64 {
		sum := 0.0
		for _, cc := range d.ConsumesCounters {
			for name, c := range cc.Counters {
				if have := capacity[pool][cc.CounterSet][name]; have > 0 {
					sum += c.Value.AsApproximateFloat64() / have
				}
			}
		}
		return sum
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, sl := range slices {
		if len(sl.Spec.Devices) < 2 {
			out = append(out, sl)
			continue
		}
		c := *sl
		c.Spec.Devices = append([]resourceapi.Device(nil), sl.Spec.Devices...)
		weight := make(map[string]float64, len(c.Spec.Devices))
		for i := range c.Spec.Devices {
			d := &c.Spec.Devices[i]
			if len(d.ConsumesCounters) > 0 {
				// Above every device that consumes nothing.
				weight[d.Name] = 1 + share(sl.Spec.Pool.Name, d)
			}
		}
		sort.SliceStable(c.Spec.Devices, func(i, j int) bool {
			return weight[c.Spec.Devices[i].Name] < weight[c.Spec.Devices[j].Name]
		})
		out = append(out, &c)
	}
	return out
}

// whyNoFit explains, for a failure message, why the allocator finds no
// allocation for claim among the driver's devices: which devices the
// suite's earlier claims hold, and which counters they use up (package
// explain, from the scheduler's own allocator). It is empty for a claim
// restricted to one device (dev), whose message names the device.
func (s *scheduler) whyNoFit(ctx context.Context, claim *resourceapi.ResourceClaim, dev *devRef) string {
	if dev != nil {
		return ""
	}
	held := s.held()
	snap := &explain.Snapshot{
		Nodes:   []*corev1.Node{s.node},
		Slices:  s.slices,
		Classes: s.classes.classes,
		Claims:  held,
	}
	rep, err := explain.Claim(ctx, snap, claim, explain.WithNodes(s.node.Name), explain.WithFeatures(allocFeatures))
	if err != nil {
		return fmt.Sprintf(" (no explanation: %v)", err)
	}
	var b strings.Builder
	if err := rep.WriteText(&b, explain.WithMaxNodes(1), explain.WithDetails(1)); err != nil {
		return fmt.Sprintf(" (no explanation: %v)", err)
	}
	var holders []string
	for _, c := range held {
		var devs []string
		for _, a := range ownResults(s.driver, c) {
			devs = append(devs, devRef{a.Pool, a.Device}.String())
		}
		holders = append(holders, fmt.Sprintf("%s: %s", c.Name, strings.Join(devs, ", ")))
	}
	heldNote := "the suite's claims hold no device now"
	if len(holders) > 0 {
		heldNote = "the suite's claims hold " + strings.Join(holders, "; ")
	}
	return fmt.Sprintf("; %s. Why nothing fits (drakit explain, with the scheduler's allocator):\n%s", heldNote, indent(strings.TrimRight(b.String(), "\n"), "  "))
}
