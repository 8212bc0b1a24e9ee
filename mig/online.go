package mig

import (
	"fmt"
	"time"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

// ModelGPUs turns one node's fleet entries into counter-model GPUs (index,
// product), in the given order.
func ModelGPUs(node []FleetGPU) ([]GPU, error) {
	out := make([]GPU, len(node))
	for i, f := range node {
		if err := f.Product.check(); err != nil {
			return nil, fmt.Errorf("model GPUs: %w: gpus[%d].product: %w", ErrFleet, i, err)
		}
		out[i] = GPU{Index: f.Index, Product: f.Product}
	}
	return out, nil
}

// Preference is the planner's online mode (counter.Preference with
// counter.WithCardsFirst). For one node's GPUs and their current
// instances (all treated as allocated, in use or not), it returns the
// names of every device of the node's counter model (NewCounterModel with
// all profiles, or with the profiles of WithProfiles) in the order the
// planner prefers them: full GPUs first (NVIDIA's classes keep full GPUs
// and MIG devices apart, so a claim never gets one for the other), then,
// per profile, the placements that fit, the least fragmentation loss
// first (ties: the GPU with the most instances, then the one with the
// fewest memory slices left free, then GPU order, then start), then the
// placements that do not fit. With memoryless lifetimes the GPU running
// the most instances is the last to drain, so packing onto it keeps the
// others emptying (measured: +0.3 to +0.7 points of compute-weighted
// acceptance over the fuller-GPU tie-break alone at loads 0.8 and 1.0 on
// 8 x H100, 20 seeds). A driver that publishes its slices with
// CounterModel.Reorder(names) makes the scheduler's first-fit choice for
// a one-instance request the planner's choice, since the allocator takes
// the first device in slice order whose counters are free. Recompute and
// republish after every allocation or release.
//
// With WithReserve(n), while at most n of the node's GPUs are free, the
// placements of partial profiles (all but the whole-GPU 7g) on free GPUs
// are left out of the list: a driver that publishes only the listed
// devices (CounterModel.Only) keeps those GPUs for whole-GPU requests.
// This is admission control, a policy choice, off by default: it rejects
// small requests while few GPUs are free so that whole-GPU requests find
// one; it lowers whole-GPU rejection and raises everyone else's, and
// compute-weighted acceptance can go either way ("drakit mig bench"
// prints the trade-off per load).
func Preference(node []FleetGPU, opts ...counter.OrderOption) ([]string, error) {
	cards, err := toCards("preference", node)
	if err != nil {
		return nil, err
	}
	nvidia := append([]counter.OrderOption{counter.WithCardsFirst()}, opts...)
	return counter.Preference(cards, nvidia...)
}

// WithFitOnly makes Preference list only the devices the scheduler can
// still allocate (counter.WithFitOnly): those that fit beside the
// node's in-use instances, and the devices of the in-use instances
// themselves. Leaving the others out changes no allocation result (the
// package's tests prove it with the real allocator), while the scheduler
// evaluates and stores far fewer devices on busy nodes. Publish the
// result with CounterModel.Only (or use CounterModel.PreferredPools),
// and republish after every change. A GPU allocated whole (device
// "gpu-<index>") has no instances, so leave its layout empty; describing
// it as a 7g instance would hide the whole-GPU device and show the 7g
// device as free. Preference only.
//
// Deprecated: use counter.WithFitOnly, the same option.
func WithFitOnly() counter.OrderOption { return counter.WithFitOnly() }

// WithProfiles makes Preference list only the devices of the profiles a
// driver advertises: for each GPU, the profiles of its product that
// profiles returns (nil or empty: all), the same set the driver gives
// NewCounterModel as GPU.Profiles, so that CounterModel.Reorder accepts
// every name. WithProfiles(DefaultProfiles) matches a model built with
// DefaultProfiles. A name the product lacks is an error of Preference.
// profiles gets the catalog's product, or for one built by FromNVML or
// NewProduct an equal product. profiles must not be nil. Preference
// only.
func WithProfiles(profiles func(p *Product) []string) counter.OrderOption {
	if profiles == nil {
		return counter.WithProfiles(nil)
	}
	return counter.WithProfiles(func(s *partition.Scheme) []string { return profiles(productOf(s)) })
}

// WithSearchBudget adds a time limit to PlanFleet's searches
// (plan.WithSearchBudget); 0 turns the searches off. d must not be
// negative. PlanFleet only.
//
// Deprecated: use plan.WithSearchBudget, the same option.
func WithSearchBudget(d time.Duration) plan.FleetOption { return plan.WithSearchBudget(d) }

// WithReserve makes Preference withhold partial-profile placements on free
// GPUs while at most n GPUs of the node are free (counter.WithReserve):
// admission control that trades small requests for whole-GPU ones. n must
// not be negative; 0 turns reservation off. Preference only.
//
// Deprecated: use counter.WithReserve, the same option.
func WithReserve(n int) counter.OrderOption { return counter.WithReserve(n) }
