package plan

import (
	"github.com/drakit/drakit/internal/engine"
	"github.com/drakit/drakit/partition"
)

// Defrag is Defragment's result: whether the request fits (Found) after
// the Moves, its Target, the fleet After, its Score, the Work done and
// allowed (Budget), MaxMoves, whether the search finished (Complete) and
// the Reason when nothing was found or the search stopped.
type Defrag = engine.Defrag

// Move is one partition a defragmentation plan moves: its workload stops
// on Node/Card at Start and runs again on ToNode/ToCard at ToStart.
type Move = engine.Move

// DefaultMaxMoves is the most partitions Defragment moves when
// WithMaxMoves does not say otherwise.
const DefaultMaxMoves = engine.DefaultMaxMoves

// DefaultDefragWork is Defragment's work budget (sets of partitions tried
// plus search nodes) when WithWorkBudget does not say otherwise.
const DefaultDefragWork = engine.DefaultDefragWork

// DefragOption configures Defragment. Options of the other entry points
// do not compile here; WithWorkBudget serves both PlanFleet and
// Defragment.
type DefragOption interface{ defragOption() engine.Option }

type defragOption struct{ o engine.Option }

func (o defragOption) defragOption() engine.Option { return o.o }

// WithMaxMoves sets the most partitions Defragment may move (default
// DefaultMaxMoves); 0 only checks whether the request fits. k must be
// between 0 and 8.
func WithMaxMoves(k int) DefragOption { return defragOption{engine.WithMaxMoves(k)} }

// Defragment finds where a request for one partition can go on fleet if
// some restartable partitions move (partition.Instance.Restartable;
// other in-use partitions never move; idle ones count as free): the
// fewest moves, at most WithMaxMoves, and where each moved partition and
// the request go, all valid by each card's scheme; among plans with the
// fewest moves, the one with the best fragmentation score. The search is
// exact and bounded by work: Defrag.Complete says whether it finished.
// The result is deterministic.
func Defragment(fleet []partition.FleetCard, req Request, opts ...DefragOption) (*Defrag, error) {
	return engine.Defragment(fleet, req, engine.Convert(opts, DefragOption.defragOption)...)
}
