package plan

import (
	"time"

	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition"
)

// Request asks for one partition: its Profile (looked up by name in each
// card's scheme, Scheme.Canonical applied), an optional ID, and optional
// pins to a Node and a Card index.
type Request = engine.Request

// Plan is PlanFleet's result: Operations to apply in order (destroys,
// then creates), the Assignments of placed requests, the Unplaced ones
// with a reason, the fleet After the plan, PlacedCompute, FreeCards, and
// the Search report. Plan.Value is its objective value.
type Plan = engine.Plan

// Operation is one step of a plan: Kind (OpCreate or OpDestroy) of one
// partition, Profile at Start on card Card of Node; Request is the index
// of the request a create serves, -1 for a destroy.
type Operation = engine.Operation

// OpKind is the kind of an Operation.
type OpKind = engine.OpKind

// The kinds of an Operation.
const (
	OpDestroy = engine.OpDestroy
	OpCreate  = engine.OpCreate
)

// Assignment says where a placed request goes: Request's index, Node,
// Card, Profile, Start, and Reused when an existing idle partition
// serves it.
type Assignment = engine.Assignment

// Unplaced is a request (by index) a plan could not place, and why.
type Unplaced = engine.Unplaced

// Search reports PlanFleet's searches: whether they Ran, whether the plan
// is proven Optimal, whether they Improved on the heuristic, the Nodes
// visited, the Work and time Budget allowed, and a Note when a search did
// not run or did not finish.
type Search = engine.Search

// Value is the planner's objective: Compute units placed, then Count of
// requests placed. Value.Less orders values.
type Value = engine.Value

// DefaultSearchWork is PlanFleet's work budget (search nodes) when
// WithWorkBudget does not say otherwise.
const DefaultSearchWork = engine.DefaultSearchWork

// FreeCardBonus is what an empty card adds to the fragmentation score
// (partition.Scheme.Score), so that the planners keep whole cards free.
const FreeCardBonus = engine.FreeCardBonus

// Limits of Optimum: beyond them exhaustive search is not cheap.
const (
	OptimumMaxCards    = engine.OptimumMaxCards
	OptimumMaxRequests = engine.OptimumMaxRequests
)

// FleetOption configures PlanFleet. Options of Defragment, PlanLayouts,
// AssignFleet and package counter are other types and do not compile
// here; WithWorkBudget serves both PlanFleet and Defragment.
type FleetOption interface{ fleetOption() engine.Option }

type fleetOption struct{ o engine.Option }

func (o fleetOption) fleetOption() engine.Option { return o.o }

// WithSearchBudget adds a time limit to PlanFleet's searches on top of
// the work budget; 0 turns the searches off, so PlanFleet returns the
// heuristic's plan. A time limit makes the plan depend on how busy the
// machine is. d must not be negative.
func WithSearchBudget(d time.Duration) FleetOption {
	return fleetOption{engine.WithSearchBudget(d)}
}

// BudgetOption is an option that both PlanFleet and Defragment take.
type BudgetOption interface {
	FleetOption
	DefragOption
}

type budgetOption struct{ o engine.Option }

func (o budgetOption) fleetOption() engine.Option  { return o.o }
func (o budgetOption) defragOption() engine.Option { return o.o }

// WithWorkBudget bounds a search by work, not time, so that its result is
// the same on a busy and an idle machine: PlanFleet's search nodes
// (default DefaultSearchWork), Defragment's sets tried plus search nodes
// (default DefaultDefragWork). n must be positive.
func WithWorkBudget(n int) BudgetOption { return budgetOption{engine.WithWorkBudget(n)} }

// PlanFleet places as many of requests as it can on fleet, measured first
// in compute units and then in count. It never touches an in-use
// partition; idle partitions are reused when one has the requested
// profile at a placement the plan chooses, and destroyed otherwise.
// Requests go largest first to the card and placement that lose the
// least fragmentation score, so whole cards stay free; each card's
// placements are chosen exactly, so a one-card fleet always gets an
// optimal plan. When requests stay unplaced, exact searches follow,
// bounded by one work budget; Plan.Search says whether the plan is
// proven optimal. The result is deterministic.
func PlanFleet(
	fleet []partition.FleetCard, requests []Request, opts ...FleetOption,
) (*Plan, error) {
	return engine.PlanFleet(fleet, requests, engine.Convert(opts, FleetOption.fleetOption)...)
}

// Optimum computes exhaustively the best Value any plan can reach on a
// small fleet (at most OptimumMaxCards cards and OptimumMaxRequests
// requests, none pinned). It is the yardstick for PlanFleet in tests and
// benchmarks.
func Optimum(fleet []partition.FleetCard, requests []Request) (Value, error) {
	return engine.Optimum(fleet, requests)
}
