package mig

import (
	"fmt"
	"slices"
	"sort"
	"time"
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

// Preference is the planner's online mode. For one node's GPUs and their
// current instances (all treated as allocated, in use or not), it returns
// the names of every device of the node's counter model (NewCounterModel
// with all profiles, or with the profiles of WithProfiles) in the order the planner prefers them: full GPUs
// first, then, per profile, the placements that fit, the least
// fragmentation loss first (ties: the GPU with the most instances, then
// the one with the fewest memory slices left free, then GPU order, then
// start), then the placements that do not fit. With memoryless lifetimes
// the GPU running the most instances is the last to drain, so packing
// onto it keeps the others emptying (measured: +0.3 to +0.7 points of
// compute-weighted acceptance over the fuller-GPU tie-break alone at
// loads 0.8 and 1.0 on 8 x H100, 20 seeds). A driver that publishes
// its slices with CounterModel.Reorder(names) makes the scheduler's
// first-fit choice for a one-instance request the planner's choice, since
// the allocator takes the first device in slice order whose counters are
// free. Recompute and republish after every allocation or release.
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
func Preference(node []FleetGPU, opts ...Option) ([]string, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("preference: %w", err)
		}
	}
	pl := newPlanner()
	gpus, err := pl.load(node)
	if err != nil {
		return nil, fmt.Errorf("preference: %w", err)
	}
	freeGPUs := 0
	for _, g := range gpus {
		if g.fixed.used == 0 && len(g.idle) == 0 {
			freeGPUs++
		}
	}
	reserve := o.reserve > 0 && freeGPUs <= o.reserve
	type entry struct {
		name               string
		group              int
		fits               bool
		loss, free, gpu, i int
		running            int
	}
	var entries []entry
	groupOf := map[string]int{}
	for gi, g := range gpus {
		p := g.prod
		var allow []bool
		if o.profiles != nil {
			if allow, err = p.profileFilter(o.profiles(p)); err != nil {
				return nil, fmt.Errorf("preference: gpu %d: %w", node[gi].Index, err)
			}
		}
		st := g.fixed
		for _, si := range g.idle {
			p.add(&st, si)
		}
		full := entry{name: DeviceRef{GPU: node[gi].Index}.String(), fits: st.used == 0, gpu: gi}
		if !o.fitOnly || g.fixed.used == 0 {
			entries = append(entries, full)
		}
		before := g.sc.score(st)
		for si, sl := range p.slots {
			name := p.Profiles[sl.prof].Name
			grp, ok := groupOf[name]
			if !ok {
				grp = len(groupOf) + 1
				groupOf[name] = grp
			}
			if o.fitOnly && !p.fits(&g.fixed, si) && !slices.Contains(g.inUse, si) {
				continue
			}
			if allow != nil && !allow[sl.prof] {
				continue
			}
			if reserve && st.used == 0 && p.Profiles[sl.prof].MemorySlices < p.MemorySlices {
				continue
			}
			e := entry{name: p.slotDeviceName(node[gi].Index, si), group: grp, gpu: gi, i: si, running: len(node[gi].Layout)}
			if p.fits(&st, si) {
				after := st
				p.add(&after, si)
				e.fits = true
				e.loss = before - g.sc.score(after)
				e.free = p.MemorySlices - popcount(after.used)
			}
			entries = append(entries, e)
		}
	}
	sort.SliceStable(entries, func(a, b int) bool {
		x, y := entries[a], entries[b]
		if x.group != y.group {
			return x.group < y.group
		}
		if x.fits != y.fits {
			return x.fits
		}
		if !x.fits {
			return false // keep static order among devices that do not fit
		}
		if x.loss != y.loss {
			return x.loss < y.loss
		}
		if x.running != y.running {
			return x.running > y.running
		}
		if x.free != y.free {
			return x.free < y.free
		}
		if x.gpu != y.gpu {
			return x.gpu < y.gpu
		}
		return x.i < y.i
	})
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	return names, nil
}

// Option configures PlanFleet and Preference; each option says which it
// applies to, and the other ignores it.
type Option func(*options) error

type options struct {
	reserve   int
	budget    time.Duration
	budgetSet bool
	profiles  func(*Product) []string
	fitOnly   bool
	maxMoves  int
	work      int
}

// WithFitOnly makes Preference list only the devices the scheduler can
// still allocate: those that fit beside the node's in-use instances, and
// the devices of the in-use instances themselves (which the scheduler
// holds allocated, so their counters must stay visible). A device that
// overlaps an in-use instance can be part of no allocation until that
// instance goes, so leaving it out changes no allocation result (the
// package's tests prove it with the real allocator), while the scheduler
// evaluates and stores far fewer devices on busy nodes. Idle instances
// do not shrink the list: they are not allocated and the planner may
// replace them. Publish the result with CounterModel.Only (or use
// CounterModel.PreferredPools), and republish after every change, as for
// Preference. The in-use instances must be those of allocated devices of
// the model: a GPU allocated whole (device "gpu-<index>") has no
// instances, so leave its layout empty (its counters keep the scheduler
// off its other devices); describing it as a 7g instance would hide the
// whole-GPU device and show the 7g device as free. Preference only.
func WithFitOnly() Option {
	return func(o *options) error {
		o.fitOnly = true
		return nil
	}
}

// WithProfiles makes Preference list only the devices of the profiles a
// driver advertises: for each GPU, the profiles of its product that
// profiles returns (nil or empty: all), the same set the driver gives
// NewCounterModel as GPU.Profiles, so that CounterModel.Reorder accepts
// every name. WithProfiles(DefaultProfiles) matches a model built with
// DefaultProfiles. A name the product lacks is an error of Preference.
// profiles must not be nil. Preference only.
func WithProfiles(profiles func(p *Product) []string) Option {
	return func(o *options) error {
		if profiles == nil {
			return fmt.Errorf("profiles: function is nil")
		}
		o.profiles = profiles
		return nil
	}
}

// WithSearchBudget adds a time limit to PlanFleet's searches (see
// PlanFleet and Search), on top of the work budget; 0 turns the searches
// off, so PlanFleet returns the heuristic's plan. A time limit makes the
// plan depend on how busy the machine is; without this option PlanFleet
// is bounded by work alone (WithWorkBudget). d must not be negative.
// PlanFleet only.
func WithSearchBudget(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("search budget %s: must not be negative", d)
		}
		o.budget, o.budgetSet = d, true
		return nil
	}
}

// WithReserve makes Preference withhold partial-profile placements on free
// GPUs while at most n GPUs of the node are free (see Preference):
// admission control that trades small requests for whole-GPU ones. n must
// not be negative; 0 turns reservation off. Preference only.
func WithReserve(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("reserve %d: must not be negative", n)
		}
		o.reserve = n
		return nil
	}
}
