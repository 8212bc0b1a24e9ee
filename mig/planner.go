package mig

import (
	"fmt"
	"strconv"
	"time"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/plan"
)

// Request asks for one GPU instance of a profile.
//
// Deprecated: use plan.Request (Card for GPU) on Product.Scheme.
type Request struct {
	// ID names the request in plans; optional.
	ID string `json:"id,omitempty"`
	// Profile is the profile name, e.g. "3g.40gb"; only GPUs whose product
	// has this profile can take the request.
	Profile string `json:"profile"`
	// Node, when set, pins the request to that node.
	Node string `json:"node,omitempty"`
	// GPU, when set, pins the request to that GPU index (on Node, or on
	// any node when Node is empty).
	GPU *int `json:"gpu,omitempty"`
}

// OpKind is the kind of a plan operation: plan.OpKind.
type OpKind = plan.OpKind

// Operation kinds.
const (
	OpDestroy = plan.OpDestroy
	OpCreate  = plan.OpCreate
)

// Operation is one step of a plan: create or destroy one GPU instance.
//
// Deprecated: use plan.Operation (Card for GPU).
type Operation struct {
	Kind    OpKind `json:"kind"`
	Node    string `json:"node"`
	GPU     int    `json:"gpu"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	// Request is the index of the request a create serves, -1 for destroys.
	Request int `json:"request"`
}

// String prints e.g. "create node-a/gpu-0 3g.40gb@4 (request 2)".
func (o Operation) String() string {
	s := fmt.Sprintf("%-7s %s/gpu-%d %s@%d", o.Kind, o.Node, o.GPU, o.Profile, o.Start)
	if o.Request >= 0 {
		s += " (request " + strconv.Itoa(o.Request) + ")"
	}
	return s
}

// Assignment says where a placed request goes.
//
// Deprecated: use plan.Assignment (Card for GPU).
type Assignment struct {
	Request int    `json:"request"`
	Node    string `json:"node"`
	GPU     int    `json:"gpu"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	// Reused is true when an existing idle instance serves the request.
	Reused bool `json:"reused,omitempty"`
}

// Unplaced is a request the plan could not place: plan.Unplaced.
type Unplaced = plan.Unplaced

// Plan is the planner's result. Applying Operations in order (destroys
// first, then creates) turns the fleet into After.
//
// Deprecated: use plan.Plan (FreeCards for FreeGPUs).
type Plan struct {
	Operations  []Operation  `json:"operations"`
	Assignments []Assignment `json:"assignments"`
	Unplaced    []Unplaced   `json:"unplaced,omitempty"`
	// After is the fleet once the plan is applied: in-use instances plus
	// the placed requests' instances (marked in use), in fleet order.
	After []FleetGPU `json:"after"`
	// PlacedCompute is the compute slices of the placed requests.
	PlacedCompute int `json:"placedCompute"`
	// FreeGPUs is the number of GPUs with no instance in After.
	FreeGPUs int `json:"freeGPUs"`
	// Search reports the exact search PlanFleet runs when its heuristic
	// leaves requests unplaced, and whether the plan is proven optimal.
	Search Search `json:"search"`
}

// ErrFleet is wrapped by errors about the fleet or request input:
// partition.ErrFleet.
var ErrFleet = partition.ErrFleet

// PlanFleet computes a deterministic plan that places as many of the
// requests as it can, measured first in compute slices and then in count,
// on the fleet (plan.PlanFleet on the products' schemes): it never
// touches an in-use instance; idle instances are reused when one has the
// requested profile at a placement the plan chooses, and destroyed
// otherwise. Requests are placed largest first; each goes to the GPU and
// placement that lose the least fragmentation score (see FreeGPUBonus),
// so whole GPUs stay free and free space stays in large aligned blocks;
// a one-GPU fleet always gets an optimal plan. When the heuristic leaves
// requests unplaced, a split by product (two products that share a
// profile name), a neighbourhood search and an exact search follow, all
// within one work budget (WithWorkBudget, DefaultSearchWork;
// WithSearchBudget adds a time limit); Plan.Search reports them. Exact
// fills of 64 GPUs (H100-80GB, or H100-80GB with A100-40GB) are placed
// completely within the default budget
// (TestPlanFleetCompleteBeyondOneNode), and so are such fills with "+me"
// profiles, which are placed first, each on a GPU whose media engines
// are still free (TestPlanFleetCompleteWithME). Profile names must parse
// (ParseProfileName). PlanFleet is safe for concurrent use.
//
// Deprecated: use plan.PlanFleet with partition.FleetCard{Scheme: product.Scheme()}; it
// plans the same.
func PlanFleet(fleet []FleetGPU, requests []Request, opts ...plan.FleetOption) (*Plan, error) {
	cards, err := toCards("plan", fleet)
	if err != nil {
		return nil, err
	}
	reqs := make([]plan.Request, len(requests))
	for i, r := range requests {
		if _, err := ParseProfileName(r.Profile); err != nil {
			return nil, fmt.Errorf("plan: %w: requests[%d].profile: %w", ErrFleet, i, err)
		}
		if r.GPU != nil && *r.GPU < 0 {
			return nil, fmt.Errorf("plan: %w: requests[%d].gpu %d is negative", ErrFleet, i, *r.GPU)
		}
		reqs[i] = toRequest(r)
	}
	p, err := plan.PlanFleet(cards, reqs, opts...)
	if err != nil {
		return nil, err
	}
	out := &Plan{Unplaced: p.Unplaced, After: fromCards(p.After, fleet), PlacedCompute: p.PlacedCompute, FreeGPUs: p.FreeCards, Search: p.Search}
	for _, o := range p.Operations {
		out.Operations = append(out.Operations, Operation{Kind: o.Kind, Node: o.Node, GPU: o.Card, Profile: o.Profile, Start: o.Start, Request: o.Request})
	}
	for _, a := range p.Assignments {
		out.Assignments = append(out.Assignments, fromAssignment(a))
	}
	return out, nil
}

// Search reports PlanFleet's exact search: plan.Search.
type Search = plan.Search

// DefaultSearchBudget was the time PlanFleet's exact search could take
// by default; PlanFleet is bounded by work (DefaultSearchWork) and
// applies a time limit only when WithSearchBudget asks for one, such as
// this one.
const DefaultSearchBudget = 500 * time.Millisecond

// DefaultSearchWork is the work (search nodes) PlanFleet's searches may
// do when WithWorkBudget does not say otherwise:
// plan.DefaultSearchWork.
const DefaultSearchWork = plan.DefaultSearchWork

// Limits of Optimum: beyond them exhaustive search is not cheap.
const (
	OptimumMaxGPUs     = plan.OptimumMaxCards
	OptimumMaxRequests = plan.OptimumMaxRequests
)

// Value is the planner's objective: compute slices placed, then count
// (plan.Value).
type Value = plan.Value

// Value returns the plan's objective value.
func (p *Plan) Value() Value { return Value{Compute: p.PlacedCompute, Count: len(p.Assignments)} }

// Optimum computes, exhaustively, the best value any plan can reach on a
// small fleet (at most OptimumMaxGPUs GPUs and OptimumMaxRequests
// requests, none pinned; plan.Optimum): for every GPU it enumerates
// every valid completion of its in-use instances, then searches every
// combination. It is the yardstick for PlanFleet in tests and benchmarks.
//
// Deprecated: use plan.Optimum with partition.FleetCard{Scheme: product.Scheme()}.
func Optimum(fleet []FleetGPU, requests []Request) (Value, error) {
	if len(fleet) > OptimumMaxGPUs || len(requests) > OptimumMaxRequests {
		return Value{}, fmt.Errorf("optimum: %w: %d GPUs and %d requests exceed the limits %d and %d", ErrFleet, len(fleet), len(requests), OptimumMaxGPUs, OptimumMaxRequests)
	}
	cards, err := toCards("optimum", fleet)
	if err != nil {
		return Value{}, err
	}
	reqs := make([]plan.Request, len(requests))
	for i, r := range requests {
		if r.Node == "" && r.GPU == nil {
			if _, err := ParseProfileName(r.Profile); err != nil {
				return Value{}, fmt.Errorf("optimum: %w: requests[%d].profile: %w", ErrFleet, i, err)
			}
		}
		reqs[i] = toRequest(r)
	}
	return plan.Optimum(cards, reqs)
}

// FreeGPUBonus is added to the score of a GPU with no instances
// (plan.FreeCardBonus). With the whole-GPU profile's weight (49 for
// 7g) it makes breaking a free GPU cost more than any placement on a
// partly used one, so a planner breaks a free GPU only when no partly
// used GPU can take the instance.
const FreeGPUBonus = plan.FreeCardBonus
