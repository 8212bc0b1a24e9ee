package mig

import (
	"fmt"
	"github.com/drakit/drakit/partition/plan"
)

// DefaultMaxMoves is the most instances Defragment moves when
// WithMaxMoves does not say otherwise: plan.DefaultMaxMoves.
const DefaultMaxMoves = plan.DefaultMaxMoves

// DefaultDefragWork is Defragment's work budget when WithWorkBudget does
// not say otherwise: plan.DefaultDefragWork.
const DefaultDefragWork = plan.DefaultDefragWork

// Move is one instance a defragmentation plan moves: its workload stops
// on Node/GPU at Start and runs again on ToNode/ToGPU at ToStart.
//
// Deprecated: use plan.Move (Card for GPU).
type Move struct {
	Node    string `json:"node"`
	GPU     int    `json:"gpu"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	ToNode  string `json:"toNode"`
	ToGPU   int    `json:"toGPU"`
	ToStart int    `json:"toStart"`
}

// String prints e.g. "node-a/gpu-0 1g.10gb@2 -> node-a/gpu-3@6".
func (m Move) String() string {
	return fmt.Sprintf("%s/gpu-%d %s@%d -> %s/gpu-%d@%d", m.Node, m.GPU, m.Profile, m.Start, m.ToNode, m.ToGPU, m.ToStart)
}

// Defrag is Defragment's result.
//
// Deprecated: use plan.Defrag.
type Defrag struct {
	// Found is true when the request fits after Moves (no moves when it
	// fits already).
	Found bool `json:"found"`
	// Target is where the request goes (Request is 0), when Found.
	Target Assignment `json:"target"`
	// Moves are the instances to move, fewest possible, in fleet order of
	// their current place.
	Moves []Move `json:"moves,omitempty"`
	// After is the fleet once the moves are done and the request placed:
	// GPUs the plan does not touch keep their layout; the others hold
	// their in-use instances that stay, the moved ones (in use, still
	// restartable) and the request's (in use). Idle instances on touched
	// GPUs are destroyed.
	After []FleetGPU `json:"after,omitempty"`
	// Score is the fragmentation score of After, summed over the GPUs
	// (higher is better; the planner's measure).
	Score int `json:"score"`
	// Work is the work the search did: sets of instances tried plus
	// search nodes.
	Work int `json:"work"`
	// Budget is the work the search was allowed (WithWorkBudget).
	Budget int `json:"budget"`
	// Complete is true when the search finished: the plan has the fewest
	// moves and, among those, the best score; or, when not Found, no plan
	// of at most MaxMoves moves exists. False when the budget ran out:
	// then a found plan may not be the best, and Reason says so.
	Complete bool `json:"complete"`
	// MaxMoves is the most moves the search allowed (WithMaxMoves).
	MaxMoves int `json:"maxMoves"`
	// Reason says why nothing was found, or why the search stopped.
	Reason string `json:"reason,omitempty"`
}

// WithMaxMoves sets the most instances Defragment may move (default
// DefaultMaxMoves; plan.WithMaxMoves); 0 only checks whether the
// request fits. k must be between 0 and 8. Defragment only.
//
// Deprecated: use plan.WithMaxMoves, the same option.
func WithMaxMoves(k int) plan.DefragOption { return plan.WithMaxMoves(k) }

// WithWorkBudget bounds a search by work, not time, so that a result is
// the same on a busy and an idle machine (plan.WithWorkBudget):
// Defragment's (sets of instances tried plus search nodes; default
// DefaultDefragWork) and PlanFleet's (search nodes of its neighbourhood
// and exact searches; default DefaultSearchWork). n must be positive.
//
// Deprecated: use plan.WithWorkBudget, the same option.
func WithWorkBudget(n int) plan.BudgetOption { return plan.WithWorkBudget(n) }

// Defragment finds where a request for one instance can go on the fleet
// if some restartable instances move (plan.Defragment on the
// products' schemes; Instance.Restartable; in-use instances that are not
// restartable never move; idle instances count as free): the fewest
// instances to move, at most WithMaxMoves, and the placement of each and
// of the request, such that all fit by the catalog's rules; among plans
// with the fewest moves, the one whose result has the best fragmentation
// score. Moved instances keep their profile and may go to any GPU whose
// product has it; the request follows its pins (Request.Node,
// Request.GPU). The search is exact and bounded by work (see
// WithWorkBudget): Defrag.Complete says whether it finished,
// Defrag.Reason why nothing was found. Errors are for invalid input only
// (wrapping ErrFleet). Defragment is safe for concurrent use.
//
// Deprecated: use plan.Defragment with partition.FleetCard{Scheme: product.Scheme()}.
func Defragment(fleet []FleetGPU, req Request, opts ...plan.DefragOption) (*Defrag, error) {
	cards, err := toCards("defragment", fleet)
	if err != nil {
		return nil, err
	}
	if _, err := ParseProfileName(req.Profile); err != nil {
		return nil, fmt.Errorf("defragment: %w: request profile: %w", ErrFleet, err)
	}
	if req.GPU != nil && *req.GPU < 0 {
		return nil, fmt.Errorf("defragment: %w: request gpu %d is negative", ErrFleet, *req.GPU)
	}
	d, err := plan.Defragment(cards, toRequest(req), opts...)
	if err != nil {
		return nil, err
	}
	out := &Defrag{Found: d.Found, Target: fromAssignment(d.Target), After: fromCards(d.After, fleet), Score: d.Score,
		Work: d.Work, Budget: d.Budget, Complete: d.Complete, MaxMoves: d.MaxMoves, Reason: d.Reason}
	for _, m := range d.Moves {
		out.Moves = append(out.Moves, Move{Node: m.Node, GPU: m.Card, Profile: m.Profile, Start: m.Start, ToNode: m.ToNode, ToGPU: m.ToCard, ToStart: m.ToStart})
	}
	return out, nil
}
